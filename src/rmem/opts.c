/* Defaults shared by every remote-memory object. */
#include <string.h>

#include "sddaq/rmem.h"

void sdd_rmem_opts_default(struct sdd_rmem_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->timeout_ms = 2000;
    opts->grace_ms = 2000;
    opts->max_clients = 256;
    opts->progress_thread = true;
    opts->wait_mode = SDD_WAIT_ADAPTIVE;
    opts->spin_us = 50;
}
