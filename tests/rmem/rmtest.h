/* Helpers for the remote-memory tests over one provider (argv[1], see fabtest.h). */
#ifndef SDDAQ_TEST_RMTEST_H
#define SDDAQ_TEST_RMTEST_H

#include "fabtest.h"
#include "sddaq/rmem.h"

/* Defaults, on the test's provider, bound to loopback. */
static inline struct sdd_rmem_opts opts_for_test(void)
{
    struct sdd_rmem_opts o;
    sdd_rmem_opts_default(&o);
    o.provider = ft_provider;
    o.host = "127.0.0.1";
    return o;
}

#endif
