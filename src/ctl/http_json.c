/* Strict parser for the control API's request body: one object whose keys are "to" (required)
 * and "reason" (optional), both strings. Anything else is an error with a message that the
 * server returns as {"error": ...}. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "http_json.h"

struct jp {
    const char *start, *p, *end;
    char *err;
    size_t err_len;
};

static int fail(struct jp *j, const char *msg)
{
    snprintf(j->err, j->err_len, "%s at byte %zu", msg, (size_t)(j->p - j->start));
    return -1;
}

static void ws(struct jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) {
        j->p++;
    }
}

static int hex4(struct jp *j, uint32_t *out)
{
    if (j->end - j->p < 4) {
        return -1;
    }
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = *j->p++;
        v <<= 4;
        if (c >= '0' && c <= '9') {
            v |= (uint32_t)(c - '0');
        } else if (c >= 'a' && c <= 'f') {
            v |= (uint32_t)(c - 'a' + 10);
        } else if (c >= 'A' && c <= 'F') {
            v |= (uint32_t)(c - 'A' + 10);
        } else {
            return -1;
        }
    }
    *out = v;
    return 0;
}

/* Append code point cp as UTF-8; -1 when it does not fit. */
static int put_utf8(char *dst, size_t len, size_t *o, uint32_t cp)
{
    unsigned char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (unsigned char)(0xC0 | (cp >> 6));
        b[1] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (unsigned char)(0xE0 | (cp >> 12));
        b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        b[0] = (unsigned char)(0xF0 | (cp >> 18));
        b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        b[3] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    if (*o + n >= len) {
        return -1;
    }
    memcpy(dst + *o, b, n);
    *o += n;
    return 0;
}

/* A string into dst (NUL-terminated); j->p at the opening quote. */
static int string(struct jp *j, char *dst, size_t len)
{
    size_t o = 0;
    if (j->p >= j->end || *j->p != '"') {
        return fail(j, "expected a string");
    }
    j->p++;
    while (j->p < j->end && *j->p != '"') {
        unsigned char c = (unsigned char)*j->p++;
        uint32_t cp = c;
        if (c < 0x20) {
            return fail(j, "control character in string");
        }
        if (c == '\\') {
            if (j->p >= j->end) {
                break;
            }
            char e = *j->p++;
            switch (e) {
            case '"':
            case '\\':
            case '/':
                cp = (uint32_t)e;
                break;
            case 'b':
                cp = '\b';
                break;
            case 'f':
                cp = '\f';
                break;
            case 'n':
                cp = '\n';
                break;
            case 'r':
                cp = '\r';
                break;
            case 't':
                cp = '\t';
                break;
            case 'u':
                if (hex4(j, &cp) != 0) {
                    return fail(j, "bad \\u escape");
                }
                if (cp >= 0xD800 && cp < 0xDC00) {
                    uint32_t lo;
                    if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u') {
                        return fail(j, "lone surrogate");
                    }
                    j->p += 2;
                    if (hex4(j, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF) {
                        return fail(j, "bad surrogate pair");
                    }
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    return fail(j, "lone surrogate");
                }
                if (cp == 0) {
                    return fail(j, "NUL character in string");
                }
                break;
            default:
                return fail(j, "bad escape");
            }
            if (put_utf8(dst, len, &o, cp) != 0) {
                return fail(j, "string too long");
            }
            continue;
        }
        if (o + 1 >= len) {
            return fail(j, "string too long");
        }
        dst[o++] = (char)c;
    }
    if (j->p >= j->end) {
        return fail(j, "unterminated string");
    }
    j->p++;
    dst[o] = '\0';
    return 0;
}

int ctl_json_parse_transition(const char *s, size_t len, char *to, size_t to_len, char *reason,
                              size_t reason_len, char *err, size_t err_len)
{
    struct jp j = {s, s, s + len, err, err_len};
    bool have_to = false, have_reason = false;
    to[0] = '\0';
    reason[0] = '\0';
    ws(&j);
    if (j.p >= j.end || *j.p != '{') {
        return fail(&j, "expected a JSON object");
    }
    j.p++;
    ws(&j);
    if (j.p < j.end && *j.p == '}') {
        j.p++;
    } else {
        for (;;) {
            char key[32];
            ws(&j);
            if (string(&j, key, sizeof(key)) != 0) {
                return -1;
            }
            ws(&j);
            if (j.p >= j.end || *j.p != ':') {
                return fail(&j, "expected ':'");
            }
            j.p++;
            ws(&j);
            if (strcmp(key, "to") == 0) {
                if (have_to) {
                    return fail(&j, "duplicate key 'to'");
                }
                have_to = true;
                if (string(&j, to, to_len) != 0) {
                    return -1;
                }
            } else if (strcmp(key, "reason") == 0) {
                if (have_reason) {
                    return fail(&j, "duplicate key 'reason'");
                }
                have_reason = true;
                if (string(&j, reason, reason_len) != 0) {
                    return -1;
                }
            } else {
                return fail(&j, "unknown key (expected 'to' and optionally 'reason')");
            }
            ws(&j);
            if (j.p < j.end && *j.p == ',') {
                j.p++;
                continue;
            }
            if (j.p < j.end && *j.p == '}') {
                j.p++;
                break;
            }
            return fail(&j, "expected ',' or '}'");
        }
    }
    ws(&j);
    if (j.p != j.end) {
        return fail(&j, "trailing bytes after the object");
    }
    if (!have_to) {
        snprintf(err, err_len, "missing key 'to'");
        return -1;
    }
    return 0;
}
