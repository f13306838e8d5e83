/* Geometry options shared by the emulator and the receiver, so both read them the same way. */
#include "readout_opts.h"

#include "cli.h"

int ro_cli_geometry(int c, const char *arg, struct sdd_ro_geometry *g, bool *shape_given)
{
    int rc;
    switch (c) {
    case 'i':
        rc = cli_parse_u32(arg, &g->stream_id, UINT32_MAX);
        break;
    case 'k':
        rc = cli_parse_u32(arg, &g->packets_per_frame, SDD_RO_MAX_PACKETS);
        *shape_given = true;
        break;
    case 's':
        rc = cli_parse_u32(arg, &g->payload_size, SDD_RO_MAX_PAYLOAD);
        *shape_given = true;
        break;
    default:
        return 0;
    }
    return rc == 0 ? 1 : -1;
}
