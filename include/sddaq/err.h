/* Error codes shared by every sddaq component. A fallible call returns sdd_err: 0 on success,
 * a negative SDD_E* code otherwise. Data-path burst calls return a count >= 0 or a negative
 * sdd_err. One table (SDD_ERR_MAP) gives each code its name and message. */
#ifndef SDDAQ_ERR_H
#define SDDAQ_ERR_H

#include "sddaq/api.h"

/* X-macro: name, value, message. Values are stable; append new codes at the end. */
#define SDD_ERR_MAP(X)                                                          \
    X(OK, 0, "success")                                                         \
    X(EINVAL, -1, "invalid argument")                                           \
    X(ENOMEM, -2, "out of memory")                                              \
    X(EAGAIN, -3, "resource temporarily unavailable, try again")                \
    X(ETIMEDOUT, -4, "operation timed out")                                     \
    X(ECONNREFUSED, -5, "connection refused")                                   \
    X(ECONNRESET, -6, "connection closed by peer")                              \
    X(EPEERDEAD, -7, "peer is dead or unreachable")                             \
    X(EPROTO, -8, "protocol violation: malformed or unexpected data from peer") \
    X(ENOPROV, -9, "no matching fabric provider")                               \
    X(ENOTSUP, -10, "operation not supported")                                  \
    X(EFABRIC, -11, "fabric error")                                             \
    X(EIO, -12, "input/output error")                                           \
    X(ECLOSED, -13, "object is closed")                                         \
    X(ETOOBIG, -14, "size exceeds limit")                                       \
    X(EACCES, -15, "remote access denied (bad key, address or permission)")     \
    X(ENOENT, -16, "no such entry")                                             \
    X(EBUSY, -17, "resource busy")                                              \
    X(ECANCELED, -18, "operation canceled")                                     \
    X(EOS, -19, "operating system error")                                       \
    X(ECORRUPT, -20, "data corrupt (checksum or pattern mismatch)")             \
    X(EFENCED, -21, "fenced: the peers may have given this node up while it was cut off")

typedef enum {
#define SDD_ERR_ENUM(name, value, msg) SDD_##name = (value),
    SDD_ERR_MAP(SDD_ERR_ENUM)
#undef SDD_ERR_ENUM
} sdd_err_code;

/* 0 = ok, negative = one of sdd_err_code. */
typedef int sdd_err;

/* Human-readable message for an error code; never NULL ("unknown error" for foreign values). */
SDD_API const char *sdd_strerror(sdd_err err);

/* Symbolic name without prefix, e.g. "ETIMEDOUT"; never NULL. */
SDD_API const char *sdd_errname(sdd_err err);

/* Map a positive errno value to the closest sdd_err (SDD_EOS when nothing fits). */
SDD_API sdd_err sdd_err_from_errno(int errnum);

#endif
