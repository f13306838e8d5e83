#!/usr/bin/env bash
# The RICH trigger as a stage of `sddaq run`, one buffer at a time against buffers started ahead
# of their decision (finder `inflight`): emu-na62 source (seed 3, as fast as it goes) -> rich
# (THREADS workers) -> null writer, EVENTS events. The two settings alternate, A then B, PAIRS
# times; each line gives events/s found by the trigger (`built` / `seconds`) and the pair's
# ratio B / A, the last line their geometric mean. With a GPU (--gpu) B lets each worker find
# and merge the next buffer while the GPU has the last; without one the rings are found at the
# start either way, so B / A shows only what the pipelined loop costs. Every run must end
# "status":"OK" and "accounted":true, or the script stops with 1.
# Usage: bench/run_rich_inflight.sh [--sddaq PATH] [--gpu] [--threads N] [--events N]
#                                  [--pairs N] [--a N] [--b N]
#   --a, --b   the two inflight settings (default 1 and 2)
set -u -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
sddaq="$root/build/sddaq"
gpu=off
threads=2
events=2000000
pairs=5
a=1
b=2
while [ $# -gt 0 ]; do
    case $1 in
    --sddaq) sddaq=$2; shift ;;
    --gpu) gpu=on ;;
    --threads) threads=$2; shift ;;
    --events) events=$2; shift ;;
    --pairs) pairs=$2; shift ;;
    --a) a=$2; shift ;;
    --b) b=$2; shift ;;
    *) echo "usage: $0 [--sddaq PATH] [--gpu] [--threads N] [--events N] [--pairs N] [--a N] [--b N]" >&2
       exit 2 ;;
    esac
    shift
done
dir=$(mktemp -d "${TMPDIR:-/tmp}/rich-inflight.XXXXXX")
trap 'rm -rf "$dir"' EXIT

topology() { # inflight
    cat <<EOF
run: {name: rich-inflight, output_dir: $dir/out, events: $events}
nodes:
  - {name: daq1, host: 127.0.0.1, control_port: 0}
stages:
  - {name: tel62, type: source, kind: emu-na62, seed: 3}
  - {name: rich, type: process, algorithm: rich, threads: $threads, finder: {gpu: $gpu, inflight: $1}}
  - {name: out, type: writer, format: "null"}
links:
  - {from: tel62, to: rich}
  - {from: rich, to: out}
EOF
}
topology "$a" >"$dir/a.yaml"
topology "$b" >"$dir/b.yaml"
"$sddaq" config check "$dir/a.yaml" >/dev/null && "$sddaq" config check "$dir/b.yaml" >/dev/null ||
    exit 1

rate() { # yaml -> events/s found by the trigger
    local json
    json=$("$sddaq" run "$1" -q --no-http --json 2>"$dir/err") || { cat "$dir/err" >&2; return 1; }
    python3 - "$json" <<'EOF'
import json, sys
j = json.loads(sys.argv[1])
if j["status"] != "OK" or not j["accounted"]:
    sys.exit("run failed: " + sys.argv[1][:400])
print("%.0f" % (j["built"] / j["seconds"]))
EOF
}

echo "rich stage, gpu $gpu, $threads threads, $events events: inflight $a (A) against $b (B)"
ratios=()
for i in $(seq "$pairs"); do
    ra=$(rate "$dir/a.yaml") || exit 1
    rb=$(rate "$dir/b.yaml") || exit 1
    r=$(python3 -c "print('%.3f' % ($rb / $ra))")
    ratios+=("$r")
    echo "pair $i: A $ra events/s, B $rb events/s, B / A $r"
done
python3 -c "
import math, sys
r = [float(x) for x in sys.argv[1:]]
print('geometric mean B / A: %.3f [%.3f-%.3f] over %d pairs' % (math.exp(sum(map(math.log, r)) / len(r)), min(r), max(r), len(r)))
" "${ratios[@]}"
