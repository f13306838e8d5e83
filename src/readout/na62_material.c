/* The NA62 emulator's material comes from the RICH trigger's generator and packer, so what
 * the readout receives is what the ring finder expects (docs/formats.md "RICH packet"). */
#include <stdlib.h>

#include "sddaq/readout.h"
#include "sddaq/trigger.h"

sdd_err sdd_ro_na62_cycle(uint64_t seed, uint32_t events, uint8_t **bytes, size_t *len)
{
    sdd_rich_gen_opts go;
    sdd_rich_gen_opts_default(&go);
    go.seed = seed;
    sdd_rich_gen *g = NULL;
    sdd_err err = sdd_rich_gen_create(&go, &g);
    if (err != SDD_OK) {
        return err;
    }
    sdd_rich_event *evs = calloc(events, sizeof(*evs));
    /* An event's hits on each board fit one event record; a packet adds a header. */
    size_t cap = (size_t)events * SDD_RICH_MAX_BOARDS * sdd_rich_evt_bytes(SDD_RICH_MAX_HITS);
    uint8_t *buf = malloc(cap);
    if (evs == NULL || buf == NULL) {
        err = SDD_ENOMEM;
        goto out;
    }
    for (uint32_t i = 0; i < events; i++) {
        sdd_rich_gen_next(g, &evs[i]);
    }
    int64_t n = sdd_rich_pack(sdd_rich_gen_pmtab(g), evs, events, SDD_RO_NA62_MAX, buf, cap, NULL);
    if (n <= 0) {
        err = n < 0 ? (sdd_err)n : SDD_EINVAL;
        goto out;
    }
    *bytes = buf;
    *len = (size_t)n;
    buf = NULL;
out:
    free(buf);
    free(evs);
    sdd_rich_gen_destroy(g);
    return err;
}
