/* libfabric is opened on first use, not when a program starts. Debian's libfabric pulls in the
 * PSM libraries, whose constructor calibrates the TSC by sleeping for 100 ms, and its verbs
 * provider reads /proc/kallsyms: linked directly, every sddaq command paid about a quarter of a
 * second before main(), fabric or not. Only these five entry points are exported functions;
 * the rest of the API (fi_domain, fi_send, ...) is inline and goes through the objects they
 * return. Each is looked up at the symbol version a link against this API would record
 * (libfabric keeps old versions), so a newer library cannot change the ABI underneath.
 *
 * The same PSM constructor installs its own handlers for SIGINT, SIGSEGV, SIGBUS, SIGILL and
 * SIGABRT. Run before main(), it was overridden by sddaq's; run from a dlopen, it would take
 * Ctrl-C away from a run that is already going. So every signal's disposition is put back as
 * it was before the load. */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/ep_internal.h"
#include "sddaq/log.h"

#define LIBFABRIC_SONAME "libfabric.so.1"

static struct {
    int (*getinfo)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *,
                   struct fi_info **);
    void (*freeinfo)(struct fi_info *);
    struct fi_info *(*dupinfo)(const struct fi_info *);
    int (*fabric)(struct fi_fabric_attr *, struct fid_fabric **, void *);
    const char *(*strerror)(int);
    sdd_err status;
} lib;

static pthread_once_t lib_once = PTHREAD_ONCE_INIT;

static void *symbol(void *h, const char *name, const char *version)
{
    void *f = dlvsym(h, name, version);
    return f != NULL ? f : dlsym(h, name);
}

/* Standard signals only: the real-time ones are nobody's default business. */
static void *load(const char *name)
{
    struct sigaction old[32];
    for (int sig = 1; sig < 32; sig++) {
        sigaction(sig, NULL, &old[sig]);
    }
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    for (int sig = 1; sig < 32; sig++) {
        if (sig != SIGKILL && sig != SIGSTOP) {
            sigaction(sig, &old[sig], NULL);
        }
    }
    return h;
}

static void open_lib(void)
{
    /* A site's own build (a vendor's EFA or CXI libfabric, say) may be named outright. */
    const char *name = getenv("SDDAQ_LIBFABRIC");
    if (name == NULL || name[0] == '\0') {
        name = LIBFABRIC_SONAME;
    }
    void *h = load(name);
    if (h == NULL) {
        SDD_ERROR("fabric", "cannot load %s (%s): install libfabric1 or set SDDAQ_LIBFABRIC", name,
                  dlerror());
        lib.status = SDD_ENOPROV;
        return;
    }
    /* dlsym returns void *; POSIX guarantees it converts to a function pointer. */
    *(void **)&lib.getinfo = symbol(h, "fi_getinfo", "FABRIC_1.3");
    *(void **)&lib.freeinfo = symbol(h, "fi_freeinfo", "FABRIC_1.3");
    *(void **)&lib.dupinfo = symbol(h, "fi_dupinfo", "FABRIC_1.3");
    *(void **)&lib.fabric = symbol(h, "fi_fabric", "FABRIC_1.1");
    *(void **)&lib.strerror = symbol(h, "fi_strerror", "FABRIC_1.0");
    if (lib.getinfo == NULL || lib.freeinfo == NULL || lib.dupinfo == NULL || lib.fabric == NULL ||
        lib.strerror == NULL) {
        SDD_ERROR("fabric", "%s lacks the fi_getinfo API: not libfabric, or too old", name);
        lib.status = SDD_ENOPROV;
        lib.strerror = NULL;
        return; /* the handle stays open: a half-bound library must not be unmapped under us */
    }
    lib.status = SDD_OK;
}

sdd_err fi_lib_open(void)
{
    pthread_once(&lib_once, open_lib);
    return lib.status;
}

int fi_lib_getinfo(uint32_t version, const struct fi_info *hints, struct fi_info **info)
{
    if (fi_lib_open() != SDD_OK) {
        return -FI_ENOSYS;
    }
    return lib.getinfo(version, NULL, NULL, 0, hints, info);
}

void fi_lib_freeinfo(struct fi_info *info)
{
    if (info != NULL && fi_lib_open() == SDD_OK) {
        lib.freeinfo(info);
    }
}

struct fi_info *fi_lib_dupinfo(const struct fi_info *info)
{
    return fi_lib_open() == SDD_OK ? lib.dupinfo(info) : NULL;
}

int fi_lib_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric)
{
    if (fi_lib_open() != SDD_OK) {
        return -FI_ENOSYS;
    }
    return lib.fabric(attr, fabric, NULL);
}

const char *fi_lib_strerror(int err)
{
    if (fi_lib_open() != SDD_OK) {
        return strerror(err);
    }
    return lib.strerror(err);
}
