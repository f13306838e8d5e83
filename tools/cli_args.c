/* Argument parsing shared by subcommands: sizes with K/M/G suffixes, size lists and ranges,
 * decimal numbers, host:port pairs. Malformed input is reported to the caller, never guessed at. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_parse_size(const char *s, uint64_t *out)
{
    if (s == NULL || *s == '\0') {
        return -1;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || s[0] == '-') {
        return -1;
    }
    unsigned shift = 0;
    switch (*end) {
    case '\0':
        break;
    case 'k':
    case 'K':
        shift = 10;
        break;
    case 'm':
    case 'M':
        shift = 20;
        break;
    case 'g':
    case 'G':
        shift = 30;
        break;
    default:
        return -1;
    }
    if (*end != '\0' && end[1] != '\0') {
        return -1;
    }
    if (v > (UINT64_MAX >> shift)) {
        return -1;
    }
    *out = (uint64_t)v << shift;
    return 0;
}

static int parse_range(const char *s, uint64_t *sizes, int max)
{
    char lo_s[32], hi_s[32];
    const char *colon = strchr(s, ':');
    size_t lo_len = (size_t)(colon - s);
    if (lo_len == 0 || lo_len >= sizeof(lo_s) || strlen(colon + 1) >= sizeof(hi_s)) {
        return -1;
    }
    memcpy(lo_s, s, lo_len);
    lo_s[lo_len] = '\0';
    snprintf(hi_s, sizeof(hi_s), "%s", colon + 1);
    uint64_t lo, hi;
    if (cli_parse_size(lo_s, &lo) != 0 || cli_parse_size(hi_s, &hi) != 0 || lo == 0 || hi < lo) {
        return -1;
    }
    int n = 0;
    for (uint64_t v = lo; v <= hi && n < max; v *= 2) {
        sizes[n++] = v;
        if (v > UINT64_MAX / 2) {
            break;
        }
    }
    return n;
}

int cli_parse_sizes(const char *s, uint64_t *sizes, int max)
{
    if (s == NULL || max <= 0) {
        return -1;
    }
    if (strchr(s, ':') != NULL) {
        return parse_range(s, sizes, max);
    }
    char buf[512];
    if (strlen(s) >= sizeof(buf)) {
        return -1;
    }
    snprintf(buf, sizeof(buf), "%s", s);
    int n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        if (n == max || cli_parse_size(tok, &sizes[n]) != 0) {
            return -1;
        }
        n++;
    }
    return n > 0 ? n : -1;
}

int cli_parse_hostport(const char *s, char *host, size_t host_len, uint16_t *port)
{
    const char *colon = strrchr(s, ':');
    if (colon == NULL || colon == s) {
        return -1;
    }
    const char *h = s;
    size_t hlen = (size_t)(colon - s);
    if (h[0] == '[' && hlen >= 2 && h[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    }
    if (hlen == 0 || hlen >= host_len) {
        return -1;
    }
    char *end = NULL;
    long p = strtol(colon + 1, &end, 10);
    if (*end != '\0' || p <= 0 || p > 65535) {
        return -1;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    *port = (uint16_t)p;
    return 0;
}

int cli_parse_double(const char *s, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v)) {
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_u32(const char *s, uint32_t *out, uint64_t max)
{
    uint64_t v;
    if (cli_parse_size(s, &v) != 0 || v > max || v > UINT32_MAX) {
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

int cli_parse_choice(const char *s, const char *const *names, int *out)
{
    for (int i = 0; names[i] != NULL; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return 0;
        }
    }
    return -1;
}

void cli_report_bad(const char *cmd, int c, const char *arg, bool bad)
{
    /* getopt itself reports unknown options and missing values ('?'). */
    if (bad && c != '?' && arg != NULL) {
        fprintf(stderr, "%s: invalid value '%s'\n", cmd, arg);
    }
}

int cli_help_or_missing(int argc, char **argv, void (*usage)(FILE *out))
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    return -1;
}

int cli_args_done(const char *cmd, bool bad, int next, int argc, char **argv)
{
    if (bad) {
        return -1;
    }
    if (next != argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", cmd, argv[next]);
        return -1;
    }
    return 0;
}
