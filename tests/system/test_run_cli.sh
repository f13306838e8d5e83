#!/usr/bin/env bash
# sddaq run end to end: the embedded default chain accounts for every event (generated = built
# = kept + rejected, kept = written) and its HDF5 file holds exactly the kept events; a timed run
# and a Ctrl-C'd run end on a whole bulk with nothing lost; run control over HTTP starts and
# stops a run; a prescale chain keeps exactly 1 of N into a raw file; topologies the runtime
# cannot run, broken configs, an unwritable output directory and a full disk give clean errors.
# Usage: bash test_run_cli.sh PATH/TO/sddaq
set -u -o pipefail

sddaq=${1:?usage: test_run_cli.sh PATH/TO/sddaq}
sddaq=$(cd "$(dirname "$sddaq")" && pwd)/$(basename "$sddaq")
examples=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../examples/topologies" && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/run-cli.XXXXXX")
cleanup() {
    [ -n "${bg:-}" ] && kill -9 "$bg" 2>/dev/null
    mountpoint -q "$dir/full" 2>/dev/null && umount "$dir/full"
    rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
export SDDAQ_LOG=error
py=$(command -v python3) || { echo "skipped: python3 (for JSON) not installed"; exit 77; }
cd "$dir" || exit 1

# field JSON KEY: one top-level value; stage JSON NAME KEY: a value of one stage.
field() { "$py" -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
stage() {
    "$py" -c 'import json,sys; s=[x for x in json.loads(sys.argv[1])["stages"] if x["name"]==sys.argv[2]]; print(s[0][sys.argv[3]])' "$1" "$2" "$3"
}
ok_run() { # JSON: status OK and every event accounted for
    [ "$(field "$1" status)" = OK ] || fail "$2: status: $1"
    [ "$(field "$1" accounted)" = True ] || fail "$2: not accounted: $1"
    [ "$(field "$1" generated)" = "$(field "$1" built)" ] || fail "$2: generated != built: $1"
    [ "$(field "$1" dropped)" = 0 ] || fail "$2: drops: $1"
}

# 1. The default chain for 20000 events.
json=$("$sddaq" run -n 20000 -q --no-http --json 2>"$dir/err1") || fail "default run: $(cat "$dir/err1")"
ok_run "$json" "default"
[ "$(field "$json" built)" = 20000 ] || fail "default: built: $json"
[ "$(field "$json" incomplete)" = 0 ] || fail "default: incomplete: $json"
kept=$(field "$json" kept)
rejected=$(field "$json" rejected)
[ $((kept + rejected)) = 20000 ] || fail "default: kept + rejected: $json"
[ "$kept" -gt 0 ] && [ "$rejected" -gt 0 ] || fail "default: the trigger kept all or none: $json"
[ "$(field "$json" written)" = "$kept" ] || fail "default: written != kept: $json"
# credits: auto keeps fabric.credits (16) where the bulks fit the cache, as here.
[ "$(stage "$json" bu0 detail | grep -o '[0-9]* credits')" = "16 credits" ] ||
    fail "default: auto credits: $json"
[ "$(stage "$json" results events_out)" = 20000 ] || fail "default: feedback published: $json"
# The emulated sources are generated inside their RUs: each gave what its RU took (one fragment
# of every event); a stage that timed nothing has no age (null), the trigger has one.
for s in src0 src1 ru0 ru1; do
    [ "$(stage "$json" $s events_out)" = 20000 ] || fail "default: $s events out: $json"
done
[ "$(stage "$json" ru0 events_in)" = 20000 ] || fail "default: ru0 events in: $json"
[ "$(stage "$json" ru0 latency_p99_us)" = None ] || fail "default: an ru with an age: $json"
[ "$(stage "$json" trigger latency_p99_us)" != None ] || fail "default: trigger without age: $json"
# CPU time: the stages with threads of their own have some, the others none (null).
for s in trigger writer results; do
    "$py" -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 0 else 1)' \
        "$(stage "$json" $s cpu_s)" 2>/dev/null || fail "default: $s cpu_s: $json"
done
[ "$(stage "$json" bu0 cpu_s)" = None ] || fail "default: a bu with cpu_s: $json"
h5=$(stage "$json" writer detail)
[ -f "$h5" ] && [ ! -e "$h5.partial" ] || fail "default: no closed HDF5 file at '$h5'"
grep -q "control" "$dir/err1" && fail "default: --no-http still announced a control port"
grep -q "run 1, 9 stages" "$dir/err1" || fail "default: announce line: $(cat "$dir/err1")"
"$sddaq" inspect "$h5" --verify >/dev/null || fail "default: inspect --verify $h5"
if /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
    /usr/bin/python3 - "$h5" "$kept" <<'PY' || fail "default: HDF5 content"
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
ids = np.asarray(f["/events/id"])
assert len(ids) == int(sys.argv[2]), (len(ids), sys.argv[2])
assert len(np.unique(ids)) == len(ids), "an event written twice"
assert ids.max() < 20000
PY
    # The example decodes every record as a built event with both sources' stub blocks.
    tot=$(/usr/bin/python3 "$examples/../read_built_events.py" "$h5" --totals) ||
        fail "default: read_built_events.py: $tot"
    read -r _ ne _ nc _ ni _ ns <<<"$tot"
    [ "$ne" = "$kept" ] && [ "$nc" = "$kept" ] && [ "$ni" = 0 ] && [ "$ns" -gt 0 ] ||
        fail "default: read_built_events.py: $tot (kept $kept)"
fi
# Running it again gets the next run number instead of refusing or overwriting.
json=$("$sddaq" run -n 640 -q --no-http --json 2>/dev/null) || fail "second default run"
[ "$(field "$json" run_number)" = 2 ] || fail "second run number: $json"

# 2. A timed run ends on a whole bulk (64 events), every event accounted for.
json=$("$sddaq" run -d 1.5 -q --no-http --json 2>/dev/null) || fail "timed run: $json"
ok_run "$json" "timed"
built=$(field "$json" built)
[ "$built" -gt 0 ] && [ $((built % 64)) = 0 ] || fail "timed: built $built not whole bulks"

# 3. Ctrl-C ends a long run cleanly.
"$sddaq" run -d 60 -q --no-http --json >"$dir/int.json" 2>"$dir/int.err" &
bg=$!
sleep 2
kill -INT "$bg"
wait "$bg" || fail "interrupted run exit $?: $(cat "$dir/int.json" "$dir/int.err")"
bg=
json=$(cat "$dir/int.json")
ok_run "$json" "interrupted"
"$py" -c 'import json,sys; assert json.loads(sys.argv[1])["seconds"] < 30' "$json" ||
    fail "interrupted: ran on: $json"

# 4. Run control over HTTP: wait in configured, start, scrape, stop.
sed -e 's/control_port: 7020/control_port: 0/' "$examples/default.yaml" >"$dir/http.yaml"
"$sddaq" run "$dir/http.yaml" --wait-start -q --json >"$dir/http.json" 2>"$dir/http.err" &
bg=$!
for _ in $(seq 100); do grep -q "control http" "$dir/http.err" && break; sleep 0.1; done
hp=$(grep -o 'control http://[0-9.]*:[0-9]*' "$dir/http.err" | sed 's|control http://||')
[ -n "$hp" ] || fail "http: no control address announced: $(cat "$dir/http.err")"
state=$("$sddaq" ctl -H "$hp" state) || fail "http: state"
grep -q '"state":"configured"' <<<"$state" || fail "http: not configured: $state"
"$sddaq" ctl -H "$hp" pause >/dev/null 2>&1 && fail "http: paused a configured run"
# built events summed over both builder units, from /metrics
built_now() {
    "$sddaq" ctl -H "$hp" metrics | awk '/^sddaq_bu_events_out_total/ { n += $2 } END { print n + 0 }'
}
"$sddaq" ctl -H "$hp" start >/dev/null || fail "http: start"
# Both appear once the first events have gone through (a second here; up to 10 s on a loaded
# machine: the trigger's summary failed once after a flat 1 s wait under ctest).
for _ in $(seq 1 20); do
    sleep 0.5
    metrics=$("$sddaq" ctl -H "$hp" metrics) || fail "http: metrics"
    grep -qE '^sddaq_process_latency_seconds\{stage="trigger",node="local",quantile="0.99"\} [0-9]' <<<"$metrics" &&
        break
done
grep -qE '^sddaq_bu_events_out_total\{stage="bu0",node="local"\} [1-9]' <<<"$metrics" ||
    fail "http: metrics show no built events"
grep -qE '^sddaq_process_latency_seconds\{stage="trigger",node="local",quantile="0.99"\} [0-9]' <<<"$metrics" ||
    fail "http: no trigger latency summary"
# the event builder's failure counters, all quiet in a healthy run
for m in 'sddaq_ru_bu_failures_total{stage="ru0",node="local"} 0' \
    'sddaq_bu_ru_failures_total{stage="bu0",node="local"} 0' \
    'sddaq_bu_events_incomplete_total{stage="bu0",node="local"} 0' \
    'sddaq_bu_fenced{stage="bu0",node="local"} 0' \
    'sddaq_bu_bulks_in_doubt_total{stage="bu0",node="local"} 0' \
    'sddaq_bu_events_uncommitted_total{stage="bu0",node="local"} 0' \
    'sddaq_fabric_shm_locks_released_total{node="local"} 0' \
    'sddaq_fabric_shm_peers_fenced_total{node="local"} 0'; do
    grep -qxF "$m" <<<"$metrics" || fail "http: metrics lack '$m'"
done
# Pause: after what was in flight, nothing more is built; resume: building goes on.
"$sddaq" ctl -H "$hp" pause >/dev/null || fail "http: pause"
"$sddaq" ctl -H "$hp" state | grep -q '"state":"paused"' || fail "http: not paused"
sleep 0.5
b1=$(built_now)
sleep 0.5
b2=$(built_now)
[ "$b1" = "$b2" ] || fail "http: built $b1 then $b2 while paused"
"$sddaq" ctl -H "$hp" resume >/dev/null || fail "http: resume"
sleep 0.5
b3=$(built_now)
[ "$b3" -gt "$b2" ] || fail "http: nothing built after resume ($b2 -> $b3)"
"$sddaq" ctl -H "$hp" pause >/dev/null || fail "http: second pause"
"$sddaq" ctl -H "$hp" stop >/dev/null || fail "http: stop"
wait "$bg" || fail "http: run exit $?: $(cat "$dir/http.json" "$dir/http.err")"
bg=
ok_run "$(cat "$dir/http.json")" "http"

# 5. evb-emu sources, an RU-only node (its bulks read by the BU), prescale into raw, and a null
# writer beside it.
cat >"$dir/prescale.yaml" <<EOF
run: {name: ps, output_dir: $dir/ps}
fabric: {provider: tcp}
nodes: [{name: n, control_port: 0}]
stages:
  - {name: s0, type: source, kind: evb-emu, fragment: {dist: uniform, size: 512}}
  - {name: s1, type: source, kind: evb-emu, fragment: {dist: uniform, size: 512}}
  - {name: ru0, type: ru, bulk_size: 32, credits: 4, transfer: read}
  - {name: ru1, type: ru, bulk_size: 32, credits: 4, transfer: read}
  - {name: bu0, type: bu, bulk_size: 32, credits: 4, transfer: read}
  - {name: keep, type: process, algorithm: prescale, factor: 7, threads: 2}
  - {name: sample, type: writer, format: raw}
  - {name: all, type: writer, format: null}
links:
  - {from: s0, to: ru0}
  - {from: s1, to: ru1}
  - {from: ru0, to: bu0}
  - {from: ru1, to: bu0}
  - {from: bu0, to: keep}
  - {from: bu0, to: all}
  - {from: keep, to: sample}
EOF
json=$("$sddaq" run "$dir/prescale.yaml" -n 7000 -q --no-http --json 2>"$dir/ps.err") ||
    fail "prescale: $(cat "$dir/ps.err")"
ok_run "$json" "prescale"
[ "$(field "$json" kept)" = 1000 ] || fail "prescale: kept: $json"
[ "$(stage "$json" sample events_out)" = 1000 ] || fail "prescale: raw records: $json"
[ "$(stage "$json" all events_out)" = 7000 ] || fail "prescale: null writer: $json"
[ "$(stage "$json" bu0 detail)" = "bulks read from the RUs, 4 credits" ] ||
    fail "prescale: transfer and credits: $json"
raw=$(stage "$json" sample detail)
out=$("$sddaq" inspect "$raw" --verify) || fail "prescale: inspect $raw: $out"
grep -q "^records  *1000$" <<<"$out" || fail "prescale: $out"
ids=$("$sddaq" inspect "$raw" --json --dump 1000 |
    "$py" -c 'import json,sys; e=json.load(sys.stdin)["events"]; print(all(x["id"]%7==0 for x in e), len({x["id"] for x in e}))')
[ "$ids" = "True 1000" ] || fail "prescale: ids not 1000 distinct multiples of 7: $ids"

# Two evb-emu sources, two RUs and two BUs into one writer `out` (sections 5a and 5d).
# Usage: evb_2x2 NAME PROVIDER FRAGMENT EVB_KEYS WRITER_FORMAT OUT_LINK_KEYS
evb_2x2() {
    cat <<EOF
run: {name: $1, output_dir: $dir/$1}
fabric: {provider: $2}
nodes: [{name: n, control_port: 0}]
stages:
  - {name: s0, type: source, kind: evb-emu, fragment: {$3}}
  - {name: s1, type: source, kind: evb-emu, fragment: {$3}}
  - {name: ru0, type: ru$4}
  - {name: ru1, type: ru$4}
  - {name: bu0, type: bu$4}
  - {name: bu1, type: bu$4}
  - {name: out, type: writer, format: $5}
links:
  - {from: s0, to: ru0}
  - {from: s1, to: ru1}
  - {from: ru0, to: bu0}
  - {from: ru0, to: bu1}
  - {from: ru1, to: bu0}
  - {from: ru1, to: bu1}
  - {from: bu0, to: out$6}
  - {from: bu1, to: out$6}
EOF
}

# 5a. credits: auto with 16 KiB fragments over shm: two RU+BU nodes would hold 52 MiB of bulks
# with 4 credits (RUs x BUs x (3 x 4 + 1) slots of 1 MiB), so they take 2 (28 MiB).
evb_2x2 big shm "dist: fixed, size: 16K" "" null "" >"$dir/big.yaml"
json=$("$sddaq" run "$dir/big.yaml" -n 20000 -q --no-http --json 2>"$dir/big.err") ||
    fail "auto credits, 16 KiB: $(cat "$dir/big.err")"
ok_run "$json" "auto credits, 16 KiB"
[ "$(stage "$json" out events_out)" = 20000 ] || fail "auto credits: written: $json"
[ "$(stage "$json" bu1 detail | grep -o '[0-9]* credits')" = "2 credits" ] ||
    fail "auto credits: 16 KiB over shm: $json"

# 5b. Detector readout as the source: two emulated UDP detectors (4 x 1 KiB packets per frame,
# 10000 frames/s, one with 0.1 % packet loss) -> receivers -> RUs -> BUs -> raw file. Every
# event is built once; events whose frame was damaged leave flagged, and the file says so.
cat >"$dir/readout.yaml" <<EOF
run: {name: ro, output_dir: $dir/ro}
fabric: {provider: tcp}
nodes: [{name: n, control_port: 0}]
stages:
  - {name: det0, type: source, kind: emu-stream, rate: 10000, frame: {packets: 4, payload: 1K, loss: 0.001}}
  - {name: det1, type: source, kind: emu-stream, rate: 10000, frame: {packets: 4, payload: 1K}}
  - {name: ru0, type: ru, bulk_size: 32}
  - {name: ru1, type: ru, bulk_size: 32}
  - {name: bu0, type: bu, bulk_size: 32}
  - {name: bu1, type: bu, bulk_size: 32}
  - {name: out, type: writer, format: raw}
links:
  - {from: det0, to: ru0}
  - {from: det1, to: ru1}
  - {from: ru0, to: bu0}
  - {from: ru0, to: bu1}
  - {from: ru1, to: bu0}
  - {from: ru1, to: bu1}
  - {from: bu0, to: out}
  - {from: bu1, to: out}
EOF
json=$("$sddaq" run "$dir/readout.yaml" -n 10000 -q --no-http --json 2>"$dir/ro.err") ||
    fail "readout: $(cat "$dir/ro.err")"
ok_run "$json" "readout"
[ "$(field "$json" built)" = 10000 ] || fail "readout: built: $json"
inc=$(field "$json" incomplete)
miss0=$(stage "$json" det0 dropped)
miss1=$(stage "$json" det1 dropped)
[ "$miss0" -gt 0 ] || fail "readout: no frame lost despite injected loss: $json"
[ "$(($(stage "$json" det0 events_out) + miss0))" = 10000 ] || fail "readout: det0 frames: $json"
[ "$(($(stage "$json" det1 events_out) + miss1))" = 10000 ] || fail "readout: det1 frames: $json"
[ "$inc" -ge "$miss0" ] && [ "$inc" -le $((miss0 + miss1)) ] ||
    fail "readout: $inc incomplete events for $miss0 + $miss1 missing frames: $json"
[ $(($(field "$json" complete) + inc)) = 10000 ] || fail "readout: complete + incomplete: $json"
out=$("$sddaq" inspect "$(stage "$json" out detail)") || fail "readout: inspect"
grep -q "^records  *10000$" <<<"$out" || fail "readout: records: $out"
grep -q "^flags  *$((10000 - inc)) clean, $inc flagged" <<<"$out" || fail "readout: flags: $out"

# 5d. A writer behind two builder units on short rings (depth 64): it holds each poll turn's
# events until the builders commit them, so a builder must set its next bulk's buffers aside
# before delivering it, or wait for a later turn. Before that, the builders took buffers as
# they went and the run hung after about 1500 events (ETIMEDOUT).
evb_2x2 tight tcp "dist: uniform, size: 256" ", bulk_size: 64, credits: 8" raw ", depth: 64" \
    >"$dir/tight.yaml"
json=$("$sddaq" run "$dir/tight.yaml" -n 100000 -q --no-http --json 2>"$dir/tight.err") ||
    fail "tight rings: $json $(cat "$dir/tight.err")"
ok_run "$json" "tight rings"
[ "$(stage "$json" out events_out)" = 100000 ] || fail "tight rings: raw records: $json"

# 6. Topologies the runtime cannot run yet, and broken ones: exit 2 and a message.
"$sddaq" run "$examples/two-host-evb.yaml" -q --no-http >/dev/null 2>"$dir/e.txt"
[ $? = 2 ] || fail "two-host: exit"
grep -q "multi-node" "$dir/e.txt" || fail "two-host: message: $(cat "$dir/e.txt")"
printf 'run: {name: x\nstages: [\n' >"$dir/broken.yaml"
"$sddaq" run "$dir/broken.yaml" -q >/dev/null 2>"$dir/e.txt"
[ $? = 2 ] || fail "broken yaml: exit"
grep -qE "broken.yaml:[0-9]+:[0-9]+" "$dir/e.txt" || fail "broken yaml: $(cat "$dir/e.txt")"
"$sddaq" run --bogus >/dev/null 2>&1
[ $? = 2 ] || fail "bad option: exit"

# 7. An output directory that cannot be created: a clean error, nothing written.
sed -e "s|output_dir: runs|output_dir: /proc/sddaq-cannot-exist|" -e 's/control_port: 7020/control_port: 0/' \
    "$examples/default.yaml" >"$dir/noout.yaml"
"$sddaq" run "$dir/noout.yaml" -q --no-http -n 1000 >/dev/null 2>"$dir/e.txt" &&
    fail "unwritable output: succeeded"
grep -q "sddaq-cannot-exist" "$dir/e.txt" || fail "unwritable output: path not named: $(cat "$dir/e.txt")"

# 8. A full disk: the run ends in error, the file stays NAME.partial, the drops are counted.
mkdir "$dir/full"
if mount -t tmpfs -o size=2m tmpfs "$dir/full" 2>/dev/null; then
    sed -e "s|output_dir: runs|output_dir: $dir/full|" -e 's/control_port: 7020/control_port: 0/' \
        "$examples/default.yaml" >"$dir/full.yaml"
    json=$("$sddaq" run "$dir/full.yaml" -q --no-http -n 200000 --json 2>"$dir/e.txt")
    rc=$?
    [ $rc = 1 ] || fail "full disk: exit $rc: $json"
    [ "$(field "$json" status)" != OK ] || fail "full disk: status OK: $json"
    field "$json" reason | grep -q "writer" || fail "full disk: reason: $json"
    [ "$(field "$json" accounted)" = True ] || fail "full disk: drops not accounted: $json"
    w=$(stage "$json" writer events_out)
    d=$(stage "$json" writer dropped)
    [ "$d" -gt 0 ] && [ $((w + d)) = "$(field "$json" kept)" ] || fail "full disk: writer: $json"
    stage "$json" writer detail | grep -q '\.partial (incomplete)$' || fail "full disk: detail: $json"
    ls "$dir/full"/*.partial >/dev/null 2>&1 || fail "full disk: no .partial file left"
    ls "$dir/full"/*.h5 >/dev/null 2>&1 && fail "full disk: a file was closed as complete"
    umount "$dir/full"
else
    echo "note: cannot mount a tmpfs here; full-disk part skipped"
fi
echo "run CLI: all checks passed"
