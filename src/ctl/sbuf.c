/* The growable text buffer of sbuf.h. */
#include "sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void sbuf_put(struct sbuf *b, const char *fmt, ...)
{
    while (!b->failed) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = true;
        } else if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        } else {
            size_t cap = b->cap * 2 + (size_t)n + 1;
            char *p = realloc(b->p, cap);
            if (p == NULL) {
                b->failed = true;
            } else {
                b->p = p;
                b->cap = cap;
            }
        }
    }
}
