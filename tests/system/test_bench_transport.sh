#!/usr/bin/env bash
# Smoke test of bench/transport.sh: a --quick run over shm must exit 0 and leave a JSON report
# whose send/recv comparison has numbers for both sddaq perf and fi_pingpong. Skips (77) when the
# reference tools are not installed. Usage: bash test_bench_transport.sh PATH/TO/sddaq
set -u -o pipefail

sddaq=${1:?usage: test_bench_transport.sh PATH/TO/sddaq}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

for tool in fi_pingpong ucx_perftest python3; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "SKIP: $tool not installed"
        exit 77
    fi
done
if [ ! -x "$sddaq" ]; then
    echo "FAIL: sddaq binary '$sddaq' not found"
    exit 1
fi

out=$(mktemp "${TMPDIR:-/tmp}/bench-transport.XXXXXX")
log=$(mktemp "${TMPDIR:-/tmp}/bench-transport-log.XXXXXX")
trap 'rm -f "$out" "$log"' EXIT

timeout 170 bash "$root/bench/transport.sh" --quick --sddaq "$sddaq" --providers shm \
    --out "$out" >"$log" 2>&1
rc=$?
if [ "$rc" != 0 ]; then
    cat "$log"
    echo "FAIL: bench/transport.sh exited $rc"
    exit 1
fi

python3 - "$out" <<'EOF'
import json, math, sys

with open(sys.argv[1]) as f:
    report = json.load(f)

def has_number(stats):
    return bool(stats) and isinstance(stats.get("median"), (int, float)) \
        and math.isfinite(stats["median"]) and stats["median"] > 0

send = [e for e in report.get("summary", []) if e.get("case") == "send"]
if not send:
    sys.exit("FAIL: no send/recv comparison in the report")
problems = []
for metric in ("lat_us", "bw_MBps"):
    rows = [e for e in send if e.get("metric") == metric]
    if not rows:
        problems.append("no %s rows" % metric)
    for e in rows:
        for side, stats in (("fi_pingpong", e["reference"]["stats"]), ("sddaq", e["sddaq"]["stats"])):
            if not has_number(stats):
                problems.append("%s %s at %d B: no number (%s)"
                                % (side, metric, e["size"], "; ".join(e.get("problems", []))))
        if e.get("verdict") not in ("PASS", "MISS"):
            problems.append("%s at %d B: no verdict" % (metric, e["size"]))
if not report.get("samples") or "nproc" not in report.get("meta", {}):
    problems.append("raw samples or machine description missing")
if problems:
    print("\n".join(problems))
    sys.exit("FAIL: incomplete report")
print("ok: %d send/recv rows with sddaq and fi_pingpong numbers" % len(send))
EOF
rc=$?
if [ "$rc" != 0 ]; then
    cat "$log"
    exit 1
fi
exit 0
