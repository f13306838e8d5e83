/* sddaq info: which fabric providers can carry sddaq here, and what each one offers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "sddaq/fabric.h"
#include "sddaq/log.h"

static const char *const candidates[] = {"shm",  "tcp", "verbs", "efa", "cxi",
                                         "psm3", "opx", "psm2",  "auto"};

int cmd_info(int argc, char **argv)
{
    (void)argv;
    if (argc > 1) {
        fprintf(stderr, "usage: sddaq info\n");
        return 2;
    }
    /* Absent providers are expected here; do not warn about each one. */
    if (getenv("SDDAQ_LOG") == NULL) {
        sdd_log_configure("error");
    }
    printf("%-8s %-14s %-16s %-8s %-8s %-7s %-24s\n", "asked", "provider", "domain", "inject",
           "cq_data", "waitfd", "mr mode");
    for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++) {
        struct sdd_ep_opts opts;
        sdd_ep_opts_default(&opts);
        opts.provider = candidates[i];
        sdd_ep *ep = NULL;
        sdd_err err = sdd_ep_open(&opts, &ep);
        if (err != SDD_OK) {
            printf("%-8s %s\n", candidates[i], sdd_strerror(err));
            continue;
        }
        const struct sdd_ep_info *in = sdd_ep_info(ep);
        char mr[64];
        snprintf(mr, sizeof(mr), "%s%s%s%s", in->mr_virt_addr ? "virt " : "offset ",
                 in->mr_prov_key ? "provkey " : "", in->mr_local ? "local " : "",
                 in->mr_endpoint ? "endpoint" : "");
        printf("%-8s %-14s %-16s %-8zu %-8zu %-7s %-24s\n", candidates[i], in->provider, in->domain,
               in->inject_size, in->cq_data_size, in->wait_fd ? "yes" : "no", mr);
        sdd_ep_close(ep);
    }
    return 0;
}
