#!/usr/bin/env bash
# System test of the sddaq command line: `sddaq info`, `sddaq perf self` with a duration and
# JSON output, a separate `perf server` / `perf client` pair over tcp with a port file,
# `perf mesh` (N processes writing to each other) over tcp and shm, one of its processes killed
# mid-run, and clear usage errors for bad arguments.
# Usage: test_perf_cli.sh PATH_TO_SDDAQ
set -uo pipefail
sddaq=${1:?usage: test_perf_cli.sh PATH_TO_SDDAQ}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
passed=0
failed=0
check() { # description, then a command that must succeed
    local what=$1
    shift
    if "$@"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAILED: $what" >&2
    fi
}

# Every JSON line must parse and carry the fields the benchmark script relies on.
valid_json() { # file, expected line count
    python3 - "$1" "$2" <<'PY'
import json, sys
lines = [l for l in open(sys.argv[1]) if l.strip()]
assert len(lines) == int(sys.argv[2]), "%d lines" % len(lines)
for l in lines:
    r = json.loads(l)
    for k in ("tool", "provider", "test", "op", "size", "iters", "bw_MBps", "lat_us"):
        assert k in r, k
    assert r["iters"] > 0 and r["bw_MBps"] > 0
    if r["test"] == "lat":
        assert 0 < r["lat_us"]["min"] <= r["lat_us"]["p50"] <= r["lat_us"]["max"]
PY
}

"$sddaq" info >"$work/info" 2>&1
check "info lists tcp" grep -q "^tcp *tcp;ofi_rxm" "$work/info"

"$sddaq" perf self -p tcp -t lat -o send -s 8,4K -D 0.2 --json >"$work/self.json" 2>"$work/self.err"
check "perf self exits 0" test $? -eq 0
check "perf self prints two valid JSON results" valid_json "$work/self.json" 2

"$sddaq" perf server -p tcp --host 127.0.0.1 --port-file "$work/port" --once 2>"$work/srv.err" &
srv=$!
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.05; done
"$sddaq" perf client "127.0.0.1:$(cat "$work/port")" -p tcp -t bw -o read -s 64K,1M -n 50 \
    --json >"$work/client.json" 2>"$work/client.err"
check "perf client exits 0" test $? -eq 0
check "perf client prints two valid JSON results" valid_json "$work/client.json" 2
wait "$srv"
check "perf server --once exits 0 after its client" test $? -eq 0

"$sddaq" perf client 127.0.0.1:1 -p tcp -n 10 >/dev/null 2>"$work/refused.err"
check "client to a closed port fails" test $? -ne 0
check "and says why" grep -q "connection refused" "$work/refused.err"
"$sddaq" perf client nohostport -s 8 >/dev/null 2>&1
check "malformed HOST:PORT is a usage error" test $? -eq 2
"$sddaq" perf self -s 32M >/dev/null 2>&1
check "sizes over 16 MiB are refused" test $? -eq 2
"$sddaq" perf self -p tcp -t bw -o write -s 64K --span 1M -D 0.2 --json >"$work/span.json" \
    2>"$work/span.err"
check "perf self --span exits 0" test $? -eq 0
check "perf self --span reports its span" grep -q '"span":1048576' "$work/span.json"
"$sddaq" perf self --span 32M >/dev/null 2>&1
check "spans over 16 MiB are refused" test $? -eq 2
"$sddaq" perf self -t nope >/dev/null 2>&1
check "unknown test is a usage error" test $? -eq 2
"$sddaq" nosuchcommand >/dev/null 2>&1
check "unknown command is a usage error" test $? -eq 2

# perf mesh: every process wrote, the total is the sum of what each moved.
mesh_ok() { # file, nodes
    python3 - "$1" "$2" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read())
n = int(sys.argv[2])
assert r["tool"] == "sddaq-perf-mesh" and r["ok"] is True and r["nodes"] == n, r
assert len(r["node_Gbps"]) == n and min(r["node_Gbps"]) > 0, r["node_Gbps"]
assert r["writes"] > 0 and r["bytes"] == r["writes"] * r["size"], r
assert abs(r["Gbps"] - r["bytes"] * 8e-9 / r["seconds"]) < 0.01 * r["Gbps"] + 0.01, r
PY
}
"$sddaq" perf mesh -p tcp -n 3 -s 64K -w 8 -D 0.3 --json >"$work/mesh3.json" 2>"$work/mesh3.err"
check "perf mesh over tcp, 3 nodes, exits 0" test $? -eq 0
check "and every node wrote" mesh_ok "$work/mesh3.json" 3
"$sddaq" perf mesh -p shm -n 2 -s 16K -D 0.3 --json >"$work/mesh2.json" 2>"$work/mesh2.err"
check "perf mesh over shm, 2 nodes, exits 0" test $? -eq 0
check "and every node wrote" mesh_ok "$work/mesh2.json" 2

# A node killed mid-run: the others notice, the run fails within seconds, nothing hangs.
"$sddaq" perf mesh -p tcp -n 3 -s 64K -D 20 >"$work/killed.out" 2>"$work/killed.err" &
mesh=$!
sleep 1.5
victim=$(pgrep -P "$mesh" | head -1)
[ -n "$victim" ] && kill -9 "$victim"
t0=$SECONDS
wait "$mesh"
rc=$?
check "perf mesh with a node killed exits 1" test "$rc" -eq 1
check "within 10 s of the kill" test $((SECONDS - t0)) -le 10
check "and reports the failure" grep -q "FAILED" "$work/killed.out"

"$sddaq" perf mesh -n 1 >/dev/null 2>&1
check "perf mesh wants two nodes at least" test $? -eq 2
"$sddaq" perf mesh -n 65 >/dev/null 2>&1
check "perf mesh refuses more than 64 nodes" test $? -eq 2
"$sddaq" perf mesh -s 0 >/dev/null 2>&1
check "perf mesh refuses size 0" test $? -eq 2
"$sddaq" perf mesh -p nosuchprovider -D 0.2 >/dev/null 2>"$work/noprov.err"
check "perf mesh on a missing provider fails" test $? -eq 1
check "and says so" grep -qi "provider" "$work/noprov.err"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
