#!/usr/bin/env bash
# sddaq emu and sddaq readout from the command line, over loopback UDP: a generic stream with
# injected loss, duplicates, corruption and reordering gives exactly the receiver counters the
# emulator's own account predicts, also with segmentation offload into a GRO receiver, and
# for NA62 multi-event packets (whose events the RICH event finder then indexes); Jungfrau frames arrive complete with their content checked;
# bad arguments exit 2. Usage: bash test_readout_cli.sh PATH/TO/sddaq
set -u -o pipefail

sddaq=${1:?usage: test_readout_cli.sh PATH/TO/sddaq}
dir=$(mktemp -d "${TMPDIR:-/tmp}/readout-cli.XXXXXX")
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Wait for "listening on HOST:PORT" in a receiver's stderr; print PORT.
port_of() {
    for _ in $(seq 200); do
        p=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$1" | head -1)
        [ -n "$p" ] && { echo "$p"; return 0; }
        sleep 0.05
    done
    return 1
}

# Send one stream to a fresh receiver; leave emu.json and rx.json in $dir/$1. $rx_extra holds
# receiver options.
# The rate keeps every datagram inside the receiver's socket buffer, so the kernel drops none.
run_pair() {
    local name=$1 fmt=$2
    shift 2
    mkdir -p "$dir/$name"
    local verify=--verify # the stream pattern; na62 events are checked by the event finder
    [ "$fmt" = na62 ] && verify=
    # shellcheck disable=SC2086
    "$sddaq" readout recv -f "$fmt" --port 0 $verify --idle 1 -D 60 --json ${rx_extra:-} \
        >"$dir/$name/rx.json" 2>"$dir/$name/rx.err" &
    local rx=$!
    local port
    port=$(port_of "$dir/$name/rx.err") || fail "$name: no receiver: $(cat "$dir/$name/rx.err")"
    "$sddaq" emu "$fmt" "127.0.0.1:$port" --json "$@" >"$dir/$name/emu.json" ||
        fail "$name: emulator failed"
    wait "$rx" || fail "$name: receiver exited $?: $(cat "$dir/$name/rx.err")"
}

run_pair inject stream -n 400 --rate 50000 --seed 11 \
    --loss 0.01 --duplicate 0.01 --corrupt 0.01 --reorder 0.01
python3 - "$dir/inject/emu.json" "$dir/inject/rx.json" <<'PY' || fail "inject: counters disagree"
import json, sys
e = json.load(open(sys.argv[1]))
r = json.load(open(sys.argv[2]))
assert r["kernel_drops"] == 0, r
assert e["lost"] > 0 and e["duplicated"] > 0 and e["corrupted"] > 0 and e["reordered"] > 0, e
want = {
    "received": e["packets"] - e["lost"] - e["corrupted"],
    "lost": e["lost"] + e["corrupted"],
    "corrupt": e["corrupted"],
    "duplicate": e["duplicated"],
    "reordered": e["reordered"],
    "frames_complete": e["frames"] - e["damaged_frames"],
    "frames_dropped": e["damaged_frames"] - e["empty_frames"],
    "pattern_errors": 0,
    "late": 0,
}
bad = {k: (r[k], v) for k, v in want.items() if r[k] != v}
if bad:
    print("receiver vs expected:", bad)
    sys.exit(1)
PY

rx_extra=--gro run_pair gro stream -n 400 --rate 50000 --gso 16 --loss 0.01 --duplicate 0.01
python3 - "$dir/gro/emu.json" "$dir/gro/rx.json" <<'PY' || fail "gro: counters disagree"
import json, sys
e = json.load(open(sys.argv[1]))
r = json.load(open(sys.argv[2]))
assert r["kernel_drops"] == 0 and r["pattern_errors"] == 0, r
assert r["coalesced"] > 0, r  # the runs really came whole
assert r["received"] == e["packets"] - e["lost"], (r, e)
assert r["duplicate"] == e["duplicated"] and r["lost"] == e["lost"], (r, e)
PY

run_pair na62 na62 -n 3000 --rate 50000 --events 2000 --clean-first 200 --seed 5 \
    --loss 0.01 --duplicate 0.01 --corrupt 0.01 --reorder 0.01
python3 - "$dir/na62/emu.json" "$dir/na62/rx.json" <<'PY' || fail "na62: counters disagree"
import json, sys
e = json.load(open(sys.argv[1]))
r = json.load(open(sys.argv[2]))
assert r["kernel_drops"] == 0, r
want = {
    "received": e["datagrams"] - e["corrupted"] - e["duplicated"] - r["end_of_burst"],
    "lost": e["lost"] + e["corrupted"] - e["unseen"],
    "corrupt": e["corrupted"],
    "duplicate": e["duplicated"],
    "reordered": e["reordered"],
}
bad = {k: (r[k], v) for k, v in want.items() if r[k] != v}
assert not bad, bad
n = r["na62"]
assert n["packets"] == r["received"] and n["malformed"] == 0 and n["events"] > 0, n
# A cycle of 2000 events is about 110 datagrams with its 4 ends of burst, so 3000 datagrams
# are some 27 bursts: their ends came (the last burst is cut off, so it stays open).
assert r["end_of_burst"] > 0, r
PY

run_pair jungfrau jungfrau -n 20 --rate 20000
python3 - "$dir/jungfrau/rx.json" <<'PY' || fail "jungfrau: frames incomplete or damaged"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["frames_complete"] == 20 and r["received"] == 20 * 128, r
assert r["pattern_errors"] == 0 and r["lost"] == 0 and r["corrupt"] == 0, r
PY

"$sddaq" emu stream >/dev/null 2>&1; [ $? = 2 ] || fail "emu without a target must exit 2"
"$sddaq" emu stream 127.0.0.1:9 --loss 2 >/dev/null 2>&1; [ $? = 2 ] || fail "--loss 2 must exit 2"
"$sddaq" readout recv --missing maybe >/dev/null 2>&1; [ $? = 2 ] || fail "--missing maybe must exit 2"
"$sddaq" emu jungfrau 127.0.0.1:9 -k 4 >/dev/null 2>&1; [ $? = 2 ] || fail "jungfrau -k must exit 2"
echo "readout cli: ok"
