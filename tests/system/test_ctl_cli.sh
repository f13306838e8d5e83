#!/usr/bin/env bash
# sddaq config and sddaq ctl from the command line: `config check` passes the example
# topologies (exit 0) and lists every problem of a bad file as file:line:col: key: message
# (exit 1); `config show` output parses back to itself (and, where PyYAML is installed, is
# YAML to an independent parser too); `ctl` drives a `ctl serve-test` server through legal
# and illegal transitions, reads state and metrics, and fails cleanly once it is gone.
# Usage: bash test_ctl_cli.sh PATH/TO/sddaq
set -u -o pipefail

sddaq=${1:?usage: test_ctl_cli.sh PATH/TO/sddaq}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/ctl-cli.XXXXXX")
server=
cleanup() {
    [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
export SDDAQ_LOG=none

# --- config check ---------------------------------------------------------------------------
for f in "$root"/examples/topologies/*.yaml; do
    out=$("$sddaq" config check "$f") || fail "config check $f"
    grep -q ": ok (" <<<"$out" || fail "config check $f said: $out"
done
cat >"$dir/bad.yaml" <<'YAML'
fabric:
  credits: 0
stages:
  - name: src
    type: bilder
  - {name: w, type: writer, colour: blue}
links:
  - {from: src, to: nowhere}
YAML
"$sddaq" config check "$dir/bad.yaml" >"$dir/out" 2>"$dir/err"
[ $? -eq 1 ] || fail "config check of a bad file did not exit 1"
for want in \
    "$dir/bad.yaml:2:12: fabric.credits: value 0 is out of range (1 to 65536)" \
    "$dir/bad.yaml:5:11: stages\[0\].type: unknown stage type 'bilder' (expected one of: source, ru, bu, process, writer, feedback)" \
    "$dir/bad.yaml:6:29: stages\[1\].colour: unknown key for a 'writer' stage" \
    "$dir/bad.yaml: 3 problems"; do
    grep -q "^$want" "$dir/err" || fail "missing '$want' in: $(cat "$dir/err")"
done
# A good and a bad file together: both reported, exit 1.
"$sddaq" config check "$root/examples/topologies/default.yaml" "$dir/bad.yaml" >"$dir/out" 2>/dev/null
[ $? -eq 1 ] || fail "good + bad did not exit 1"
grep -q "default.yaml: ok" "$dir/out" || fail "good file not reported ok with a bad one"
# Graph problems from the validator (no syntax problem at all).
printf 'stages:\n  - {name: s, type: source}\n  - {name: p, type: process}\nlinks:\n  - {from: s, to: p}\n' >"$dir/nosink.yaml"
"$sddaq" config check "$dir/nosink.yaml" 2>"$dir/err" >/dev/null && fail "chain without sink passed"
grep -q "nosink.yaml:3:5: stages\[1\]: process 'p' has no output link" "$dir/err" ||
    fail "no-sink message: $(cat "$dir/err")"
"$sddaq" config check "$dir/missing.yaml" 2>"$dir/err" >/dev/null
[ $? -eq 1 ] || fail "missing file did not exit 1"
grep -q "missing.yaml: cannot read" "$dir/err" || fail "missing file message: $(cat "$dir/err")"
"$sddaq" config check >/dev/null 2>&1
[ $? -eq 2 ] || fail "config check without a file did not exit 2"
"$sddaq" config frobnicate >/dev/null 2>&1
[ $? -eq 2 ] || fail "unknown config subcommand did not exit 2"

# --- config show ----------------------------------------------------------------------------
"$sddaq" config show >"$dir/show.yaml" || fail "config show (default)"
grep -q "^  - name: trigger$" "$dir/show.yaml" || fail "default show lacks the trigger stage"
grep -q "^    algorithm: hough$" "$dir/show.yaml" || fail "default show lacks hough"
grep -q "^    path: runs/default_writer.h5$" "$dir/show.yaml" || fail "default writer path"
"$sddaq" config check "$dir/show.yaml" >/dev/null || fail "config show output does not check"
"$sddaq" config show "$dir/show.yaml" | tail -n +2 >"$dir/show2.yaml" || fail "show of show"
tail -n +2 "$dir/show.yaml" | diff - "$dir/show2.yaml" >/dev/null || fail "show is not a fixed point"
"$sddaq" config default | diff - "$root/examples/topologies/default.yaml" >/dev/null ||
    fail "config default differs from examples/topologies/default.yaml"
for f in "$root"/examples/topologies/*.yaml; do
    "$sddaq" config show "$f" >"$dir/s.yaml" || fail "config show $f"
    "$sddaq" config check "$dir/s.yaml" >/dev/null || fail "show of $f does not check"
    if python3 -c 'import yaml' 2>/dev/null; then
        python3 -c 'import sys, yaml; d = yaml.safe_load(open(sys.argv[1])); assert d["stages"] and d["links"]' \
            "$dir/s.yaml" || fail "PyYAML cannot read the show of $f"
    fi
done
"$sddaq" config show "$dir/bad.yaml" >/dev/null 2>&1 && fail "show of a bad file succeeded"
# The example in docs/config.md is a valid topology.
awk '/^## Example/{on=1} on&&/^```yaml/{grab=1; next} grab&&/^```/{exit} grab' \
    "$root/docs/config.md" >"$dir/doc.yaml"
[ -s "$dir/doc.yaml" ] || fail "no example found in docs/config.md"
"$sddaq" config check "$dir/doc.yaml" >/dev/null || fail "the docs/config.md example does not check"

# --- the Grafana dashboard queries only metric families docs/metrics.md defines -------------
command -v python3 >/dev/null &&
    { python3 - "$root" <<'PY' || fail "grafana dashboard and docs/metrics.md disagree"; }
import json, re, sys
root = sys.argv[1]
doc = open(root + "/docs/metrics.md").read()
defined = set(re.findall(r"`sddaq_<type>_(\w+)`", doc)) | set(re.findall(r"`(sddaq_(?:run|source)_\w+)", doc))
dash = json.load(open(root + "/docs/grafana-sddaq.json"))
used = set()
for p in dash["panels"]:
    for t in p["targets"]:
        used |= set(re.findall(r"sddaq_\.\+_(\w+)", t["expr"]))
        used |= set(re.findall(r"(sddaq_(?:run|source)_\w+)", t["expr"]))
missing = sorted(u for u in used if u not in defined and not any(u == d + s for d in defined for s in ("_sum", "_count")))
if missing or len(used) < 8:
    print("undefined in docs/metrics.md:", missing, "used:", sorted(used))
    sys.exit(1)
PY

# --- ctl against serve-test -----------------------------------------------------------------
"$sddaq" ctl serve-test --port-file "$dir/port" --seconds 120 >"$dir/serve.out" 2>&1 &
server=$!
for _ in $(seq 1 200); do
    [ -s "$dir/port" ] && break
    kill -0 "$server" 2>/dev/null || fail "serve-test exited: $(cat "$dir/serve.out")"
    sleep 0.05
done
[ -s "$dir/port" ] || fail "serve-test wrote no port"
hp=127.0.0.1:$(cat "$dir/port")
ctl() { "$sddaq" ctl --host "$hp" "$@"; }
ctl state | grep -q '"state":"initial"' || fail "initial state"
ctl start 2>"$dir/err" && fail "start from initial succeeded"
grep -q 'HTTP 409: {"error":"illegal transition initial -> running","from":"initial","to":"running"}' \
    "$dir/err" || fail "409 message: $(cat "$dir/err")"
ctl configure | grep -q '"state":"configured"' || fail "configure"
ctl start --reason "beam on" | grep -q '"state":"running".*"reason":"beam on"' || fail "start"
ctl pause | grep -q '"state":"paused"' || fail "pause"
ctl pause 2>/dev/null && fail "pause twice succeeded"
ctl resume | grep -q '"state":"running"' || fail "resume"
ctl stop | grep -q '"state":"stopped"' || fail "stop"
ctl fail --reason "node b: disk full" | grep -q '"state":"error".*"reason":"node b: disk full"' ||
    fail "fail"
ctl reset | grep -q '"state":"initial"' || fail "reset"
m=$(ctl metrics) || fail "metrics"
grep -q '^sddaq_run_state{state="initial"} 1$' <<<"$m" || fail "metrics state: $m"
grep -q '^sddaq_run_transitions_total 7$' <<<"$m" || fail "metrics transitions: $m"
grep -q '^# TYPE sddaq_run_state gauge$' <<<"$m" || fail "metrics TYPE line: $m"
if command -v curl >/dev/null; then
    code=$(curl -s -o "$dir/body" -w '%{http_code}' -X POST -d '{"to":' "http://$hp/api/transition")
    [ "$code" = 400 ] || fail "bad JSON gave HTTP $code"
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://$hp/nope")
    [ "$code" = 404 ] || fail "unknown path gave HTTP $code"
    ct=$(curl -s -o /dev/null -w '%{content_type}' "http://$hp/metrics")
    [ "$ct" = "text/plain; version=0.0.4; charset=utf-8" ] || fail "metrics content type '$ct'"
fi
ctl bogus >/dev/null 2>&1
[ $? -eq 2 ] || fail "unknown ctl command did not exit 2"
"$sddaq" ctl --host nonsense state >/dev/null 2>&1
[ $? -eq 2 ] || fail "bad --host did not exit 2"
kill "$server"
wait "$server" 2>/dev/null
server=
ctl state 2>"$dir/err" && fail "state succeeded with the server gone"
grep -q "connection refused" "$dir/err" || fail "no-server message: $(cat "$dir/err")"
echo "ok"
