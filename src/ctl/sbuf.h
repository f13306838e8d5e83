/* A growable text buffer for the control plane's generated text (YAML from `config show`,
 * the Prometheus exposition): printf-style appends that double the room as needed, and one
 * `failed` flag that sticks after an allocation or format error, so callers check once at
 * the end. Internal to src/ctl. */
#ifndef SDDAQ_CTL_SBUF_H
#define SDDAQ_CTL_SBUF_H

#include <stdbool.h>
#include <stddef.h>

struct sbuf {
    char *p; /* NUL-terminated text, malloc'd; the caller frees it */
    size_t len, cap;
    bool failed;
};

/* Append printf(fmt, ...) to b; nothing once b has failed. */
void sbuf_put(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
