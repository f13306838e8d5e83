#!/usr/bin/env bash
# examples/read_run.py reads a run file written by sddaq with h5py: attributes, every event's
# size and bytes (CRC-32C recomputed in Python against /events/crc32c), and it notices a
# flipped byte. Skips (77) where no Python with h5py is installed.
# Usage: bash test_store_h5py.sh PATH/TO/sddaq
set -u -o pipefail

sddaq=${1:?usage: test_store_h5py.sh PATH/TO/sddaq}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/store-h5py.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export SDDAQ_LOG=none

py=
for cand in python3 /usr/bin/python3; do
    if command -v "$cand" >/dev/null && "$cand" -c 'import h5py, numpy' 2>/dev/null; then
        py=$cand
        break
    fi
done
[ -n "$py" ] || { echo "skipped: no python3 with h5py and numpy"; exit 77; }

f=$dir/run.h5
"$sddaq" store write "$f" -n 40 -s 0 --max-size 2000 --flag-every 5 --run 9 \
    --topology "hello h5py" >/dev/null || fail "store write"
out=$("$py" "$root/examples/read_run.py" "$f" --check) || fail "read_run.py: $out"
grep -q "run_number = 9" <<<"$out" || fail "run_number: $out"
grep -q "topology = 'hello h5py'" <<<"$out" || fail "topology: $out"
grep -q "format = 'sddaq-run'" <<<"$out" || fail "format: $out"
grep -q "^events: 40, payload bytes: .*, flagged: 8$" <<<"$out" || fail "events: $out"
grep -qE "event 0: id 0 time_ns [0-9]+ flags 0x1 size [0-9]+ head 00070e" <<<"$out" ||
    fail "event 0: $out"
grep -q "^checked 40 events, 0 bad$" <<<"$out" || fail "check: $out"
# The sizes in the file add up to what sddaq reports.
want=$("$sddaq" inspect "$f" --json | "$py" -c 'import json,sys; print(json.load(sys.stdin)["bytes"])')
grep -q "payload bytes: $want," <<<"$out" || fail "payload bytes differ from inspect ($want)"

# Flip a byte of event 3's payload (found through h5py) and see the example notice it.
"$py" - "$f" <<'PY' || fail "flip"
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    ev = f["events"]
    i = next(i for i in range(3, 40) if ev["size"][i] > 0)
    off = int(ev["offset"][i])
    ev["data"][off] = ev["data"][off] ^ 0xFF
PY
out=$("$py" "$root/examples/read_run.py" "$f" --check) && fail "read_run.py missed a flipped byte"
grep -q "CRC-32C mismatch" <<<"$out" || fail "no mismatch reported: $out"
"$sddaq" inspect "$f" --verify >/dev/null && fail "inspect --verify missed it"
echo "store h5py: ok"
