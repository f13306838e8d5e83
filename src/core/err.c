/* Error names and messages from the single SDD_ERR_MAP table, and errno conversion. */
#include <errno.h>

#include "sddaq/err.h"

const char *sdd_strerror(sdd_err err)
{
    switch (err) {
#define SDD_ERR_MSG(name, value, msg) \
    case value:                       \
        return msg;
        SDD_ERR_MAP(SDD_ERR_MSG)
#undef SDD_ERR_MSG
    }
    return "unknown error";
}

const char *sdd_errname(sdd_err err)
{
    switch (err) {
#define SDD_ERR_NAME(name, value, msg) \
    case value:                        \
        return #name;
        SDD_ERR_MAP(SDD_ERR_NAME)
#undef SDD_ERR_NAME
    }
    return "EUNKNOWN";
}

sdd_err sdd_err_from_errno(int errnum)
{
    switch (errnum) {
    case 0:
        return SDD_OK;
    case EINVAL:
        return SDD_EINVAL;
    case ENOMEM:
        return SDD_ENOMEM;
    case EAGAIN:
    case EINTR:
        return SDD_EAGAIN;
    case ETIMEDOUT:
        return SDD_ETIMEDOUT;
    case ECONNREFUSED:
        return SDD_ECONNREFUSED;
    case ECONNRESET:
    case EPIPE:
    case ECONNABORTED:
        return SDD_ECONNRESET;
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ESRCH:
        return SDD_EPEERDEAD;
    case EPROTO:
        return SDD_EPROTO;
    case ENOTSUP:
        return SDD_ENOTSUP;
    case EIO:
        return SDD_EIO;
    case EMSGSIZE:
    case E2BIG:
    case EOVERFLOW:
        return SDD_ETOOBIG;
    case EACCES:
    case EPERM:
        return SDD_EACCES;
    case ENOENT:
        return SDD_ENOENT;
    case EBUSY:
    case EADDRINUSE:
        return SDD_EBUSY;
    case ECANCELED:
        return SDD_ECANCELED;
    }
    return SDD_EOS;
}
