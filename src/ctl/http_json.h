/* The one JSON document the control API reads: a transition request {"to":"<state>"} with an
 * optional "reason". A strict little parser (RFC 8259 syntax, strings with every escape), so
 * that the server needs no JSON library. Internal to src/ctl. */
#ifndef SDDAQ_CTL_HTTP_JSON_H
#define SDDAQ_CTL_HTTP_JSON_H

#include <stddef.h>

/* Parse a request body of len bytes (need not be NUL-terminated). On success returns 0 with
 * to and reason filled (reason "" when absent); otherwise -1 with a short message in err.
 * Unknown keys, duplicate keys, non-string values, trailing bytes, strings longer than the
 * buffers and NUL characters are all refused. */
int ctl_json_parse_transition(const char *s, size_t len, char *to, size_t to_len, char *reason,
                              size_t reason_len, char *err, size_t err_len);

#endif
