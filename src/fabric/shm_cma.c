/* Whether libfabric's shm provider moves data by cross-memory attach (process_vm_readv and
 * _writev, which the initiator does itself) or through the target's bounce buffers. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sddaq/fabric.h"

/* CMA unless told not to (FI_SHM_DISABLE_CMA) or unless Yama forbids sibling processes to read
 * each other (ptrace_scope > 0). */
bool sdd_shm_has_cma(void)
{
    const char *off = getenv("FI_SHM_DISABLE_CMA");
    if (off != NULL && (strcmp(off, "1") == 0 || strcasecmp(off, "true") == 0 ||
                        strcasecmp(off, "yes") == 0 || strcasecmp(off, "on") == 0)) {
        return false;
    }
    int scope = 0;
    FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
    if (f != NULL) {
        if (fscanf(f, "%d", &scope) != 1) {
            scope = 0;
        }
        fclose(f);
    }
    return scope == 0;
}
