#!/usr/bin/env bash
# sddaq trigger hough from the command line: generated events written to a file and read back
# give exactly the candidates and scores of the same events generated in memory (both maps,
# with and without merge); score prints both maps per pileup level; bench --smoke --json is one
# valid JSON object; bad options exit 2 and broken event files exit 1 with a message, never a
# crash. Usage: bash test_trigger_cli.sh PATH/TO/sddaq
set -u -o pipefail

sddaq=${1:?usage: test_trigger_cli.sh PATH/TO/sddaq}
dir=$(mktemp -d "${TMPDIR:-/tmp}/trigger-cli.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
have_python=$(command -v python3 >/dev/null && echo 1 || echo 0)
json_ok() { [ "$have_python" = 0 ] || python3 -m json.tool "$1" >/dev/null; }

"$sddaq" trigger hough gen --pu 140 -n 150 --seed 5 -o "$dir/ev.hev" >"$dir/gen.out" 2>&1 ||
    fail "gen failed: $(cat "$dir/gen.out")"
grep -q "wrote 150 events" "$dir/gen.out" && grep -q "stubs/event" "$dir/gen.out" &&
    grep -q "noise" "$dir/gen.out" || fail "gen statistics missing: $(cat "$dir/gen.out")"
"$sddaq" trigger hough gen --pu 140 -n 150 --seed 5 -o "$dir/ev2.hev" >/dev/null 2>&1 ||
    fail "second gen failed"
cmp -s "$dir/ev.hev" "$dir/ev2.hev" || fail "the same seed wrote two different files"

# From the file and generated in memory with the same seed: identical candidates and scores.
for variant in "--map rect" "--map hex" "--map rect --merge" "--map hex --merge --impl seed"; do
    # shellcheck disable=SC2086
    "$sddaq" trigger hough run -i "$dir/ev.hev" $variant -o "$dir/file.csv" --json \
        >"$dir/file.json" 2>"$dir/file.err" || fail "run -i ($variant): $(cat "$dir/file.err")"
    # shellcheck disable=SC2086
    "$sddaq" trigger hough run --pu 140 -n 150 --seed 5 $variant -o "$dir/gen.csv" --json \
        >"$dir/gen.json" 2>"$dir/gen.err" || fail "run ($variant): $(cat "$dir/gen.err")"
    [ "$(wc -l <"$dir/gen.csv")" -gt 10 ] || fail "run ($variant) found almost no candidates"
    cmp -s "$dir/file.csv" "$dir/gen.csv" || fail "candidates differ, file vs generated ($variant)"
    json_ok "$dir/gen.json" || fail "run --json is not JSON: $(cat "$dir/gen.json")"
    sed 's/"source":"[^"]*",//' "$dir/file.json" >"$dir/a.json"
    sed 's/"source":"[^"]*",//' "$dir/gen.json" >"$dir/b.json"
    cmp -s "$dir/a.json" "$dir/b.json" ||
        fail "scores differ, file vs generated ($variant): $(cat "$dir/a.json" "$dir/b.json")"
done
grep -q '"efficiency":' "$dir/gen.json" || fail "run --json has no efficiency"

# Every vector path the CPU has finds the same candidates, stub lists included.
for simd in x8 avx512; do
    if "$sddaq" trigger hough run -i "$dir/ev.hev" --simd $simd -o "$dir/$simd.csv" --json \
        >"$dir/$simd.json" 2>"$dir/$simd.err"; then
        grep -q "\"simd\":\"$simd\"" "$dir/$simd.json" || fail "run --simd $simd took another path"
        cmp -s "$dir/x8.csv" "$dir/$simd.csv" || fail "--simd $simd finds other candidates than x8"
    else
        [ $simd = avx512 ] && grep -q "x86-64-v4" "$dir/$simd.err" ||
            fail "run --simd $simd: $(cat "$dir/$simd.err")"
    fi
done
head -1 "$dir/gen.csv" | grep -q '^event,col,row,qpt,phi_t,layers,nstubs,flags,stubs$' ||
    fail "CSV header: $(head -1 "$dir/gen.csv")"
sed -n 2p "$dir/gen.csv" | grep -Eq '^[0-9]+,[0-9]+,[0-9]+,[-0-9.]+,[-0-9.]+,[0-9]+,[0-9]+,[0-9]+,[0-9;]+$' ||
    fail "CSV line: $(sed -n 2p "$dir/gen.csv")"
"$sddaq" trigger hough run --pu 140 -n 150 --seed 5 >"$dir/run.out" 2>&1 ||
    fail "run (table): $(cat "$dir/run.out")"
for k in candidates efficiency fakes duplicates "q/pT" phi_T; do
    grep -q "^$k" "$dir/run.out" || fail "run prints no '$k': $(cat "$dir/run.out")"
done

"$sddaq" trigger hough score -n 100 --pu 0,200 >"$dir/score.out" 2>&1 ||
    fail "score failed: $(cat "$dir/score.out")"
for pu in 0 200; do
    for map in rect hex; do
        for merge in off on; do
            grep -Eq "^$pu +$map +$merge " "$dir/score.out" ||
                fail "score lacks PU $pu $map merge $merge: $(cat "$dir/score.out")"
        done
    done
done
grep -q "hex/rect" "$dir/score.out" || fail "score prints no hex/rect ratio"
"$sddaq" trigger hough score -n 50 --pu 140 --json >"$dir/score.json" 2>&1 &&
    json_ok "$dir/score.json" || fail "score --json: $(cat "$dir/score.json")"

"$sddaq" trigger hough bench --smoke --json >"$dir/bench.json" 2>"$dir/bench.err" ||
    fail "bench --smoke failed: $(cat "$dir/bench.err")"
json_ok "$dir/bench.json" || fail "bench --json is not JSON: $(cat "$dir/bench.json")"
for k in '"variants"' '"unpack"' '"batch"' '"seed_gpu_rect_us"' '"impl":"seed"' '"map":"hex"'; do
    grep -q "$k" "$dir/bench.json" || fail "bench JSON lacks $k"
done

# Bad options: usage and exit 2.
for args in "run --map square" "run --impl slow" "run --pu -5" "run --pu 1,2" "run --events 0" \
    "run --bend-window x" "run --pt-min 0" "run --simd sse" "gen" "frob" "run stray" "run --nonsense" \
    "bench --threads 0"; do
    # shellcheck disable=SC2086
    "$sddaq" trigger hough $args >/dev/null 2>"$dir/err"
    rc=$?
    [ $rc = 2 ] || fail "'trigger hough $args' exited $rc, not 2"
    [ -s "$dir/err" ] || fail "'trigger hough $args' said nothing"
done
"$sddaq" trigger >/dev/null 2>&1; [ $? = 2 ] || fail "'trigger' alone must exit 2"
"$sddaq" trigger l1 run >/dev/null 2>&1; [ $? = 2 ] || fail "an unknown trigger must exit 2"

# Broken event files: a clear error and exit 1, not a crash.
size=$(stat -c %s "$dir/ev.hev")
head -c $((size / 2)) "$dir/ev.hev" >"$dir/trunc.hev"
head -c $((size - 3)) "$dir/ev.hev" >"$dir/trunc2.hev"
head -c 5 "$dir/ev.hev" >"$dir/tiny.hev"
: >"$dir/empty.hev"
cp "$dir/ev.hev" "$dir/magic.hev"
printf 'XXXX' | dd of="$dir/magic.hev" bs=1 seek=0 conv=notrunc 2>/dev/null
head -c 4096 /dev/urandom >"$dir/random.hev"
for f in trunc trunc2 tiny empty magic random missing; do
    for mode in run score; do
        "$sddaq" trigger hough $mode -i "$dir/$f.hev" >/dev/null 2>"$dir/err"
        rc=$?
        [ $rc = 1 ] || fail "$mode -i $f.hev exited $rc, not 1: $(cat "$dir/err")"
        grep -q "sddaq trigger" "$dir/err" || fail "$mode -i $f.hev: no message: $(cat "$dir/err")"
    done
done
echo "PASS"
