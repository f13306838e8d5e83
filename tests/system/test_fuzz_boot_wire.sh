#!/usr/bin/env bash
# Short libFuzzer run of the bootstrap wire parser (tests/fuzz/fuzz_boot_wire.c), as the CI
# fuzz smoke test. Skips (77) where clang with libFuzzer is not installed.
# Usage: test_fuzz_boot_wire.sh [sddaq binary, unused] ; FUZZ_SECONDS overrides the duration.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cc=$(command -v clang || command -v clang-14 || true)
[ -n "$cc" ] || { echo "skipped: clang not installed"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! "$cc" -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -I"$root/include" \
    -I"$root/src" "$root/tests/fuzz/fuzz_boot_wire.c" "$root/src/fabric/boot_wire.c" \
    "$root/src/core/err.c" "$root/src/core/log.c" -lpthread -o "$work/fuzz" 2>"$work/cc.log"; then
    if grep -q "libclang_rt.fuzzer\|cannot find.*fuzzer" "$work/cc.log"; then
        echo "skipped: clang has no libFuzzer runtime"
        exit 77
    fi
    cat "$work/cc.log"
    exit 1
fi
mkdir -p "$work/corpus"
export SDDAQ_LOG=none
"$work/fuzz" -max_total_time="${FUZZ_SECONDS:-20}" -max_len=70000 -timeout=10 \
    -print_final_stats=1 "$work/corpus" 2>&1 | tail -n 15
