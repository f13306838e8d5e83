#!/usr/bin/env bash
# Runtime overhead benchmark (issue 8): `sddaq run` of an event-builder topology whose processing
# is `none` and whose writer is `null`, next to the bare event builder (`sddaq evb launch -n 2`)
# with the same provider, events, fragment size, bulk 64 and credits 4, in one invocation.
# For each provider and fragment size the two alternate ABBA-style (odd repetitions start with
# `sddaq run`, even ones with `evb launch`); the report gives median events/s with min-max, the
# ratio runtime/bare of the medians (target >= 0.90, i.e. overhead <= 10 %), the ratios of the
# back-to-back pairs, and the CPU seconds each side spent per million events.
# Topology: two evb-emu sources (fixed size F, seed 1, 1 stream) -> ru0, ru1 -> bu0, bu1 (every
# ru to every bu) -> process `none` -> writer `null`, one node, fabric provider P; checked with
# `sddaq config check` before it runs. Every `sddaq run` must end "status":"OK" with
# "accounted":true, or the script fails.
# Then the embedded default chain (`sddaq run -d S`: hough-emu sources -> 2 RU -> 2 BU -> Hough
# trigger -> HDF5 writer + feedback buffer) in a scratch directory (its HDF5 file is deleted):
# events/s built, kept fraction, p50/p99 age (since built) at the trigger, writer and results.
# The measured part holds /tmp/sddaq-bench.lock and starts after ../shared/tools/quiet.
#
# Usage: bench/run_overhead.sh [--sddaq PATH] [--events N] [--repeat R] [--providers tcp,shm]
#                              [--frag-sizes 1K,4K] [--default-seconds S] [--smoke]
#                              [--timeout S] [--out FILE.json] [--keep-logs]
#   --events   events per run (default: 4 GiB of fragments per source, 4194304 at 1 KiB;
#              --smoke: 1/64 of that)
#   --repeat   A/B pairs per point (default 5; --smoke: 1)
#   --default-seconds  length of the default-chain run (default 5; --smoke: 2; 0 skips it)
#   --no-pin   let the OS place every thread (default: event-builder node k runs on CPU k, in the
#              runtime through the topology's cores and in the bare builder through --pin)
# A provider that `sddaq info` does not find is reported as missing and skipped. Exit 0 when
# every run ended cleanly (missed targets are reported, not fatal); 1 when a run failed, did
# not account for every event, or a provider was missing; 2 on bad usage.
set -u -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
sddaq="$root/build/sddaq"
events=""
repeat=""
providers="tcp,shm"
frag_sizes="1K,4K"
default_seconds=""
smoke=0
run_timeout=""
out=""
keep_logs=0
pin=1
lock=/tmp/sddaq-bench.lock
python=/usr/bin/python3
[ -x "$python" ] || python=$(command -v python3 || echo python3)

usage() { # the comment block at the top of this file
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"
}

while [ $# -gt 0 ]; do
    case "$1" in
    --sddaq) sddaq=${2:?--sddaq needs a path}; shift 2 ;;
    --events) events=${2:?--events needs a number}; shift 2 ;;
    --repeat) repeat=${2:?--repeat needs a number}; shift 2 ;;
    --providers) providers=${2:?--providers needs a list}; shift 2 ;;
    --frag-sizes) frag_sizes=${2:?--frag-sizes needs a list}; shift 2 ;;
    --default-seconds) default_seconds=${2:?--default-seconds needs seconds}; shift 2 ;;
    --smoke) smoke=1; shift ;;
    --timeout) run_timeout=${2:?--timeout needs seconds}; shift 2 ;;
    --out) out=${2:?--out needs a file}; shift 2 ;;
    --keep-logs) keep_logs=1; shift ;;
    --no-pin) pin=0; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "run_overhead.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
bad_number() { echo "run_overhead.sh: $1 wants a positive integer" >&2; exit 2; }
[ -z "$repeat" ] && repeat=$([ "$smoke" = 1 ] && echo 1 || echo 5)
case "$repeat" in '' | *[!0-9]* | 0) bad_number --repeat ;; esac
case "$events" in *[!0-9]* | 0) bad_number --events ;; esac
[ -z "$default_seconds" ] && default_seconds=$([ "$smoke" = 1 ] && echo 2 || echo 5)
case "$default_seconds" in *[!0-9]*) bad_number --default-seconds ;; esac
[ -z "$run_timeout" ] && run_timeout=$([ "$smoke" = 1 ] && echo 30 || echo 120)
case "$run_timeout" in *[!0-9]* | 0) bad_number --timeout ;; esac
case "$sddaq" in /*) ;; *) sddaq="$PWD/$sddaq" ;; esac

# Fragment sizes: 1K, 4KiB, 512 -> bytes.
frag_bytes=()
IFS=',' read -r -a frag_list <<<"$frag_sizes"
for f in "${frag_list[@]}"; do
    b=$(echo "$f" | awk '{ n = $0; m = 1
        if (sub(/(K|KiB)$/, "", n)) m = 1024; else if (sub(/(M|MiB)$/, "", n)) m = 1048576
        if (n !~ /^[0-9]+$/ || n == 0) exit 1; print n * m }') ||
        { echo "run_overhead.sh: bad fragment size '$f' (e.g. 512, 1K, 4K, 1M)" >&2; exit 2; }
    frag_bytes+=("$b")
done
IFS=',' read -r -a prov_list <<<"$providers"

if [ -z "$out" ]; then
    mkdir -p "$root/bench/results"
    # Results are per machine and per run: keep them out of git without touching .gitignore.
    [ -e "$root/bench/results/.gitignore" ] || printf '*\n' >"$root/bench/results/.gitignore"
    out="$root/bench/results/run-overhead-$(date +%Y%m%d-%H%M%S).json"
fi

log() { printf '%s\n' "$*" >&2; }

"$python" -c 'import json, statistics' 2>/dev/null ||
    { log "run_overhead.sh: python3 is needed for the report"; exit 1; }
if [ ! -x "$sddaq" ] || ! "$sddaq" run --help >/dev/null 2>&1; then
    log "run_overhead.sh: no working '$sddaq run' (build it, or give --sddaq PATH)"
    exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sddaq-run-overhead.XXXXXX")
cleanup() {
    if [ "$keep_logs" = 1 ]; then log "logs kept in $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Events per run: 4 GiB of fragments per source, so that even the fastest bare run (shm, 1 KiB,
# ~8 M events/s here) lasts half a second and start-up and end detection stay small next to it;
# a smoke run does 1/64 of it. Always whole bulks of 64.
events_for() { # fragment bytes
    local n
    if [ -n "$events" ]; then
        echo "$events"
        return
    fi
    n=$(((1 << 32) / $1))
    [ "$smoke" = 1 ] && n=$((n / 64))
    n=$((n / 64 * 64))
    [ "$n" -lt 4096 ] && n=4096
    echo "$n"
}

# --- providers and topologies (before the lock: nothing here is timed) ---------------------------
declare -A have_prov
info=$("$sddaq" info 2>/dev/null)
# What `fabric: {provider: auto}` (the default chain) picks, e.g. "tcp;ofi_rxm".
auto_provider=$(echo "$info" | awk '$1 == "auto" && $0 !~ /no matching/ { print $2 }')
for p in "${prov_list[@]}"; do
    if echo "$info" | awk -v p="$p" '$1 == p && !/no matching/ { ok = 1 } END { exit !ok }'; then
        have_prov[$p]=1
    else
        have_prov[$p]=0
        log "warning: provider '$p' not found by '$sddaq info'; skipped"
    fi
done

topo_for() { # provider fragment-bytes -> path of a checked topology
    local p=$1 f=$2 file="$tmp/topo-$1-$2.yaml" cores0="" cores1=""
    if [ "$pin" = 1 ]; then # event-builder node k on CPU k, as `evb launch --pin` places node k
        cores0=", cores: \"0\""
        cores1=", cores: \"$((1 % $(nproc)))\""
    fi
    cat >"$file" <<EOF
# bench/run_overhead.sh: the bare event builder's shape inside the runtime
run: {name: overhead}
fabric: {provider: $p}
nodes:
  - {name: local, host: 127.0.0.1, control_port: 0}
stages:
  - {name: src0, type: source, kind: evb-emu, streams: 1, seed: 1, fragment: {dist: fixed, size: $f}}
  - {name: src1, type: source, kind: evb-emu, streams: 1, seed: 1, fragment: {dist: fixed, size: $f}}
  - {name: ru0, type: ru, bulk_size: 64, credits: 4$cores0}
  - {name: ru1, type: ru, bulk_size: 64, credits: 4$cores1}
  - {name: bu0, type: bu, bulk_size: 64, credits: 4$cores0}
  - {name: bu1, type: bu, bulk_size: 64, credits: 4$cores1}
  - {name: proc, type: process, algorithm: none}
  - {name: out, type: writer, format: "null"}
links:
  - {from: src0, to: ru0}
  - {from: src1, to: ru1}
  - {from: ru0, to: bu0}
  - {from: ru0, to: bu1}
  - {from: ru1, to: bu0}
  - {from: ru1, to: bu1}
  - {from: bu0, to: proc}
  - {from: bu1, to: proc}
  - {from: proc, to: out}
EOF
    if ! "$sddaq" config check "$file" >"$file.check" 2>&1; then
        log "run_overhead.sh: the generated topology does not validate:"
        cat "$file.check" >&2
        return 1
    fi
    echo "$file"
}

declare -A topo
for p in "${prov_list[@]}"; do
    [ "${have_prov[$p]}" = 1 ] || continue
    for f in "${frag_bytes[@]}"; do
        topo[$p/$f]=$(topo_for "$p" "$f") || exit 1
    done
done

# --- measuring ---------------------------------------------------------------------------------
manifest="$tmp/manifest.tsv"
: >"$manifest"
run_no=0
have_time=0
[ -x /usr/bin/time ] && have_time=1

# timed FILE LIMIT CMD...: run CMD in the scratch directory FILE.d (removed afterwards) with
# stdout to FILE, stderr to FILE.err and, with /usr/bin/time, "wall user sys" to FILE.time.
timed() {
    local file=$1 limit=$2 rc
    shift 2
    local pre=()
    [ "$have_time" = 1 ] && pre=(/usr/bin/time -f '%e %U %S' -o "$file.time")
    mkdir -p "$file.d"
    # fd 9 holds the benchmark lock: a child that outlived us must not keep holding it. The
    # timer sits outside timeout, whose process group (evb launch's nodes too) it signals.
    (cd "$file.d" && exec 9>&- && exec "${pre[@]}" timeout -k 5 "$limit" "$@" \
        >"$file" 2>"$file.err")
    rc=$?
    # A default-chain run leaves its HDF5 file here: gigabytes over a long run, read by nobody.
    du -sk "$file.d" 2>/dev/null | awk '{ print $1 }' >"$file.du"
    rm -rf "$file.d"
    return "$rc"
}

# record KIND PROVIDER FRAG EVENTS REP RC OUTFILE CMD...
record() {
    local kind=$1 p=$2 f=$3 n=$4 rep=$5 rc=$6 file=$7 cpu="- - -"
    shift 7
    [ -s "$file.time" ] && cpu=$(tail -n1 "$file.time")
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$kind" "$p" "$f" "$n" "$rep" "$rc" \
        "$(echo "$cpu" | tr ' ' '\t')" "$file" "$*" >>"$manifest"
}

# measure KIND PROVIDER FRAG EVENTS REP: one `sddaq run` (runtime) or `evb launch` (bare).
measure() {
    local kind=$1 p=$2 f=$3 n=$4 rep=$5 file cmd rc
    run_no=$((run_no + 1))
    file="$tmp/run.$run_no"
    if [ "$kind" = runtime ]; then
        cmd=("$sddaq" run "${topo[$p/$f]}" -n "$n" -q --no-http --json)
    else
        cmd=("$sddaq" evb launch -n 2 -p "$p" -e "$n" -s "$f" -b 64 -c 4 --verify header --json)
        [ "$pin" = 1 ] && cmd+=(--pin)
    fi
    timed "$file" "$run_timeout" "${cmd[@]}"
    rc=$?
    record "$kind" "$p" "$f" "$n" "$rep" "$rc" "$file" "${cmd[*]}"
    last_rc=$rc
}

cpu_model=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //')
ncpu=$(nproc 2>/dev/null || echo '?')
placement="nothing pinned"
[ "$pin" = 1 ] && placement="event-builder node k on CPU k in both (topology cores / evb launch --pin)"
echo "machine: $ncpu CPUs, ${cpu_model:-unknown CPU}, $(uname -sr)"
echo "sddaq:   $sddaq"

# The measured part: one holder of the benchmark lock at a time, on a quiet machine.
exec 9>>"$lock"
lock_wait=$([ "$smoke" = 1 ] && echo 60 || echo 1800)
lock_line="held"
if ! flock -w "$lock_wait" 9; then
    lock_line="NOT held (busy for ${lock_wait} s; timings may overlap another benchmark)"
    log "warning: $lock $lock_line"
fi
quiet_tool="$root/../shared/tools/quiet"
quiet_line="n/a (no ../shared/tools/quiet)"
if [ -f "$quiet_tool" ]; then
    log "waiting for a quiet machine ($quiet_tool) ..."
    if [ "$smoke" = 1 ]; then
        quiet_line=$(bash "$quiet_tool" 10 5 2>&1 9>&- | tail -n1)
    else
        quiet_line=$(bash "$quiet_tool" 2>&1 9>&- | tail -n1)
    fi
fi
echo "quiet:   $quiet_line; lock $lock $lock_line"
echo "setup:   $repeat A/B pair(s) per point (ABBA), bulk 64, credits 4, verify header," \
    "2 sources/RUs/BUs; $placement"

start=$(date +%s.%N)
failed=0
for p in "${prov_list[@]}"; do
    if [ "${have_prov[$p]}" != 1 ]; then
        record missing "$p" 0 0 0 missing - "provider $p not available"
        failed=1
        continue
    fi
    for f in "${frag_bytes[@]}"; do
        n=$(events_for "$f")
        for rep in $(seq 1 "$repeat"); do
            if [ $((rep % 2)) = 1 ]; then order="runtime bare"; else order="bare runtime"; fi
            status=""
            for kind in $order; do
                measure "$kind" "$p" "$f" "$n" "$rep"
                status+=" $kind rc=$last_rc"
            done
            log "  $p ${f} B x $n events, rep $rep/$repeat:$status"
        done
    done
done

if [ "$default_seconds" -gt 0 ]; then
    log "default chain, ${default_seconds} s ..."
    run_no=$((run_no + 1))
    file="$tmp/run.$run_no"
    cmd=("$sddaq" run -d "$default_seconds" -q --no-http --json)
    timed "$file" $((default_seconds + run_timeout)) "${cmd[@]}"
    rc=$?
    record default auto 0 0 1 "$rc" "$file" "${cmd[*]}"
    # The HDF5 writer's rate (bytes over the writer's busy time, its close included) next to a
    # plain write() of the same bytes in 4 MiB calls into the same directory, neither synced.
    if [ "$rc" = 0 ]; then
        write_cmp=$("$python" - "$file" "$tmp/plain.bin" <<'PY'
import json, os, sys, time
run = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
w = [s for s in run["stages"] if s["name"] == "writer"][0]
n, busy, cpu = w["bytes_out"], w["busy_s"], w.get("cpu_s")
buf = b"\x5a" * (4 << 20)
fd = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
t, c = time.perf_counter(), time.thread_time()
left = n
while left > 0:
    left -= os.write(fd, buf if left >= len(buf) else buf[:left])
os.close(fd)
dt, dc = time.perf_counter() - t, time.thread_time() - c
os.unlink(sys.argv[2])
print("writer: HDF5 %.0f MB/s (%.0f MB in %.3f s of writer time) vs plain write() %.0f MB/s "
      "(%.3f s): ratio %.2f" % (n / busy / 1e6, n / 1e6, busy, n / dt / 1e6, dt, dt / busy))
# Per CPU second (thread clocks), which the writer's sharing two vCPUs with the chain does not
# stretch: what each costs per byte.
if cpu and dc > 0:
    print("writer CPU: HDF5 %.0f MB per CPU s (%.3f s) vs plain write() %.0f MB per CPU s "
          "(%.3f s): ratio %.2f" % (n / cpu / 1e6, cpu, n / dc / 1e6, dc, dc / cpu))
PY
)
    fi
fi
elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
quiet_after="n/a"
if [ -f "$quiet_tool" ]; then
    quiet_after=$(bash "$quiet_tool" 101 1 2>&1 9>&- | tail -n1)
fi
flock -u 9
exec 9>&-

# --- report ------------------------------------------------------------------------------------
command_line="bench/run_overhead.sh --sddaq $sddaq --providers $providers --frag-sizes $frag_sizes"
command_line+=" --repeat $repeat --default-seconds $default_seconds"
[ -n "$events" ] && command_line+=" --events $events"
[ "$smoke" = 1 ] && command_line+=" --smoke"
"$python" "$root/bench/run_overhead_report.py" --manifest "$manifest" --out "$out" \
    --meta "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)" --meta "nproc=$ncpu" \
    --meta "cpu_model=$cpu_model" --meta "kernel=$(uname -sr)" \
    --meta "quiet_before=$quiet_line" --meta "quiet_after=$quiet_after" \
    --meta "lock=$lock $lock_line" --meta "sddaq=$sddaq" --meta "repeat=$repeat" \
    --meta "smoke=$smoke" --meta "providers=$providers" --meta "frag_sizes=$frag_sizes" \
    --meta "default_seconds=$default_seconds" --meta "run_timeout_s=$run_timeout" \
    --meta "elapsed_s=$elapsed" --meta "auto_provider=${auto_provider:-unknown}" \
    --meta "placement=$placement" \
    --meta "command=$command_line"
report_rc=$?
[ -n "${write_cmp:-}" ] && echo "$write_cmp"
echo "quiet after: $quiet_after; elapsed ${elapsed}s"
if [ "$report_rc" != 0 ] || [ "$failed" != 0 ]; then
    exit 1
fi
exit 0
