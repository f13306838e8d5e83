#!/usr/bin/env bash
# sddaq trigger rich from the command line: gen writes the same file for the same seed; run on
# the file and on the generator with the same seed gives identical rings and scores; score
# prints every method and fit; bench --smoke --json is one valid JSON object with both
# methods; bench --gpu agrees with the CPU or says why it cannot run; bad options exit 2 and
# broken event files exit 1 with a message, never a crash.
# Usage: bash test_trigger_rich_cli.sh PATH/TO/sddaq
set -u -o pipefail

sddaq=${1:?usage: test_trigger_rich_cli.sh PATH/TO/sddaq}
[ -x "$sddaq" ] || { echo "skipped: no sddaq binary"; exit 77; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/trigger-rich-cli.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
have_python=$(command -v python3 >/dev/null && echo 1 || echo 0)
json_ok() { [ "$have_python" = 0 ] || python3 -m json.tool "$1" >/dev/null; }

"$sddaq" trigger rich gen -n 3000 --seed 9 -o "$dir/ev.rev" >"$dir/gen.out" 2>&1 ||
    fail "gen failed: $(cat "$dir/gen.out")"
grep -q "wrote 3000 events" "$dir/gen.out" && grep -q "hits/event" "$dir/gen.out" ||
    fail "gen statistics missing: $(cat "$dir/gen.out")"
"$sddaq" trigger rich gen -n 3000 --seed 9 -o "$dir/ev2.rev" >/dev/null 2>&1 || fail "second gen"
cmp -s "$dir/ev.rev" "$dir/ev2.rev" || fail "the same seed wrote two different files"
"$sddaq" trigger rich gen -n 3000 --seed 10 -o "$dir/ev3.rev" >/dev/null 2>&1 || fail "third gen"
cmp -s "$dir/ev.rev" "$dir/ev3.rev" && fail "another seed wrote the same file"

for variant in "--method hist" "--method ptolemy" "--method hist --fit crawford --buffer 128" \
    "--method hist --simd portable"; do
    # shellcheck disable=SC2086
    "$sddaq" trigger rich run -i "$dir/ev.rev" $variant -o "$dir/file.csv" --json \
        >"$dir/file.json" 2>"$dir/file.err" || fail "run -i ($variant): $(cat "$dir/file.err")"
    # shellcheck disable=SC2086
    "$sddaq" trigger rich run -n 3000 --seed 9 $variant -o "$dir/gen.csv" --json \
        >"$dir/gen.json" 2>"$dir/gen.err" || fail "run ($variant): $(cat "$dir/gen.err")"
    [ "$(wc -l <"$dir/gen.csv")" -gt 2000 ] || fail "run ($variant) found almost no rings"
    cmp -s "$dir/file.csv" "$dir/gen.csv" || fail "rings differ, file vs generated ($variant)"
    json_ok "$dir/gen.json" || fail "run --json is not JSON: $(cat "$dir/gen.json")"
    sed 's/"source":"[^"]*",//' "$dir/file.json" >"$dir/a.json"
    sed 's/"source":"[^"]*",//' "$dir/gen.json" >"$dir/b.json"
    cmp -s "$dir/a.json" "$dir/b.json" || fail "scores differ ($variant)"
done
# Every vector build this CPU has finds the portable build's rings and scores (the unit test
# compares them bit for bit); one it lacks is refused, naming what it needs.
"$sddaq" trigger rich run -n 3000 --seed 9 --simd portable -o "$dir/portable.csv" --json \
    >"$dir/portable.json" 2>/dev/null || fail "run --simd portable"
for simd in avx2 avx512; do
    if "$sddaq" trigger rich run -n 3000 --seed 9 --simd $simd -o "$dir/$simd.csv" --json \
        >"$dir/$simd.json" 2>"$dir/$simd.err"; then
        grep -q "\"simd\":\"$simd\"" "$dir/$simd.json" || fail "run --simd $simd took another path"
        cmp -s "$dir/portable.csv" "$dir/$simd.csv" || fail "--simd $simd: other rings than portable"
        sed "s/\"simd\":\"$simd\"/\"simd\":\"portable\"/" "$dir/$simd.json" >"$dir/b.json"
        cmp -s "$dir/portable.json" "$dir/b.json" || fail "--simd $simd: other scores than portable"
    else
        grep -q "x86-64-v[34]" "$dir/$simd.err" || fail "run --simd $simd: $(cat "$dir/$simd.err")"
    fi
done
grep -q '"efficiency_10hits":0\.9' "$dir/gen.json" ||
    fail "hist efficiency for >= 10-hit rings not above 90 %: $(cat "$dir/gen.json")"
head -1 "$dir/gen.csv" | grep -q '^event,spot,cx,cy,r,nhits,quality$' ||
    fail "CSV header: $(head -1 "$dir/gen.csv")"
sed -n 2p "$dir/gen.csv" | grep -Eq '^[0-9]+,[01],[-0-9.]+,[-0-9.]+,[0-9.]+,[0-9]+,[0-9.]+$' ||
    fail "CSV line: $(sed -n 2p "$dir/gen.csv")"
"$sddaq" trigger rich run -n 2000 >"$dir/run.out" 2>&1 || fail "run (table): $(cat "$dir/run.out")"
for k in "efficiency" "fakes" "resolution" "event finder"; do
    grep -q "^$k" "$dir/run.out" || fail "run prints no '$k': $(cat "$dir/run.out")"
done

"$sddaq" trigger rich score -n 1500 >"$dir/score.out" 2>&1 || fail "score: $(cat "$dir/score.out")"
for k in hist+taubin hist+crawford ptolemy+taubin ptolemy+crawford; do
    grep -q "^$k " "$dir/score.out" || fail "score prints no $k: $(cat "$dir/score.out")"
done

"$sddaq" trigger rich bench --smoke --json >"$dir/bench.json" 2>"$dir/bench.err" ||
    fail "bench --smoke: $(cat "$dir/bench.err")"
json_ok "$dir/bench.json" || fail "bench --json is not JSON: $(cat "$dir/bench.json")"
grep -q '"method":"hist"' "$dir/bench.json" && grep -q '"method":"ptolemy"' "$dir/bench.json" &&
    grep -q '"p99_us"' "$dir/bench.json" && grep -q '"event_finder_ns_per_event"' "$dir/bench.json" ||
    fail "bench JSON incomplete: $(cat "$dir/bench.json")"
# -t 2: the latency is also timed with each buffer split over 2 threads.
"$sddaq" trigger rich bench --smoke --json -t 2 --method hist >"$dir/bench2.json" 2>"$dir/bench2.err" ||
    fail "bench -t 2: $(cat "$dir/bench2.err")"
grep -q '"latency_split":\[{"buffer_events":128,"threads":2' "$dir/bench2.json" ||
    fail "bench -t 2: no split latency: $(cat "$dir/bench2.json")"

# bench --gpu: with a CUDA GPU, every variant's rings equal the CPU's; without one, exit 1 and
# say why.
"$sddaq" trigger rich bench --gpu --smoke --json >"$dir/gpu.json" 2>"$dir/gpu.err"
rc=$?
if [ $rc -eq 0 ]; then
    json_ok "$dir/gpu.json" || fail "bench --gpu --json is not JSON: $(cat "$dir/gpu.json")"
    grep -q '"events_differing_from_cpu":[1-9]' "$dir/gpu.json" &&
        fail "bench --gpu: GPU rings differ from the CPU's: $(cat "$dir/gpu.json")"
    grep -q '"chains":\[{' "$dir/gpu.json" || fail "bench --gpu: no chain: $(cat "$dir/gpu.json")"
    grep -q '"inflight_per_thread":2' "$dir/gpu.json" &&
        grep -q '"cpu_ns_per_event_finder_merge":' "$dir/gpu.json" ||
        fail "bench --gpu: no in-flight depth or CPU split: $(cat "$dir/gpu.json")"
else
    [ $rc -eq 1 ] || fail "bench --gpu without a GPU: exit $rc, wanted 1"
    grep -q "no GPU variant ran" "$dir/gpu.err" && grep -q "rich-gpu: " "$dir/gpu.err" ||
        fail "bench --gpu without a GPU: no reason given: $(cat "$dir/gpu.err")"
fi

# Bad options: exit 2 with a message.
for bad in "--method circle" "--fit least" "--simd sse" "-n 0" "--buffer 0" "--window -1" \
    "--threshold 2" "--gpu-block 48" "--gpu-inflight 1" "--gpu-inflight 9" "--bogus"; do
    # shellcheck disable=SC2086
    "$sddaq" trigger rich run $bad >"$dir/bad.out" 2>&1
    rc=$?
    [ $rc -eq 2 ] || fail "run $bad: exit $rc, wanted 2: $(cat "$dir/bad.out")"
    [ -s "$dir/bad.out" ] || fail "run $bad: no message"
done
"$sddaq" trigger rich gen >"$dir/bad.out" 2>&1
[ $? -eq 2 ] || fail "gen without -o: wanted exit 2"
"$sddaq" trigger rich fly >"$dir/bad.out" 2>&1
[ $? -eq 2 ] || fail "unknown mode: wanted exit 2"

# Broken files: exit 1 with a message.
head -c 1000 "$dir/ev.rev" >"$dir/cut.rev"
"$sddaq" trigger rich run -i "$dir/cut.rev" >"$dir/cut.out" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "truncated file: exit $rc, wanted 1: $(cat "$dir/cut.out")"
grep -qi "corrupt" "$dir/cut.out" || fail "truncated file: no message: $(cat "$dir/cut.out")"
printf 'not a rich file at all, just text\n' >"$dir/junk.rev"
"$sddaq" trigger rich run -i "$dir/junk.rev" >"$dir/junk.out" 2>&1
[ $? -eq 1 ] || fail "junk file: wanted exit 1"
"$sddaq" trigger rich run -i "$dir/missing.rev" >"$dir/miss.out" 2>&1
[ $? -eq 1 ] || fail "missing file: wanted exit 1"
echo "ok"
