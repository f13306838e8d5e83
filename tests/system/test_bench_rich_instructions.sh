#!/usr/bin/env bash
# Smoke test of bench/rich_instructions.sh: the same binary given twice counts the same
# instructions per event (ratio exactly 1: the count does not move with the machine's load),
# and the row names the finder's functions. Skips (77) without valgrind or with a sanitizer
# build, which valgrind cannot run.
# Usage: bash test_bench_rich_instructions.sh PATH/TO/sddaq
set -u -o pipefail

sddaq=${1:?usage: test_bench_rich_instructions.sh PATH/TO/sddaq}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
fail() { echo "FAIL: $*"; exit 1; }
out=$(bash "$root/bench/rich_instructions.sh" --events 300 --simd portable "$sddaq" "$sddaq" \
    2>&1)
rc=$?
[ $rc = 77 ] && { echo "SKIP: $out"; exit 77; }
[ $rc = 0 ] || fail "exit $rc: $out"
rows=$(awk -v b="$sddaq" '$1 == b' <<<"$out")
[ "$(wc -l <<<"$rows")" = 2 ] || fail "not one row per binary: $out"
awk '{ if ($2 < 1000) exit 1 }' <<<"$rows" || fail "too few instructions per event: $out"
[ "$(awk '{ print $2 }' <<<"$rows" | sort -u | wc -l)" = 1 ] || fail "counts differ: $out"
awk 'NR == 2 { exit $3 != "1.0000" }' <<<"$rows" || fail "ratio not 1: $out"
grep -q "moments_portable" <<<"$rows" || fail "finder functions not named: $out"
echo "bench_rich_instructions: $(tail -1 <<<"$rows")"
