#!/usr/bin/env bash
# sddaq run with NA62 readout straight into the RICH trigger (no event builder): an emu-na62
# source sends a fixed number of generated events; the trigger finds, decides and writes every
# one (found = kept + rejected, kept = HDF5 records, each of which decodes with its rings;
# events cut by a buffer boundary merged whole: found and kept as by `trigger rich run`), a
# prescaled sample of the receive buffers goes to a raw file, and the same seed gives the same
# result twice, also with the rings found on a GPU (or the run refuses and says why) and with
# buffers started ahead of their decision. The
# shipped example (a udp source fed by `sddaq emu na62`) stops once the
# trigger found the requested events, also with lost, corrupted and duplicated packets (counted
# at the source, and in /metrics while the run goes on); a timed run ends; topologies that mix NA62 packets with
# the event builder or the Hough trigger are refused naming the stage.
# Usage: bash test_run_rich.sh PATH/TO/sddaq
set -u -o pipefail

sddaq=${1:?usage: test_run_rich.sh PATH/TO/sddaq}
sddaq=$(cd "$(dirname "$sddaq")" && pwd)/$(basename "$sddaq")
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/run-rich.XXXXXX")
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export SDDAQ_LOG=error
py=$(command -v python3) || { echo "skipped: python3 not installed"; exit 77; }
h5py=/usr/bin/python3
"$h5py" -c 'import h5py' 2>/dev/null || h5py=$py
cd "$dir" || exit 1

field() { "$py" -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
stage() {
    "$py" -c 'import json,sys; s=[x for x in json.loads(sys.argv[1])["stages"] if x["name"]==sys.argv[2]]; print(s[0][sys.argv[3]])' "$1" "$2" "$3"
}

# topology RUN-KEYS: emu-na62 -> rich (2 threads) -> hdf5, and -> prescale 10 -> raw.
topology() {
    cat <<EOF
run: {name: rich, output_dir: $dir/out, $1}
nodes:
  - {name: daq1, host: 127.0.0.1, control_port: 0}
stages:
  - {name: tel62, type: source, kind: emu-na62, seed: 3, rate: 200000}
  - {name: rich, type: process, algorithm: rich, threads: 2}
  - {name: minbias, type: process, algorithm: prescale, factor: 10}
  - {name: selected, type: writer, format: hdf5}
  - {name: sample, type: writer, format: raw}
links:
  - {from: tel62, to: rich}
  - {from: tel62, to: minbias}
  - {from: rich, to: selected}
  - {from: minbias, to: sample}
EOF
}

# 1. 20000 events: every one sent, every one found decided and written.
topology "events: 20000" >fixed.yaml
"$sddaq" config check fixed.yaml >/dev/null || fail "fixed: config check"
json=$("$sddaq" run fixed.yaml -q --no-http --json 2>err1) || fail "fixed: $(cat err1)"
[ "$(field "$json" status)" = OK ] || fail "fixed: status: $json"
[ "$(field "$json" accounted)" = True ] || fail "fixed: not accounted: $json"
[ "$(field "$json" found)" = True ] || fail "fixed: not marked found: $json"
[ "$(field "$json" generated)" = 20000 ] || fail "fixed: generated: $json"
[ "$(stage "$json" tel62 dropped)" = 0 ] || fail "fixed: packets lost on loopback: $json"
# Every event and record buffer back in its own pool at the end (run_stages_close checks).
! grep -q "not returned to their pool" err1 || fail "fixed: $(grep pool err1)"
found=$(field "$json" built)
kept=$(field "$json" kept)
# The receive buffers are one stream: events whose boards' packets straddle a buffer boundary
# are merged whole, once. So the trigger finds and keeps exactly what `trigger rich run` finds
# in the same events packed a whole event at a time (the merged events with hits; those with
# rings).
"$sddaq" trigger rich run -n 20000 -s 3 -o ref.csv >ref.out 2>&1 || fail "reference: $(cat ref.out)"
ref_found=$(sed -n 's/.*merge: \([0-9]*\) events.*/\1/p' ref.out)
ref_kept=$(tail -n +2 ref.csv | cut -d, -f1 | sort -u | wc -l)
[ -n "$ref_found" ] && [ "$ref_kept" -gt $((ref_found / 2)) ] || fail "reference: $(cat ref.out)"
[ "$found" = "$ref_found" ] && [ "$kept" = "$ref_kept" ] ||
    fail "fixed: found $found, kept $kept; whole events: $ref_found, $ref_kept: $json"
[ $((kept + $(field "$json" rejected))) = "$found" ] || fail "fixed: kept + rejected: $json"
[ "$(stage "$json" selected events_out)" = "$kept" ] || fail "fixed: selected: $json"
[ "$(stage "$json" rich errors)" = 0 ] || fail "fixed: malformed events: $json"
buffers=$(stage "$json" tel62 events_out)
[ "$(stage "$json" minbias events_in)" = "$buffers" ] || fail "fixed: minbias in: $json"
sampled=$(stage "$json" minbias events_out)
[ "$sampled" = $(((buffers + 9) / 10)) ] || fail "fixed: 1 in 10 of $buffers buffers: $json"
[ "$(stage "$json" sample events_out)" = "$sampled" ] || fail "fixed: sample: $json"
h5=$(stage "$json" selected detail)
totals=$("$h5py" "$root/examples/read_rich_records.py" "$h5" --totals) ||
    fail "fixed: records do not decode: $totals"
read -r _ records _ rings _ hits _ bad <<<"$totals"
[ "$records" = "$kept" ] && [ "$bad" = 0 ] && [ "$rings" -ge "$kept" ] ||
    fail "fixed: h5 holds $totals for $kept kept"
out=$("$sddaq" inspect "$(stage "$json" sample detail)") || fail "fixed: inspect sample"
grep -q "^records  *$sampled$" <<<"$out" || fail "fixed: sample records: $out"

# 2. The same seed: the same events found and kept.
json2=$("$sddaq" run fixed.yaml -q --no-http --json 2>err2) || fail "again: $(cat err2)"
[ "$(field "$json2" built)" = "$found" ] && [ "$(field "$json2" kept)" = "$kept" ] ||
    fail "again: $(field "$json2" built) found, $(field "$json2" kept) kept vs $found, $kept"
# 2b. Each buffer's rings shared out over 2 threads (split): the same events found and kept.
sed 's/algorithm: rich, threads: 2}/algorithm: rich, threads: 2, split: 2}/' fixed.yaml >split.yaml
grep -q "split: 2" split.yaml || fail "split: could not make the topology"
json2=$("$sddaq" run split.yaml -q --no-http --json 2>err2b) || fail "split: $(cat err2b)"
[ "$(field "$json2" built)" = "$found" ] && [ "$(field "$json2" kept)" = "$kept" ] ||
    fail "split: $(field "$json2" built) found, $(field "$json2" kept) kept vs $found, $kept"
# 2c. The ring finder set in the topology (Ptolemy, single pass): the same events found, every
#     one decided; a different finder keeps a different number.
sed 's/algorithm: rich, threads: 2}/algorithm: rich, threads: 2, finder: {method: ptolemy, multi_ring: off}}/' \
    fixed.yaml >finder.yaml
json2=$("$sddaq" run finder.yaml -q --no-http --json 2>err2c) || fail "finder: $(cat err2c)"
[ "$(field "$json2" accounted)" = True ] && [ "$(field "$json2" built)" = "$found" ] ||
    fail "finder: $json2"
[ "$(field "$json2" kept)" != "$kept" ] || fail "finder: ptolemy kept exactly as many: $json2"
# 2d. Rings on a GPU (finder gpu: on): with one, the CPU's decisions exactly (the same rings);
#     without one (or CUDA), the run does not start and says why. SDDAQ_EXPECT_GPU=1 (the
#     device checks) makes a refusal fail the test.
sed 's/algorithm: rich, threads: 2}/algorithm: rich, threads: 2, finder: {gpu: on}}/' \
    fixed.yaml >gpu.yaml
if json2=$("$sddaq" run gpu.yaml -q --no-http --json 2>err2d); then
    [ "$(field "$json2" built)" = "$found" ] && [ "$(field "$json2" kept)" = "$kept" ] ||
        fail "gpu: $(field "$json2" built) found, $(field "$json2" kept) kept vs $found, $kept"
    echo "run-rich: rings on the GPU: $found events found, $kept kept, as on the CPU"
else
    [ "$(field "$json2" status)" = ENOTSUP ] && grep -q "rich-gpu: " err2d ||
        fail "gpu: refused without a reason: $json2 $(cat err2d)"
    [ -z "${SDDAQ_EXPECT_GPU:-}" ] || fail "gpu: refused where a GPU was expected: $(cat err2d)"
    echo "run-rich: no GPU here, refused as it should: $(grep -m1 'rich-gpu: ' err2d)"
fi

# 2e. Buffers started ahead of their decision (finder inflight: 3; the default with a GPU is 2,
#     so 2d runs it there): the same events found and kept, every one decided.
sed 's/algorithm: rich, threads: 2}/algorithm: rich, threads: 2, finder: {inflight: 3}}/' \
    fixed.yaml >inflight.yaml
grep -q "inflight: 3" inflight.yaml || fail "inflight: could not make the topology"
json2=$("$sddaq" run inflight.yaml -q --no-http --json 2>err2e) || fail "inflight: $(cat err2e)"
[ "$(field "$json2" accounted)" = True ] && [ "$(field "$json2" built)" = "$found" ] &&
    [ "$(field "$json2" kept)" = "$kept" ] && [ "$(stage "$json2" selected events_out)" = "$kept" ] ||
    fail "inflight: $(field "$json2" built) found, $(field "$json2" kept) kept vs $found, $kept"
! grep -q "not returned to their pool" err2e || fail "inflight: $(grep pool err2e)"

# 3. The shipped example: a udp source on 5400 fed by `sddaq emu na62`, stopped by -n. At a
#    rate the sanitizer build's trigger keeps up with: what the source took before the stop is
#    decided, up to the link's 1024 buffers, which a trigger slower than its input takes long
#    to drain.
mkdir ex && cd ex || exit 1
"$sddaq" emu na62 127.0.0.1:5400 -n 0 -D 30 -r 5000 >emu.out 2>&1 &
json=$("$sddaq" run "$root/examples/topologies/readout-rich.yaml" -n 3000 -q --no-http --json \
    2>err3) || fail "example: $(cat err3)"
kill %1 2>/dev/null
[ "$(field "$json" status)" = OK ] && [ "$(field "$json" accounted)" = True ] ||
    fail "example: $json"
[ "$(field "$json" built)" -ge 3000 ] || fail "example: stopped before 3000 events: $json"
cd "$dir" || exit 1

# 3b. The same with damaged packets: lost, corrupted and duplicated ones are counted at the
#     source, the run goes on and every event found is still decided and written.
cd ex || exit 1
"$sddaq" emu na62 127.0.0.1:5400 -n 0 -D 30 -r 5000 --loss 0.05 --corrupt 0.05 \
    --duplicate 0.05 >emu2.out 2>&1 &
json=$("$sddaq" run "$root/examples/topologies/readout-rich.yaml" -n 3000 -q --no-http --json \
    2>err3b) || fail "damaged: $(cat err3b)"
kill %1 2>/dev/null
[ "$(field "$json" status)" = OK ] && [ "$(field "$json" accounted)" = True ] ||
    fail "damaged: $json"
[ "$(stage "$json" tel62 errors)" -gt 0 ] || fail "damaged: no corrupt packet counted: $json"
[ "$(stage "$json" tel62 dropped)" -gt 0 ] || fail "damaged: no lost packet counted: $json"
cd "$dir" || exit 1

# 3c. Live: while a damaged stream comes in, /metrics shows its loss at the source as it
#     happens (the stage's dropped and errors, and the receiver's own counters: packets lost,
#     refused by reason, ends of burst), not only once the run has ended; the summary then
#     says how many packets never reached the event finder.
cd ex || exit 1
sed -e 's/control_port: 7030/control_port: 0/' "$root/examples/topologies/readout-rich.yaml" \
    >live.yaml
"$sddaq" emu na62 127.0.0.1:5400 -n 0 -D 60 -r 5000 --events 200 --loss 0.05 --corrupt 0.05 \
    >emu3.out 2>&1 &
"$sddaq" run live.yaml -d 60 -n 100000000 -q >live.out 2>live.err &
live=$!
for _ in $(seq 100); do grep -q "control http" live.err && break; sleep 0.1; done
hp=$(grep -o 'control http://[0-9.]*:[0-9]*' live.err | sed 's|control http://||')
[ -n "$hp" ] || fail "live: no control address announced: $(cat live.err)"
seen=
for _ in $(seq 100); do
    sleep 0.2
    m=$("$sddaq" ctl -H "$hp" metrics) || continue
    # lost, dropped, refused (summed over reasons), ends of burst
    read -r lost drop bad eob < <(awk -F'[ ]' '
        /^sddaq_source_packets_lost_total\{stage="tel62"/ { l = $2 }
        /^sddaq_source_dropped_total\{stage="tel62"/ { d = $2 }
        /^sddaq_source_packets_corrupt_total\{stage="tel62"/ { c += $2 }
        /^sddaq_source_end_of_burst_total\{stage="tel62"/ { e = $2 }
        END { print l + 0, d + 0, c + 0, e + 0 }' <<<"$m")
    if [ "$lost" -gt 0 ] && [ "$drop" -gt 0 ] && [ "$bad" -gt 0 ] && [ "$eob" -gt 0 ]; then
        seen=1
        break
    fi
done
[ -n "$seen" ] || fail "live: loss not in /metrics mid-run (lost $lost, dropped $drop," \
    "refused $bad, ends of burst $eob)"
grep -qE '^sddaq_source_open_bursts\{stage="tel62",node="daq1"\} [0-9]' <<<"$m" ||
    fail "live: no open bursts gauge"
grep -qE '^sddaq_source_packets_corrupt_total\{stage="tel62",node="daq1",reason="CHECKSUM"\} [0-9]' \
    <<<"$m" || fail "live: no per-reason series"
"$sddaq" ctl -H "$hp" stop >/dev/null || fail "live: stop"
wait $live || fail "live: run failed: $(cat live.err)"
kill %1 2>/dev/null
# the tel62 row's dropped column, and the readout line that repeats it
final=$(awk '$1 == "tel62" && $2 == "source" { print $6 }' live.out)
[ "${final:-0}" -ge "$drop" ] || fail "live: fewer dropped at the end: $(cat live.out)"
grep -q "readout: $final packets lost at the sources (.* datagrams refused as corrupt)" live.out ||
    fail "live: no readout line: $(cat live.out)"
cd "$dir" || exit 1

# 4. A timed run of an endless emulator ends on time, everything found decided. At a rate the
#    sanitizer build's trigger keeps up with: what came before the stop is drained, up to the
#    link's 1024 buffers, and a slower trigger takes that long to decide it.
topology "duration: 1" | sed 's/rate: 200000/rate: 10000/' >timed.yaml
grep -q "rate: 10000" timed.yaml || fail "timed: could not make the topology"
t0=$SECONDS
json=$("$sddaq" run timed.yaml -q --no-http --json 2>err4) || fail "timed: $(cat err4)"
[ $((SECONDS - t0)) -le 10 ] || fail "timed: took $((SECONDS - t0)) s"
[ "$(field "$json" accounted)" = True ] || fail "timed: $json"
[ "$(field "$json" built)" -gt 0 ] || fail "timed: nothing found: $json"

# 4b. An emulator far ahead of its trigger (8 cycles as fast as it sends, one worker behind a
#     link of 2 buffers): the receiver's ring and its socket fill. Whatever is lost is counted:
#     events not found are at most 72 a dropped packet (a 1472-byte packet holds at most 72
#     board events of one hit). Before, the run stopped the receiver 300 ms after the last
#     send, and what its socket still held (110 000 events here) went silently.
"$sddaq" trigger rich run -n 32768 -s 3 >cycle.out 2>&1 || fail "cycle: $(cat cycle.out)"
per_cycle=$(sed -n 's/.*merge: \([0-9]*\) events.*/\1/p' cycle.out)
[ -n "$per_cycle" ] || fail "cycle: $(cat cycle.out)"
sed 's/events: 20000/events: 262144/; s/, rate: 200000//; s/threads: 2}/threads: 1}/' fixed.yaml |
    sed 's/{from: tel62, to: rich}/{from: tel62, to: rich, depth: 2}/' >ahead.yaml
grep -q "depth: 2" ahead.yaml && ! grep -q "rate:" ahead.yaml || fail "ahead: could not make the topology"
json=$("$sddaq" run ahead.yaml -q --no-http --json 2>err4b) || fail "ahead: $(cat err4b)"
[ "$(field "$json" accounted)" = True ] || fail "ahead: $json"
missing=$((8 * per_cycle - $(field "$json" built)))
dropped=$(stage "$json" tel62 dropped)
[ "$missing" -ge 0 ] && [ "$missing" -le $((72 * dropped)) ] ||
    fail "ahead: $missing events not found, $dropped packets counted lost: $json"

# 5. Refused, naming the stage: NA62 packets into an ru; rich behind builder units; hough fed
#    with NA62 packets; frame geometry for na62 packets.
sed 's/algorithm: hough, threads: 2, min_pt: 20/algorithm: rich, threads: 2/' \
    "$root/examples/topologies/default.yaml" | sed 's/control_port: 7020/control_port: 0/' >bu_rich.yaml
grep -q "algorithm: rich" bu_rich.yaml || fail "bu_rich: could not make the topology"
"$sddaq" run bu_rich.yaml -q --no-http -n 1000 >/dev/null 2>e.txt
[ $? = 2 ] && grep -q "rich" e.txt || fail "bu_rich: $(cat e.txt)"
topology "events: 1000" | sed 's/algorithm: rich, threads: 2/algorithm: hough, threads: 2/' >hough.yaml
"$sddaq" run hough.yaml -q --no-http >/dev/null 2>e.txt
[ $? = 2 ] && grep -q "hough" e.txt || fail "na62 into hough: $(cat e.txt)"
cat >ru.yaml <<EOF
run: {name: x, events: 1000, output_dir: $dir/out}
nodes: [{name: n, host: 127.0.0.1, control_port: 0}]
stages:
  - {name: tel62, type: source, kind: emu-na62}
  - {name: ru0, type: ru}
  - {name: bu0, type: bu}
  - {name: out, type: writer, format: "null"}
links: [{from: tel62, to: ru0}, {from: ru0, to: bu0}, {from: bu0, to: out}]
EOF
"$sddaq" run ru.yaml -q --no-http >/dev/null 2>e.txt
[ $? = 2 ] && grep -q "tel62" e.txt || fail "na62 into ru: $(cat e.txt)"
topology "events: 1000" | sed 's/kind: emu-na62, seed: 3, rate: 200000/kind: udp, listen: "127.0.0.1:0", frame: {format: na62, packets: 8}/' >geom.yaml
"$sddaq" config check geom.yaml >/dev/null 2>e.txt
[ $? != 0 ] && grep -q "na62 packets are not frames" e.txt || fail "na62 geometry: $(cat e.txt)"

echo "run-rich: all checks passed"
