#!/usr/bin/env python3
"""Read the RICH trigger records of an `sddaq run` HDF5 file with h5py: a run that reads NA62
packets straight into the RICH trigger (process `rich`, docs/run.md) writes one record per
event with at least one ring (docs/formats.md, "RICH trigger record"): the event's timestamp,
its hits as PM channels and its rings (centre, radius, RMS residual, spot, hits).

usage: read_rich_records.py RUN.h5 [--events N] [--totals]

--totals prints one line "records R rings G hits H bad B" (for scripts): records, rings and
hits in all of them, and records that do not decode (wrong magic, lengths that disagree, a ring
with no hits or a radius outside 0-500 mm)."""
import struct
import sys

import h5py
import numpy as np

RECORD_MAGIC = 0x52484352  # "RCHR"
HEADER = struct.Struct("<IIBBBx")  # magic, timestamp, hits, rings, boards
RING = struct.Struct("<ffffBBxxQ")  # cx, cy, r, rms, spot, hits, hit bitmap


def decode(buf):
    """(timestamp, boards, channels, rings) of one record, or None when it does not decode."""
    if len(buf) < HEADER.size:
        return None
    magic, ts, nhits, nrings, boards = HEADER.unpack_from(buf, 0)
    if magic != RECORD_MAGIC or nrings == 0:
        return None
    if len(buf) != HEADER.size + 2 * nhits + RING.size * nrings:
        return None
    channels = np.frombuffer(buf, dtype="<u2", count=nhits, offset=HEADER.size)
    rings = []
    off = HEADER.size + 2 * nhits
    for _ in range(nrings):
        cx, cy, r, rms, spot, n, bits = RING.unpack_from(buf, off)
        off += RING.size
        if n == 0 or not 0 < r < 500 or bin(bits).count("1") != n:
            return None
        rings.append((cx, cy, r, rms, spot, n))
    return ts, boards, channels, rings


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) >= 2 else 2
    show = 5
    if "--events" in argv:
        show = int(argv[argv.index("--events") + 1])
    with h5py.File(argv[1], "r") as f:
        ev = f["events"]
        data, offset, size = ev["data"][:], ev["offset"][:], ev["size"][:]
        ids = ev["id"][:]
    nrec = len(size)
    rings = hits = bad = 0
    for i in range(nrec):
        rec = decode(data[offset[i]:offset[i] + size[i]].tobytes())
        if rec is None:
            bad += 1
            continue
        ts, boards, channels, rr = rec
        rings += len(rr)
        hits += len(channels)
        if "--totals" not in argv and i < show:
            print("record %d (buffer %d, event %d): timestamp %d, boards %s, %d hits" %
                  (i, int(ids[i]) >> 16, int(ids[i]) & 0xFFFF, ts, bin(boards), len(channels)))
            for cx, cy, r, rms, spot, n in rr:
                print("  ring spot %d: centre (%.1f, %.1f) mm, radius %.1f mm, %d hits, "
                      "rms %.2f mm" % (spot, cx, cy, r, n, rms))
    if "--totals" in argv:
        print("records %d rings %d hits %d bad %d" % (nrec, rings, hits, bad))
    else:
        print("%d records, %d rings, %d hits, %d that do not decode" % (nrec, rings, hits, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
