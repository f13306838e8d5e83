#!/usr/bin/env bash
# sddaq rmem from the command line, over tcp: a served buffer is cloned (every element counted,
# none torn into the output), a served region answers pings, bench prints both latency tables,
# and bad arguments exit 2. Usage: bash test_rmem_cli.sh PATH/TO/sddaq
set -u -o pipefail

sddaq=${1:?usage: test_rmem_cli.sh PATH/TO/sddaq}
dir=$(mktemp -d "${TMPDIR:-/tmp}/rmem-cli.XXXXXX")
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Wait for "... on port N" in a server's output; print N.
port_of() {
    for _ in $(seq 100); do
        p=$(sed -n 's/.* on port \([0-9]*\).*/\1/p' "$1" | head -1)
        [ -n "$p" ] && { echo "$p"; return 0; }
        sleep 0.05
    done
    return 1
}

"$sddaq" rmem serve -p tcp --host 127.0.0.1 --ksb 4096 --rate 2000 -D 4 >"$dir/ksb.out" 2>&1 &
port=$(port_of "$dir/ksb.out") || fail "no buffer server: $(cat "$dir/ksb.out")"
"$sddaq" rmem clone "127.0.0.1:$port" -p tcp -n 500 --json >"$dir/clone.out" 2>&1 ||
    fail "clone failed: $(cat "$dir/clone.out")"
grep -q '"test":"element_age","samples":500' "$dir/clone.out" ||
    fail "clone did not deliver 500 elements: $(cat "$dir/clone.out")"

"$sddaq" rmem serve -p tcp --host 127.0.0.1 -s 64K -D 4 >"$dir/srv.out" 2>&1 &
port=$(port_of "$dir/srv.out") || fail "no region server: $(cat "$dir/srv.out")"
"$sddaq" rmem ping "127.0.0.1:$port" -p tcp -n 200 >"$dir/ping.out" 2>&1 ||
    fail "ping failed: $(cat "$dir/ping.out")"
grep -q "ping  *200 " "$dir/ping.out" || fail "no ping histogram: $(cat "$dir/ping.out")"

"$sddaq" rmem bench -p tcp -n 500 -s 1M >"$dir/bench.out" 2>&1 ||
    fail "bench failed: $(cat "$dir/bench.out")"
grep -q "sync_8B" "$dir/bench.out" && grep -q "1000000" "$dir/bench.out" ||
    fail "bench output incomplete: $(cat "$dir/bench.out")"

"$sddaq" rmem ping >/dev/null 2>&1; [ $? = 2 ] || fail "ping without a target must exit 2"
"$sddaq" rmem serve --ksb 3 >/dev/null 2>&1; [ $? = 2 ] || fail "a 3-byte element must exit 2"
"$sddaq" rmem ping "127.0.0.1:1" -p tcp -n 1 >/dev/null 2>&1 && fail "ping to nobody succeeded"
echo "PASS"
