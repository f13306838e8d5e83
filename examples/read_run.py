#!/usr/bin/env python3
"""Read an sddaq HDF5 run file with h5py: print the run attributes, loop over the events and
slice one event's bytes out of /events/data. The layout is described in docs/formats.md
("Run storage: HDF5").

usage: read_run.py RUN.h5 [--check]

--check also recomputes each event's CRC-32C (slow, pure Python) and compares it with
/events/crc32c; the exit status is 1 on any mismatch."""
import sys

import h5py
import numpy as np


def crc32c(data, crc=0):
    """CRC-32C (Castagnoli), bit by bit over numpy-unpacked bytes: slow but dependency-free."""
    crc ^= 0xFFFFFFFF
    for b in bytes(data):
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 2 if len(argv) < 2 else 0
    check = "--check" in argv[2:]
    with h5py.File(argv[1], "r") as f:
        print("attributes:")
        for key in sorted(f.attrs):
            print(f"  {key} = {f.attrs[key]!r}")
        ev = f["events"]
        ids, times, flags = ev["id"][:], ev["time_ns"][:], ev["flags"][:]
        offsets, sizes, crcs = ev["offset"][:], ev["size"][:], ev["crc32c"][:]
        data = ev["data"]  # not read whole: sliced per event below
        n = len(ids)
        print(f"events: {n}, payload bytes: {int(sizes.sum())}, "
              f"flagged: {int(np.count_nonzero(flags))}")
        bad = 0
        for i in range(n):
            off, size = int(offsets[i]), int(sizes[i])
            payload = data[off:off + size]  # one event's bytes, a numpy uint8 array
            if i < 5 or i == n - 1:
                print(f"  event {i}: id {ids[i]} time_ns {times[i]} flags {flags[i]:#x} "
                      f"size {size} head {payload[:8].tobytes().hex()}")
            if check and crc32c(payload) != int(crcs[i]):
                print(f"  event {i}: CRC-32C mismatch")
                bad += 1
        if check:
            print(f"checked {n} events, {bad} bad")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
