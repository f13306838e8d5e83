#!/usr/bin/env bash
# Instructions the RICH ring finder executes per event, counted by valgrind's callgrind, for one
# or more sddaq binaries on the same generated events: an A/B that does not move with this VM's
# timing noise (about +-10 % per `sddaq trigger rich bench` run), for changes of a few per cent.
# It counts instructions, not cycles: cache misses and dependency chains do not show, so a
# change is called faster only once it is also timed. Per binary it prints the instructions in
# sdd_rich_find (everything the finder does per event, its callees included) per event, the
# ratio to the first binary, and the functions that execute the most.
# Usage: bench/rich_instructions.sh [--events N] [--simd V] [--method M] [--top K] SDDAQ...
#   --events N  events (default 20000); --simd portable | avx2 | avx512 (default avx2);
#   --method hist | ptolemy (default hist); --top K functions listed (default 6)
set -u -o pipefail

events=20000
simd=avx2
method=hist
top=6
bins=()
while [ $# -gt 0 ]; do
    case $1 in
    --events) events=$2; shift ;;
    --simd) simd=$2; shift ;;
    --method) method=$2; shift ;;
    --top) top=$2; shift ;;
    -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
    *) bins+=("$1") ;;
    esac
    shift
done
[ ${#bins[@]} -gt 0 ] || { echo "usage: $0 [options] SDDAQ..." >&2; exit 2; }
command -v valgrind >/dev/null && command -v callgrind_annotate >/dev/null ||
    { echo "rich_instructions: needs valgrind (apt-get install valgrind)" >&2; exit 77; }
for b in "${bins[@]}"; do
    # valgrind cannot run a binary built with the address sanitizer
    if ldd "$b" 2>/dev/null | grep -q libasan; then
        echo "rich_instructions: $b is built with the address sanitizer" >&2
        exit 77
    fi
done

dir=$(mktemp -d "${TMPDIR:-/tmp}/rich-instr.XXXXXX")
trap 'rm -rf "$dir"' EXIT
"${bins[0]}" trigger rich gen -n "$events" -o "$dir/events.bin" >/dev/null ||
    { echo "rich_instructions: cannot generate events" >&2; exit 1; }

first=
printf "%-40s %14s %8s  %s\n" "binary" "instr/event" "ratio" "most executed (share)"
for b in "${bins[@]}"; do
    out="$dir/cg.out"
    valgrind --tool=callgrind --callgrind-out-file="$out" --collect-atstart=no \
        --toggle-collect=sdd_rich_find "$b" trigger rich run -i "$dir/events.bin" \
        --method "$method" --simd "$simd" >/dev/null 2>"$dir/vg.err" ||
        { echo "rich_instructions: $b failed: $(tail -3 "$dir/vg.err")" >&2; exit 1; }
    total=$(callgrind_annotate "$out" | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
    [ -n "$total" ] && [ "$total" -gt 0 ] ||
        { echo "rich_instructions: $b: no instructions counted in sdd_rich_find" >&2; exit 1; }
    per=$(awk -v t="$total" -v n="$events" 'BEGIN { printf "%.0f", t / n }')
    first=${first:-$per}
    ratio=$(awk -v a="$per" -v f="$first" 'BEGIN { printf "%.4f", a / f }')
    # lines like "29,619,353 (25.09%)  ???:update_avx2 [binary]"
    funcs=$(callgrind_annotate "$out" |
        sed -nE 's/^ *[0-9,]+ +\( *([0-9.]+%)\) +[^ ]*:([A-Za-z0-9_]+).*/\2 \1/p' |
        head -n "$top" | paste -sd, - | sed 's/,/, /g')
    printf "%-40s %14s %8s  %s\n" "$b" "$per" "$ratio" "$funcs"
done
