#!/usr/bin/env bash
# Four-host event building: four network namespaces joined by veth pairs to a bridge (in a
# fifth namespace), one `sddaq evb run` per host over tcp, every event built once across hosts
# (checked from the per-host event records); then the same with one host's BU killed mid-run,
# and with one BU host cut off mid-run (it must fence itself: docs/evb.md "Leases and fencing").
# Skips (77) where namespaces cannot be created (not root, no CAP_SYS_ADMIN, no veth/bridge).
# Usage: test_evb_netns.sh PATH_TO_SDDAQ
set -uo pipefail
sddaq=${1:?usage: test_evb_netns.sh PATH_TO_SDDAQ}
command -v ip >/dev/null || { echo "skipped: no ip(8)"; exit 77; }
command -v python3 >/dev/null || { echo "skipped: needs python3"; exit 77; }
tag=sddevb$$
br=${tag}br
work=$(mktemp -d)
cleanup() {
    kill $(jobs -p) 2>/dev/null
    wait 2>/dev/null
    for i in 0 1 2 3; do ip netns del "${tag}h$i" 2>/dev/null; done
    ip netns del "$br" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
if ! ip netns add "$br" 2>/dev/null; then
    echo "skipped: cannot create network namespaces"
    exit 77
fi
setup() {
    ip -n "$br" link add br0 type bridge || return 1
    ip -n "$br" link set br0 up || return 1
    for i in 0 1 2 3; do
        local h=${tag}h$i
        ip netns add "$h" || return 1
        ip link add "v$i$tag" netns "$br" type veth peer name eth0 netns "$h" || return 1
        ip -n "$br" link set "v$i$tag" master br0 up || return 1
        ip -n "$h" addr add "10.77.0.$((i + 1))/24" dev eth0 || return 1
        ip -n "$h" link set eth0 up || return 1
        ip -n "$h" link set lo up || return 1
    done
}
if ! setup 2>"$work/setup.err"; then
    echo "skipped: cannot build veth/bridge topology: $(head -1 "$work/setup.err")"
    exit 77
fi
passed=0
failed=0
check() {
    local what=$1
    shift
    if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $what" >&2; fi
}
field() { python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])[sys.argv[2]])' "$1" "$2"; }
nodes=10.77.0.1:7411,10.77.0.2:7411,10.77.0.3:7411,10.77.0.4:7411

# 1. Four hosts, each RU + BU.
for i in 0 1 2 3; do
    ip netns exec "${tag}h$i" "$sddaq" evb run -p tcp --node $i --nodes "$nodes" -e 40000 -b 32 \
        -s 2000 --record "$work/a$i.bin" >"$work/a$i.json" 2>"$work/a$i.err" &
done
wait
for i in 0 1 2 3; do
    check "host $i built events" test "$(field "$work/a$i.json" events_built 2>/dev/null || echo 0)" -gt 0
    check "host $i sent over the wire" test "$(field "$work/a$i.json" bulks_sent 2>/dev/null || echo 0)" -gt 0
done
"$sddaq" evb check -e 40000 "$work"/a?.bin >"$work/a.check"
check "4 hosts: every event once" test $? -eq 0
check "4 hosts: all complete" test "$(field "$work/a.check" complete)" = 40000

# Two RU hosts, two BU hosts, files $work/<run><host>.*; returns once host 3 has built 4096
# events. Usage: start_ru_ru_bu_bu RUN DEAD_MS
start_ru_ru_bu_bu() {
    for i in 0 1 2 3; do
        ip netns exec "${tag}h$i" "$sddaq" evb run -p tcp --node $i --nodes "$nodes" \
            --roles ru,ru,bu,bu -e 60000 -b 20 -r 15000 --hb-ms 50 --dead-ms "$2" \
            --record "$work/$1$i.bin" >"$work/$1$i.json" 2>"$work/$1$i.err" &
        pids[$i]=$!
    done
    for _ in $(seq 1 300); do
        size=$(stat -c %s "$work/${1}3.bin" 2>/dev/null || echo 0)
        [ "$size" -gt 65536 ] && break
        sleep 0.05
    done
}

# 2. The BU on host 3 is killed mid-run.
start_ru_ru_bu_bu b 3000
kill -9 "${pids[3]}"
for i in 0 1 2; do wait "${pids[$i]}"; check "host $i ends cleanly" test $? -eq 0; done
wait "${pids[3]}" 2>/dev/null
"$sddaq" evb check -e 60000 "$work"/b?.bin >"$work/b.check"
check "BU killed: none lost or twice" test $? -eq 0
check "BU killed: all complete" test "$(field "$work/b.check" complete)" = 60000
# Delivered by the killed BU in its last instant and rebuilt (RESENT) by a survivor: at most
# its credits' worth of bulks (4 x 20 events; docs/evb.md "Failures").
check "BU killed: at most 80 rebuilt" test "$(field "$work/b.check" dup_resent)" -le 80

# 3. The same, but host 3 is cut off instead: the RU hosts' frames to it go to a MAC that is
# nobody's (it still sends; nothing reaches it). Its leases lapse; once it loses the RUs it
# must fence (exit 3) rather than build what it holds without them, since the RUs re-send
# those bulks to host 2 when its connections close.
start_ru_ru_bu_bu c 1000
for i in 0 1; do
    ip -n "${tag}h$i" neigh replace 10.77.0.4 lladdr 02:00:00:00:77:99 dev eth0 nud permanent
done
for i in 0 1 2; do wait "${pids[$i]}"; check "cut: host $i ends cleanly" test $? -eq 0; done
wait "${pids[3]}"
check "cut: host 3 fenced itself (exit 3)" test $? -eq 3
check "cut: host 3 reports fenced" test "$(field "$work/c3.json" fenced 2>/dev/null)" = 1
"$sddaq" evb check -e 60000 "$work"/c?.bin >"$work/c.check"
check "cut: none lost or twice" test $? -eq 0
check "cut: all complete" test "$(field "$work/c.check" complete)" = 60000

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
