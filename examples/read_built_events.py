#!/usr/bin/env python3
"""Read the built events of an `sddaq run` HDF5 file with h5py and numpy: each record is one
built event (docs/formats.md, "Built event"): a header, a presence bitmap, a table with one
entry per source, then each present source's fragment (a 32-byte fragment header and its
payload). This prints a summary of the run and the first events source by source; a payload
that is a Hough stub block ("SH", docs/formats.md) is shown with its stub count.

usage: read_built_events.py RUN.h5 [--events N] [--totals]

--totals prints one line "events E complete C incomplete I stubs S" (for scripts): events, how
many have every source present, how many miss one, and the stubs in all stub-block payloads."""
import struct
import sys

import h5py
import numpy as np

EVENT_MAGIC = 0x45425645  # "EVBE"
FRAG_MAGIC = 0x46425645  # "EVBF"
FLAG_NAMES = {1: "MISSING", 2: "TIMEOUT", 4: "CORRUPT", 8: "SRC_LOST", 16: "RESENT"}


def flag_text(flags):
    names = [n for bit, n in FLAG_NAMES.items() if flags & bit]
    if flags & 0x100:
        names.append("TRIGGER_ERROR")
    return "|".join(names) or "-"


def decode(buf):
    """One built event: (event_id, flags, [(source, present, fragment_length, payload)])."""
    magic, version, flags, nsources, npresent, size, event_id = struct.unpack_from(
        "<IBBHIIQ", buf, 0)
    if magic != EVENT_MAGIC or version != 1 or size != len(buf):
        raise ValueError(f"not a built event (magic {magic:#x}, version {version}, "
                         f"size {size} of {len(buf)})")
    table = 32 + 8 * ((nsources + 63) // 64)
    sources = []
    for s in range(nsources):
        offset, length, sflags, _ = struct.unpack_from("<IIII", buf, table + 16 * s)
        if length == 0:
            sources.append((s, False, sflags, b""))
            continue
        fmagic, _, _, source, plen, _, fid = struct.unpack_from("<IBBHIIQ", buf, offset)
        if fmagic != FRAG_MAGIC or fid != event_id or offset + 32 + plen > len(buf):
            raise ValueError(f"event {event_id}: source {s}: bad fragment header")
        sources.append((source, True, sflags, buf[offset + 32:offset + 32 + plen]))
    return event_id, flags, npresent, sources


def stub_count(payload):
    """Stubs in a Hough stub block, or None when the payload is not one."""
    if len(payload) >= 8 and payload[:2] == b"SH" and payload[2] == 1:
        count = struct.unpack_from("<H", payload, 6)[0]
        if len(payload) == 8 + 6 * count:
            return count
    return None


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 2 if len(argv) < 2 else 0
    show = int(argv[argv.index("--events") + 1]) if "--events" in argv else 3
    totals = "--totals" in argv
    with h5py.File(argv[1], "r") as f:
        ev = f["events"]
        offsets, sizes, flags = ev["offset"][:], ev["size"][:], ev["flags"][:]
        data = ev["data"][:]  # the whole run in memory: fine for a demo-sized file
        n = len(offsets)
        complete = incomplete = stubs = 0
        for i in range(n):
            buf = data[int(offsets[i]):int(offsets[i]) + int(sizes[i])].tobytes()
            event_id, eflags, npresent, sources = decode(buf)
            if npresent == len(sources):
                complete += 1
            else:
                incomplete += 1
            counts = [stub_count(p) for _, present, _, p in sources if present]
            stubs += sum(c for c in counts if c is not None)
            if i < show and not totals:
                print(f"event {event_id}: flags {flag_text(eflags)} (record flags "
                      f"{int(flags[i]):#x}), {npresent} of {len(sources)} sources")
                for source, present, sflags, payload in sources:
                    if not present:
                        print(f"  source {source}: absent ({flag_text(sflags)})")
                        continue
                    c = stub_count(payload)
                    what = f"Hough stub block, {c} stubs" if c is not None else \
                        f"head {payload[:8].hex()}"
                    print(f"  source {source}: {len(payload)} B, {what}")
        if totals:
            print(f"events {n} complete {complete} incomplete {incomplete} stubs {stubs}")
        else:
            print(f"{n} events: {complete} complete, {incomplete} missing a source; "
                  f"{stubs} stubs in stub blocks; run {f.attrs['run_number']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
