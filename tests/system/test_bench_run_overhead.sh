#!/usr/bin/env bash
# Smoke test of bench/run_overhead.sh: a --smoke run over tcp and shm at 1 KiB and 4 KiB must
# exit 0 (every `sddaq run` ended OK with every event accounted for), print a ratio row with a
# verdict for each provider and size and the default chain's line with its stage ages, and leave
# a JSON report that agrees with the table. Skips (77) when python3 or a provider is missing.
# Usage: bash test_bench_run_overhead.sh PATH/TO/sddaq
set -u -o pipefail

sddaq=${1:?usage: test_bench_run_overhead.sh PATH/TO/sddaq}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python=/usr/bin/python3
[ -x "$python" ] || python=$(command -v python3) || { echo "SKIP: python3 not installed"; exit 77; }
if [ ! -x "$sddaq" ]; then
    echo "FAIL: sddaq binary '$sddaq' not found"
    exit 1
fi
command -v flock >/dev/null 2>&1 || { echo "SKIP: flock not installed"; exit 77; }
info=$("$sddaq" info 2>/dev/null)
for p in tcp shm; do
    if ! echo "$info" | awk -v p="$p" '$1 == p && !/no matching/ { ok = 1 } END { exit !ok }'; then
        echo "SKIP: fabric provider $p not available"
        exit 77
    fi
done

out=$(mktemp "${TMPDIR:-/tmp}/bench-run-overhead.XXXXXX")
log=$(mktemp "${TMPDIR:-/tmp}/bench-run-overhead-log.XXXXXX")
trap 'rm -f "$out" "$log"' EXIT

timeout 150 bash "$root/bench/run_overhead.sh" --smoke --sddaq "$sddaq" --providers tcp,shm \
    --frag-sizes 1K,4K --out "$out" >"$log" 2>&1
rc=$?
if [ "$rc" != 0 ]; then
    cat "$log"
    echo "FAIL: bench/run_overhead.sh exited $rc"
    exit 1
fi

"$python" - "$out" "$log" <<'EOF'
import json, math, re, sys

with open(sys.argv[1]) as f:
    report = json.load(f)
with open(sys.argv[2]) as f:
    text = f.read()
problems = []
summary = {(e["provider"], e["frag"]): e for e in report.get("summary", [])}
for prov in ("tcp", "shm"):
    for frag, label in ((1024, "1 KiB"), (4096, "4 KiB")):
        e = summary.get((prov, frag))
        if e is None:
            problems.append("%s %s: no summary entry" % (prov, label))
            continue
        for side in ("runtime", "bare"):
            st = e[side]["events_per_s"]
            if not st or not (st["median"] > 0 and math.isfinite(st["median"])):
                problems.append("%s %s: no %s events/s" % (prov, label, side))
        r = e.get("ratio")
        if not isinstance(r, float) or not r > 0 or e.get("verdict") not in ("PASS", "MISS", "OPEN"):
            problems.append("%s %s: no ratio or verdict" % (prov, label))
            continue
        row = re.compile(r"^%s\s+%s\s+\d+\s.*\s%.2f\s.*>= 0\.90 %s$"
                         % (prov, label, r, e["verdict"]), re.M)
        if not row.search(text):
            problems.append("%s %s: no table row with ratio %.2f %s"
                            % (prov, label, r, e["verdict"]))
d = report.get("default_chain") or {}
if d.get("status") != "ok" or not (d.get("events_per_s") or 0) > 0 \
        or d.get("kept_fraction") is None:
    problems.append("default chain: no result (%s)" % d.get("error"))
if not re.search(r"^default chain: \S+ ev/s built .* kept [0-9.]+ %", text, re.M):
    problems.append("no 'default chain:' line")
ages = re.search(r"^default chain age p50/p99 \(us\): (.*)$", text, re.M)
if not ages or not all(n in ages.group(1) for n in ("trigger", "writer", "results")):
    problems.append("no default chain age line for trigger, writer and results")
if report.get("failures") != 0 or not report.get("samples") \
        or "quiet_before" not in report.get("meta", {}):
    problems.append("failures, raw samples or the quiet line missing from the JSON")
if problems:
    print("\n".join(problems))
    sys.exit("FAIL: incomplete report")
print("ok: %d ratio rows and the default chain" % len(summary))
EOF
rc=$?
if [ "$rc" != 0 ]; then
    cat "$log"
    exit 1
fi
exit 0
