#!/usr/bin/env bash
# sddaq run over a matrix of event-builder settings that stress its buffers: two RUs and two BUs
# over tcp and shm, bulks of 7 and 512 events, 1 and 4 credits, links of depth 2 and 16 into a
# raw writer and a feedback stage (or a 2-thread prescale and an HDF5 writer). Every run must
# end OK within 60 s with every event accounted for, and no builder may stall on the way (a
# builder that waits inside a delivery for a buffer a writer holds goes silent for seconds:
# "in doubt", "silent for N ms"). Before the builder set a bulk's buffers aside first, 13 of 92
# such tcp runs stalled and 7 hung for a minute (session 19).
# Usage: bash test_run_matrix.sh PATH/TO/sddaq
set -u -o pipefail

sddaq=${1:?usage: test_run_matrix.sh PATH/TO/sddaq}
sddaq=$(cd "$(dirname "$sddaq")" && pwd)/$(basename "$sddaq")
dir=$(mktemp -d "${TMPDIR:-/tmp}/run-matrix.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export SDDAQ_LOG=warn
py=$(command -v python3) || { echo "skipped: python3 (for JSON) not installed"; exit 77; }
cd "$dir" || exit 1

# topology NAME PROVIDER BULK CREDITS DEPTH WITH_PRESCALE
topology() {
    local name=$1 prov=$2 bulk=$3 credits=$4 depth=$5 prescale=$6 to=w fmt=raw
    if [ "$prescale" = 1 ]; then
        to=p
        fmt=hdf5
    fi
    echo "run: {name: $name, output_dir: $dir/out}"
    echo "fabric: {provider: $prov}"
    echo "nodes: [{name: n, control_port: 0}]"
    echo "stages:"
    for i in 0 1; do
        echo "  - {name: s$i, type: source, kind: evb-emu, fragment: {dist: uniform, size: 300}}"
        echo "  - {name: ru$i, type: ru, bulk_size: $bulk, credits: $credits}"
        echo "  - {name: bu$i, type: bu, bulk_size: $bulk, credits: $credits}"
    done
    [ "$prescale" = 1 ] &&
        echo "  - {name: p, type: process, algorithm: prescale, factor: 3, threads: 2}"
    echo "  - {name: w, type: writer, format: $fmt}"
    echo "  - {name: fb, type: feedback, size: 64K}"
    echo "links:"
    for i in 0 1; do
        echo "  - {from: s$i, to: ru$i}"
        echo "  - {from: ru$i, to: bu0}"
        echo "  - {from: ru$i, to: bu1}"
        echo "  - {from: bu$i, to: $to, depth: $depth}"
    done
    if [ "$prescale" = 1 ]; then
        echo "  - {from: p, to: w, depth: $depth}"
        echo "  - {from: p, to: fb, depth: $depth}"
    else
        echo "  - {from: bu0, to: fb, depth: $depth}"
        echo "  - {from: bu1, to: fb, depth: $depth}"
    fi
}

runs=0
for prov in tcp shm; do
    for bulk in 7 512; do
        for credits in 1 4; do
            for depth in 2 16; do
                prescale=$([ "$depth" = 16 ] && echo 1 || echo 0)
                name=${prov}_b${bulk}_c${credits}_d${depth}
                topology "$name" "$prov" "$bulk" "$credits" "$depth" "$prescale" >"$name.yaml"
                events=$((bulk * 40 + 13)) # not a whole number of bulks
                json=$(timeout 60 "$sddaq" run "$name.yaml" -n "$events" -q --no-http --json \
                    2>"$name.err")
                rc=$?
                [ "$rc" = 124 ] && fail "$name: still running after 60 s: $(tail -3 "$name.err")"
                verdict=$("$py" -c 'import json,sys
j=json.loads(sys.argv[1])
print(j["status"], j["accounted"], j["built"] >= int(sys.argv[2]), j["dropped"])' "$json" "$events") ||
                    fail "$name: no summary (exit $rc): $(tail -3 "$name.err")"
                [ "$verdict" = "OK True True 0" ] || fail "$name: $verdict: $json"
                if grep -qE "in doubt|silent for [0-9]{4,} ms" "$name.err"; then
                    fail "$name: a builder stalled: $(grep -m2 -E 'in doubt|silent for' "$name.err")"
                fi
                runs=$((runs + 1))
            done
        done
    done
done
echo "run-matrix: $runs runs, all OK, accounted, no builder stalled"
