#!/usr/bin/env bash
# Transport benchmark: `sddaq perf` side by side with the reference tools, in one invocation,
# on this machine. For each provider and each comparison it runs the reference tool and sddaq
# alternately (ABBA order across repetitions) and reports medians with min-max and the ratio
# sddaq/reference, as DESIGN.md ("Measuring") asks:
#   send    sddaq -t lat -o send --wait spin     vs fi_pingpong (same provider, sizes, iters):
#           one-way latency (target ratio <= 1.10) and ping-pong bandwidth (target >= 0.95)
#   rma     sddaq -t lat -o write / -o read, -t bw -o write / -o read
#           vs ucx_perftest ucp_put_lat, ucp_get -O 1, ucp_put_bw, ucp_get -O WINDOW
#   stream  sddaq -t bw -o send                  vs ucx_perftest tag_bw
#   memcpy  bench_memcpy: one core's copy bandwidth, the ceiling for a copying transport
# Provider shm is compared with UCX_TLS=sm,self (posix,cma,self as fallback), tcp with
# UCX_TLS=tcp,self. Servers run on CPU 0 and clients on CPU 1 (taskset) for every tool.
#
# Usage: bench/transport.sh [--sddaq PATH] [--providers shm,tcp] [--reps R] [--quick]
#                           [--window W] [--timeout S] [--out FILE.json] [--keep-logs]
# A missing or failing tool shows as n/a; the script still exits 0. Exit 2: bad usage;
# exit 1: no python3 to write the report.
set -u -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
sddaq="$root/build/sddaq"
providers="shm,tcp"
reps=3
quick=0
window=64
run_timeout=""
out=""
keep_logs=0

usage() {
    sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

while [ $# -gt 0 ]; do
    case "$1" in
    --sddaq) sddaq=${2:?--sddaq needs a path}; shift 2 ;;
    --providers) providers=${2:?--providers needs a list}; shift 2 ;;
    --reps) reps=${2:?--reps needs a number}; shift 2 ;;
    --quick) quick=1; shift ;;
    --window) window=${2:?--window needs a number}; shift 2 ;;
    --timeout) run_timeout=${2:?--timeout needs seconds}; shift 2 ;;
    --out) out=${2:?--out needs a file}; shift 2 ;;
    --keep-logs) keep_logs=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "transport.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
case "$reps" in '' | *[!0-9]* | 0) echo "transport.sh: --reps wants a positive integer" >&2; exit 2 ;; esac
case "$window" in '' | *[!0-9]* | 0) echo "transport.sh: --window wants a positive integer" >&2; exit 2 ;; esac
if [ "$quick" = 1 ] && [ "$reps" = 3 ]; then
    reps=1
fi
if [ -z "$run_timeout" ]; then
    run_timeout=$([ "$quick" = 1 ] && echo 10 || echo 30)
fi
case "$sddaq" in /*) ;; *) sddaq="$PWD/$sddaq" ;; esac
if [ -z "$out" ]; then
    mkdir -p "$root/bench/results"
    # Results are per machine and per run: keep them out of git without touching .gitignore.
    [ -e "$root/bench/results/.gitignore" ] || printf '*\n' >"$root/bench/results/.gitignore"
    out="$root/bench/results/transport-$(date +%Y%m%d-%H%M%S).json"
fi

log() { printf '%s\n' "$*" >&2; }

# --- dependencies ------------------------------------------------------------------------------
# Install a missing Debian package when we are root and apt-get exists; otherwise just say so.
ensure_pkg() { # command package
    command -v "$1" >/dev/null 2>&1 && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        log "installing $2 (for $1) ..."
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null 2>&1 ||
            { DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null 2>&1 &&
                DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >/dev/null 2>&1; }
    fi
    command -v "$1" >/dev/null 2>&1 && return 0
    log "warning: $1 not found (Debian package $2); its columns will read n/a"
    return 1
}
ensure_pkg python3 python3 || { log "transport.sh: python3 is needed for the report"; exit 1; }
have_fi=0; ensure_pkg fi_pingpong libfabric-bin && have_fi=1
have_ucx=0; ensure_pkg ucx_perftest ucx-utils && have_ucx=1
have_ss=0; command -v ss >/dev/null 2>&1 && have_ss=1
have_sddaq=0
if [ -x "$sddaq" ] && "$sddaq" perf --help >/dev/null 2>&1; then
    have_sddaq=1
else
    log "warning: no working '$sddaq perf'; sddaq columns will read n/a"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sddaq-transport.XXXXXX")
bg_pids=()
cleanup() {
    local p
    for p in "${bg_pids[@]}"; do
        kill "$p" 2>/dev/null
    done
    for p in "${bg_pids[@]}"; do
        wait "$p" 2>/dev/null
    done
    if [ "$keep_logs" = 1 ]; then
        log "logs kept in $tmp"
    else
        rm -rf "$tmp"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# memcpy probe: the CMake-built one beside sddaq if present, else compile it here (it needs only
# the inline clock header).
memcpy_bin=""
for cand in "$(dirname "$sddaq")/bench/bench_memcpy" "$root/build/bench/bench_memcpy"; do
    if [ -x "$cand" ]; then memcpy_bin=$cand; break; fi
done
if [ -z "$memcpy_bin" ]; then
    cc_bin=$(command -v cc || command -v gcc || true)
    if [ -n "$cc_bin" ] && "$cc_bin" -std=c11 -O2 -D_GNU_SOURCE -I"$root/include" \
        "$root/bench/bench_memcpy.c" -o "$tmp/bench_memcpy" 2>"$tmp/bench_memcpy.cc.log"; then
        memcpy_bin="$tmp/bench_memcpy"
    else
        log "warning: cannot build bench_memcpy; memcpy column will read n/a"
    fi
fi

# --- machine -------------------------------------------------------------------------------------
cpu_model=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //')
ncpu=$(nproc 2>/dev/null || echo '?')
quiet_line="n/a (no ../shared/tools/quiet)"
quiet_tool="$root/../shared/tools/quiet"
if [ -f "$quiet_tool" ]; then
    log "waiting for a quiet machine ($quiet_tool) ..."
    if [ "$quick" = 1 ]; then
        quiet_line=$(bash "$quiet_tool" 10 5 2>&1 | tail -n1)
    else
        quiet_line=$(bash "$quiet_tool" 2>&1 | tail -n1)
    fi
fi
fi_version=$( (fi_info --version 2>/dev/null | sed -n 's/^libfabric: //p') || true)
ucx_version=$( (ucx_info -v 2>/dev/null | sed -n 's/^# Version //p') || true)
echo "machine: $ncpu CPUs, ${cpu_model:-unknown CPU}, $(uname -sr)"
echo "quiet:   $quiet_line"
echo "tools:   libfabric ${fi_version:-n/a}, UCX ${ucx_version:-n/a}, sddaq $([ $have_sddaq = 1 ] && echo "$sddaq" || echo n/a)"
echo "setup:   $reps rep(s) per point, reference and sddaq alternating (ABBA), window $window," \
    "per-run timeout ${run_timeout}s; server pinned to CPU 0, client to CPU 1"

# --- helpers -------------------------------------------------------------------------------------
now() { date +%s.%N; }

# A TCP port nobody listens on, below the ephemeral range so outgoing connections cannot take it.
free_port() {
    local p i
    for i in $(seq 1 100); do
        p=$(((RANDOM * 32768 + RANDOM) % 12000 + 20000))
        if [ $have_ss = 1 ]; then
            [ -z "$(ss -Htan "sport = :$p" 2>/dev/null)" ] && { echo "$p"; return 0; }
        else
            python3 -c "import socket,sys; s=socket.socket(); s.bind(('127.0.0.1',$p))" \
                2>/dev/null && { echo "$p"; return 0; }
        fi
    done
    return 1
}

# Wait until something listens on TCP port $1, while process $2 lives (10 s at most).
wait_listen() {
    local port=$1 pid=$2 i
    for i in $(seq 1 500); do
        kill -0 "$pid" 2>/dev/null || return 1
        if [ $have_ss = 1 ]; then
            [ -n "$(ss -Hltn "sport = :$port" 2>/dev/null)" ] && return 0
        elif [ "$i" -ge 25 ]; then
            return 0 # no ss: give the server half a second
        fi
        sleep 0.02
    done
    return 1
}

# Wait until the sddaq server wrote its port to file $1, while process $2 lives.
wait_port_file() {
    local file=$1 pid=$2 i p
    for i in $(seq 1 500); do
        if [ -s "$file" ] && read -r p <"$file" && [ -n "$p" ] && [ -z "${p//[0-9]/}" ]; then
            echo "$p"
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.02
    done
    return 1
}

# Wait for a background server to exit (a few seconds), then make sure it is gone.
reap() {
    local pid=$1 i
    for i in $(seq 1 250); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.02
    done
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    local keep=() p
    for p in "${bg_pids[@]}"; do [ "$p" != "$pid" ] && keep+=("$p"); done
    bg_pids=("${keep[@]}")
}

manifest="$tmp/manifest.tsv"
: >"$manifest"
run_no=0
last_status=""

# record case provider tool size iters rep rc wall outfile cmd...
record() {
    local c=$1 prov=$2 tool=$3 size=$4 iters=$5 rep=$6 rc=$7 wall=$8 file=$9
    shift 9
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$c" "$prov" "$tool" "$size" "$iters" \
        "$rep" "$rc" "$wall" "$file" "$*" >>"$manifest"
    case "$rc" in
    0) last_status=ok ;;
    124 | 137) last_status=timeout ;;
    missing) last_status=n/a ;;
    skipped) last_status="skipped (hung before)" ;;
    *) last_status="rc=$rc" ;;
    esac
}

# Server and client on different cores, the same for every tool, so that placement by the
# scheduler is not one more difference between runs.
pin_server=()
pin_client=()
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
    pin_server=(taskset -c 0)
    pin_client=(taskset -c 1)
fi

# Run a client/server pair: server command in the array srv_cmd, client in cli_cmd; the client
# gets the port through the placeholder @PORT@. Sets run_rc and run_wall.
# $1: how the server announces itself: "listen" (poll the TCP port) or "file:PATH".
run_pair() {
    local how=$1 out=$2 port srv_pid t0 t1 a s_cmd=() c_cmd=()
    run_rc=1
    run_wall=0
    for _ in 1 2 3; do
        if [ "$how" = listen ]; then
            port=$(free_port) || { run_rc=1; echo "no free port" >"$out.err"; return; }
        else
            rm -f "${how#file:}"
            port=0
        fi
        s_cmd=()
        for a in "${srv_cmd[@]}"; do s_cmd+=("${a//@PORT@/$port}"); done
        timeout -k 5 "$run_timeout" "${pin_server[@]}" "${s_cmd[@]}" >"$out.srv" 2>&1 &
        srv_pid=$!
        bg_pids+=("$srv_pid")
        if [ "$how" = listen ]; then
            wait_listen "$port" "$srv_pid" || { reap "$srv_pid"; run_rc=1; continue; }
        else
            port=$(wait_port_file "${how#file:}" "$srv_pid") ||
                { reap "$srv_pid"; run_rc=1; continue; }
        fi
        c_cmd=()
        for a in "${cli_cmd[@]}"; do c_cmd+=("${a//@PORT@/$port}"); done
        t0=$(now)
        timeout -k 5 "$run_timeout" "${pin_client[@]}" "${c_cmd[@]}" >"$out" 2>"$out.err"
        run_rc=$?
        t1=$(now)
        run_wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
        reap "$srv_pid"
        run_cmd="${c_cmd[*]}"
        return
    done
    run_cmd="${cli_cmd[*]}"
    echo "server did not start: $(tail -n 3 "$out.srv" 2>/dev/null | tr '\n' ' ')" >>"$out.err"
}

# Sizes and iteration counts, the same for both tools of a comparison. Latency runs are
# ping-pongs of roughly 0.1-0.5 s, long enough that one scheduler stall on this shared machine
# moves the mean little; the slow case (UCX over tcp emulates get with active messages and takes
# ~1 ms per get) gets few iterations.
iters_for() { # case provider size
    local c=$1 prov=$2 size=$3 n
    case "$c" in
    send | rma-write-lat | rma-read-lat)
        if [ "$size" -le 4096 ]; then n=10000; elif [ "$size" -le 65536 ]; then n=2000; else n=200; fi
        if [ "$prov" = shm ]; then n=$((n * 10)); n=$((n > 100000 ? 100000 : n)); fi
        if [ "$c" = rma-read-lat ] && [ "$prov" = tcp ]; then n=200; fi
        ;;
    *)
        if [ "$size" -le 4096 ]; then n=50000; elif [ "$size" -le 65536 ]; then n=5000; else n=500; fi
        # tcp is slower: fewer small operations, but large ones need enough to reach steady
        # state (100 x 1 MiB measured the rendezvous ramp-up, not the stream).
        if [ "$prov" = tcp ] && [ "$size" -le 65536 ]; then n=$((n / 5)); fi
        if [ "$c" = rma-read-bw ] && [ "$prov" = tcp ]; then n=$((n / 5)); fi
        ;;
    esac
    if [ "$quick" = 1 ]; then n=$((n / 10)); fi
    [ "$n" -lt 20 ] && n=20
    echo "$n"
}
if [ "$quick" = 1 ]; then
    send_sizes="8 65536"
    lat_sizes="8 65536"
    bw_sizes="65536"
else
    send_sizes="8 64 1024 4096 65536 1048576"
    lat_sizes="8 4096 65536 1048576"
    bw_sizes="8 4096 65536 1048576"
fi

# UCX transports for a provider; probed once (sm first, then posix,cma).
declare -A ucx_tls
probe_ucx() { # provider
    local prov=$1 tls cands
    ucx_tls[$prov]=""
    [ $have_ucx = 1 ] || return
    if [ "$prov" = shm ]; then cands="sm,self posix,cma,self"; else cands="tcp,self"; fi
    for tls in $cands; do
        srv_cmd=(env UCX_TLS="$tls" UCX_WARN_UNUSED_ENV_VARS=n ucx_perftest -p @PORT@)
        cli_cmd=(env UCX_TLS="$tls" UCX_WARN_UNUSED_ENV_VARS=n ucx_perftest 127.0.0.1 -p @PORT@
            -t tag_lat -s 8 -n 100 -w 10 -f)
        run_pair listen "$tmp/probe.$prov"
        if [ "$run_rc" = 0 ]; then
            ucx_tls[$prov]=$tls
            return
        fi
    done
    log "warning: ucx_perftest fails with every UCX_TLS tried for $prov; UCX columns read n/a"
}

declare -A hung

# One measurement of one tool. Arguments: case provider tool size rep.
measure() {
    local c=$1 prov=$2 tool=$3 size=$4 rep=$5 iters out test op ucx_test ucx_extra=()
    iters=$(iters_for "$c" "$prov" "$size")
    run_no=$((run_no + 1))
    out="$tmp/run.$run_no"
    # A hang costs a whole timeout: a point that hung once is not retried, and a comparison in
    # which a tool hung three times is not run further for that tool.
    if [ -n "${hung[$c/$prov/$tool/$size]:-}" ] || [ "${hung[$c/$prov/$tool]:-0}" -ge 3 ]; then
        record "$c" "$prov" "$tool" "$size" "$iters" "$rep" skipped 0 - "$tool $c"
        return
    fi
    case "$tool" in
    fi_pingpong)
        if [ $have_fi = 0 ]; then record "$c" "$prov" "$tool" "$size" "$iters" "$rep" missing 0 - fi_pingpong; return; fi
        srv_cmd=(fi_pingpong -p "$prov" -e rdm -B @PORT@ -S "$size" -I "$iters")
        cli_cmd=(fi_pingpong -p "$prov" -e rdm -P @PORT@ -S "$size" -I "$iters" 127.0.0.1)
        run_pair listen "$out"
        ;;
    ucx)
        case "$c" in
        rma-write-lat) ucx_test=ucp_put_lat ;;
        rma-read-lat) ucx_test=ucp_get; ucx_extra=(-O 1) ;;
        rma-write-bw) ucx_test=ucp_put_bw; ucx_extra=(-O "$window") ;;
        rma-read-bw) ucx_test=ucp_get; ucx_extra=(-O "$window") ;;
        stream-bw) ucx_test=tag_bw; ucx_extra=(-O "$window") ;;
        esac
        if [ -z "${ucx_tls[$prov]}" ]; then record "$c" "$prov" "$tool" "$size" "$iters" "$rep" missing 0 - "ucx_perftest $ucx_test"; return; fi
        srv_cmd=(env UCX_TLS="${ucx_tls[$prov]}" UCX_WARN_UNUSED_ENV_VARS=n ucx_perftest -p @PORT@)
        cli_cmd=(env UCX_TLS="${ucx_tls[$prov]}" UCX_WARN_UNUSED_ENV_VARS=n ucx_perftest 127.0.0.1
            -p @PORT@ -t "$ucx_test" -s "$size" -n "$iters" -w $((iters / 10 > 10 ? iters / 10 : 10))
            "${ucx_extra[@]}" -f)
        run_pair listen "$out"
        ;;
    sddaq)
        case "$c" in
        send) test=lat; op=send ;;
        rma-write-lat) test=lat; op="write" ;;
        rma-read-lat) test=lat; op="read" ;;
        rma-write-bw) test=bw; op="write" ;;
        rma-read-bw) test=bw; op="read" ;;
        stream-bw) test=bw; op=send ;;
        esac
        if [ $have_sddaq = 0 ]; then record "$c" "$prov" "$tool" "$size" "$iters" "$rep" missing 0 - "sddaq perf -t $test -o $op"; return; fi
        srv_cmd=("$sddaq" perf server -p "$prov" --host 127.0.0.1 --port 0 --port-file "$out.port"
            --wait spin --once)
        cli_cmd=("$sddaq" perf client 127.0.0.1:@PORT@ -p "$prov" -t "$test" -o "$op" -s "$size"
            -n "$iters" --wait spin --json)
        [ "$test" = bw ] && cli_cmd+=(-w "$window")
        run_pair "file:$out.port" "$out"
        ;;
    esac
    record "$c" "$prov" "$tool" "$size" "$iters" "$rep" "$run_rc" "$run_wall" "$out" "$run_cmd"
    # A failure after half the timeout is a hang too (the server's own timeout ended it).
    if [ "$run_rc" != 0 ] && awk -v w="$run_wall" -v t="$run_timeout" 'BEGIN { exit !(2 * w >= t) }'; then
        hung[$c/$prov/$tool/$size]=1
        hung[$c/$prov/$tool]=$((${hung[$c/$prov/$tool]:-0} + 1))
    fi
}

# Alternate reference and sddaq; odd repetitions start with the reference, even ones with sddaq.
compare() { # case provider reference-tool sizes
    local c=$1 prov=$2 ref=$3 sizes=$4 rep size first second s1 s2
    for rep in $(seq 1 "$reps"); do
        for size in $sizes; do
            if [ $((rep % 2)) = 1 ]; then first=$ref; second=sddaq; else first=sddaq; second=$ref; fi
            measure "$c" "$prov" "$first" "$size" "$rep"; s1=$last_status
            measure "$c" "$prov" "$second" "$size" "$rep"; s2=$last_status
            log "  $prov $c $size B rep $rep/$reps: $first $s1, $second $s2"
        done
    done
}

# --- run -----------------------------------------------------------------------------------------
start=$(now)
if [ -n "$memcpy_bin" ]; then
    log "memcpy probe ..."
    msizes=$(echo "$send_sizes $lat_sizes $bw_sizes" | tr ' ' '\n' | sort -nu | tr '\n' ',' | sed 's/,$//')
    for rep in $(seq 1 "$reps"); do
        run_no=$((run_no + 1))
        t0=$(now)
        timeout "$run_timeout" "$memcpy_bin" --json --sizes "$msizes" \
            --time-ms "$([ "$quick" = 1 ] && echo 5 || echo 20)" >"$tmp/run.$run_no" 2>"$tmp/run.$run_no.err"
        rc=$?
        wall=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }')
        record memcpy local memcpy 0 0 "$rep" "$rc" "$wall" "$tmp/run.$run_no" "$memcpy_bin --json --sizes $msizes"
    done
else
    record memcpy local memcpy 0 0 1 missing 0 - bench_memcpy
fi

IFS=',' read -r -a prov_list <<<"$providers"
for prov in "${prov_list[@]}"; do
    case "$prov" in shm | tcp) ;; *) log "warning: provider '$prov' has no reference mapping; trying anyway" ;; esac
    probe_ucx "$prov"
    log "[$prov] send/recv vs fi_pingpong; UCX_TLS=${ucx_tls[$prov]:-none}"
    compare send "$prov" fi_pingpong "$send_sizes"
    log "[$prov] RMA vs ucx_perftest"
    for c in rma-write-lat rma-read-lat; do
        compare "$c" "$prov" ucx "$lat_sizes"
    done
    for c in rma-write-bw rma-read-bw; do
        compare "$c" "$prov" ucx "$bw_sizes"
    done
    log "[$prov] streaming send vs ucx_perftest tag_bw"
    compare stream-bw "$prov" ucx "$bw_sizes"
done
elapsed=$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')

quiet_after="n/a"
if [ -f "$quiet_tool" ]; then
    quiet_after=$(bash "$quiet_tool" 101 1 2>&1 | tail -n1)
fi

# --- report --------------------------------------------------------------------------------------
ucx_map=""
for prov in "${prov_list[@]}"; do ucx_map+="$prov=${ucx_tls[$prov]:-};"; done
python3 "$root/bench/transport_report.py" --manifest "$manifest" --out "$out" \
    --meta "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)" --meta "nproc=$ncpu" --meta "cpu_model=$cpu_model" \
    --meta "kernel=$(uname -sr)" --meta "quiet_before=$quiet_line" --meta "quiet_after=$quiet_after" \
    --meta "libfabric=${fi_version:-}" --meta "ucx=${ucx_version:-}" --meta "sddaq=$sddaq" \
    --meta "sddaq_available=$have_sddaq" --meta "reps=$reps" --meta "quick=$quick" \
    --meta "window=$window" --meta "providers=$providers" --meta "ucx_tls=$ucx_map" \
    --meta "run_timeout_s=$run_timeout" --meta "elapsed_s=$elapsed" \
    --meta "placement=not pinned (OS places server and client)" \
    --meta "command=bench/transport.sh --sddaq $sddaq --providers $providers --reps $reps$([ "$quick" = 1 ] && echo ' --quick') --window $window"
report_rc=$?
echo "quiet after: $quiet_after; elapsed ${elapsed}s"
exit $report_rc
