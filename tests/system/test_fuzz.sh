#!/usr/bin/env bash
# Short libFuzzer runs of every parser of untrusted bytes (tests/fuzz/fuzz_*.c), as the CI fuzz
# smoke test: the bootstrap wire (src/fabric/boot_wire.c), the remote-memory control
# messages and ring adoption (src/rmem/wire.c, trb.c), the trigger's stub blocks
# (src/trigger/hough_stub.c), the readout packet parser (src/readout/packet.c) and the RICH
# receive-buffer event finder and merge (src/trigger/rich_event_finder.c, rich_merge.c). Skips (77)
# where clang with libFuzzer is not installed.
# The raw run-file reader (src/store/raw_read.c) is fuzzed too, and the topology config
# (src/ctl/config*.c, YAML through libyaml: parse, validate, emit and parse again) and the
# control API's JSON request body (src/ctl/http_json.c), and the bulks an event-builder RU
# writes into a BU's slots (src/evb/format.c: header, metadata, fragments).
# Usage: test_fuzz.sh [sddaq binary, unused] ; FUZZ_SECONDS overrides the time per target.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cc=$(command -v clang || command -v clang-14 || true)
[ -n "$cc" ] || { echo "skipped: clang not installed"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export SDDAQ_LOG=none

# fuzz NAME MAX_LEN SOURCES...: build tests/fuzz/NAME.c with the sources and run it.
fuzz() {
    local name=$1 max_len=$2
    shift 2
    local srcs=()
    for s in "$@"; do
        case $s in
        -l*) srcs+=("$s") ;; # a library the sources need (after them on the command line)
        *) srcs+=("$root/$s") ;;
        esac
    done
    if ! "$cc" -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -I"$root/include" \
        -I"$root/src" "$root/tests/fuzz/$name.c" "${srcs[@]}" "$root/src/core/err.c" \
        "$root/src/core/log.c" -lpthread -o "$work/$name" 2>"$work/cc.log"; then
        if grep -q "libclang_rt.fuzzer\|cannot find.*fuzzer" "$work/cc.log"; then
            echo "skipped: clang has no libFuzzer runtime"
            exit 77
        fi
        cat "$work/cc.log"
        exit 1
    fi
    mkdir -p "$work/corpus-$name"
    echo "== $name"
    "$work/$name" -max_total_time="${FUZZ_SECONDS:-15}" -max_len="$max_len" -timeout=10 \
        -print_final_stats=1 "$work/corpus-$name" 2>&1 | tail -n 15
}

fuzz fuzz_boot_wire 70000 src/fabric/boot_wire.c
fuzz fuzz_rmem_wire 4096 src/rmem/wire.c src/rmem/trb.c
fuzz fuzz_hough_stub 4096 src/trigger/hough_stub.c
fuzz fuzz_readout_packet 9000 src/readout/packet.c src/core/crc32c.c
fuzz fuzz_store_raw 65536 src/store/raw_read.c src/core/crc32c.c
fuzz fuzz_rich_packet 16384 src/trigger/rich_event_finder.c src/trigger/rich_merge.c \
    src/trigger/rich_geom.c src/trigger/rich_packet.c src/trigger/gen/rich_gen.c
fuzz fuzz_config 8192 src/ctl/config.c src/ctl/config_parse.c src/ctl/config_validate.c \
    src/ctl/config_emit.c src/ctl/config_default.c src/ctl/sbuf.c -lyaml
fuzz fuzz_ctl_json 4096 src/ctl/http_json.c
fuzz fuzz_evb_bulk 65536 src/evb/format.c src/core/crc32c.c -lm
