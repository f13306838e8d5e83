#!/usr/bin/env bash
# Three hosts, one `sddaq node` each: three network namespaces joined by veth pairs to a
# bridge (in a fourth namespace) run one topology; each host is a readout unit, a builder
# unit, a prescale trigger and a raw writer. Checked: a fixed-length run accounts for every
# event across hosts (the coordinator's totals, and the records in the three files); a timed
# run ended by the coordinator and a run ended by Ctrl-C on another host both drain on a whole
# bulk with every event accounted for; pause, resume and stop through the coordinator; a host
# killed mid-run; a host stalled past the builder's dead time (it fences, the run ends in error
# naming it, nothing written twice); a host cut off for less than the dead time (it does not
# take over as coordinator; the run ends cleanly); the coordinator stalled past the dead time
# (it fences and ends the run for all); a fenced host whose coordinator and peers die while it
# waits for its summary to be fetched (it leaves in seconds); the coordinator killed while the
# other two wait for it after a run (both leave in seconds); the coordinator killed mid-run
# (the next node takes over); a trigger farm on the third host fed over fabric links by the
# builder units of the others; a builder unit stalled in the middle of a delivery (its writer
# drops what it never committed: nothing written twice); and with two hosts, one cut off for
# 4 s (the other waits out the dead time before it would take over: the run ends cleanly) and
# the coordinator killed (the other takes over at once); the coordinator of three cut off for
# 4 s (the others wait out the dead time before they would take over: the run ends cleanly),
# and for 14 s (past the dead time: h1 takes over once the builders gave h0 up, h0 fences).
# Skips (77) where namespaces cannot be created (not root, no CAP_SYS_ADMIN, no veth/bridge).
# Usage: test_run_netns.sh PATH_TO_SDDAQ
set -uo pipefail
sddaq=${1:?usage: test_run_netns.sh PATH_TO_SDDAQ}
command -v ip >/dev/null || { echo "skipped: no ip(8)"; exit 77; }
py=$(command -v python3) || { echo "skipped: needs python3"; exit 77; }
tag=sddrun$$
br=${tag}br
work=$(mktemp -d)
cleanup() {
    kill -9 $(jobs -p) 2>/dev/null
    wait 2>/dev/null
    for i in 0 1 2; do ip netns del "${tag}h$i" 2>/dev/null; done
    ip netns del "$br" 2>/dev/null
    [ -n "${KEEP_WORK:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
if ! ip netns add "$br" 2>/dev/null; then
    echo "skipped: cannot create network namespaces"
    exit 77
fi
setup() {
    ip -n "$br" link add br0 type bridge || return 1
    ip -n "$br" link set br0 up || return 1
    for i in 0 1 2; do
        local h=${tag}h$i
        ip netns add "$h" || return 1
        ip link add "v$i$tag" netns "$br" type veth peer name eth0 netns "$h" || return 1
        ip -n "$br" link set "v$i$tag" master br0 up || return 1
        ip -n "$h" addr add "10.78.0.$((i + 1))/24" dev eth0 || return 1
        ip -n "$h" link set eth0 up || return 1
        ip -n "$h" link set lo up || return 1
    done
}
if ! setup 2>"$work/setup.err"; then
    echo "skipped: cannot build veth/bridge topology: $(head -1 "$work/setup.err")"
    exit 77
fi
field() { "$py" -c 'import json,sys; print(json.loads(open(sys.argv[1]).read())[sys.argv[2]])' "$1" "$2"; }
export SDDAQ_LOG=error

# topology KIND RUN-KEYS: $nh hosts (three unless said), each src -> ru, bu -> keep (prescale
# 5) -> raw writer.
nh=3
topology() {
    local kind=$1 run=$2
    local all
    all=$(seq 0 $((nh - 1)))
    echo "run: {name: three, output_dir: $work/out, $run}"
    echo "fabric: {provider: tcp, port: 7100}"
    echo "nodes:"
    for i in $all; do echo "  - {name: h$i, host: 10.78.0.$((i + 1)), control_port: 7020}"; done
    echo "stages:"
    for i in $all; do
        if [ "$kind" = hough-emu ]; then
            echo "  - {name: src$i, type: source, node: h$i, kind: hough-emu, pileup: 60}"
        else
            echo "  - {name: src$i, type: source, node: h$i, fragment: {size: 1K}}"
        fi
        echo "  - {name: ru$i, type: ru, node: h$i, bulk_size: 32}"
        echo "  - {name: bu$i, type: bu, node: h$i, bulk_size: 32}"
        echo "  - {name: keep$i, type: process, node: h$i, algorithm: prescale, factor: 5}"
        echo "  - {name: w$i, type: writer, node: h$i, format: raw}"
    done
    echo "links:"
    for i in $all; do
        echo "  - {from: src$i, to: ru$i}"
        for j in $all; do echo "  - {from: ru$i, to: bu$j}"; done
        echo "  - {from: bu$i, to: keep$i}"
        echo "  - {from: keep$i, to: w$i}"
    done
}

# start NAME EXTRA...: one node per namespace; the coordinator (h0) last, in the foreground.
run_all() {
    local name=$1
    shift
    for i in $(seq $((nh - 1)) -1 1); do
        ip netns exec "${tag}h$i" "$sddaq" node --config "$work/$name.yaml" --name "h$i" -q --json \
            "$@" >"$work/$name.h$i.json" 2>"$work/$name.h$i.err" &
        eval "pid_$name$i=\$!"
    done
    ip netns exec "${tag}h0" "$sddaq" node --config "$work/$name.yaml" --name h0 -q --json "$@" \
        >"$work/$name.h0.json" 2>"$work/$name.h0.err"
}

# running_on I: wait (up to 30 s) until host i's control port says the run is running, so
# that a fault injected next hits a running node, not one still connecting.
running_on() {
    for _ in $(seq 300); do
        ip netns exec "${tag}h0" "$sddaq" ctl -H "10.78.0.$(($1 + 1)):7020" state 2>/dev/null |
            grep -q '"state":"running"' && return 0
        sleep 0.1
    done
    return 1
}

# paced NAME DURATION [HEARTBEAT_MS]: the evb-emu topology with its sources at 20 000 events/s
# (and the builder's heartbeat), written to NAME.yaml; a fault then lands between bulks.
paced() {
    local hb=${3:+, heartbeat_ms: $3}
    topology evb-emu "duration: $2" |
        sed "s/fragment: {size: 1K}/rate: 20000, fragment: {size: 1K}/; s/bulk_size: 32}/bulk_size: 32$hb}/" \
            >"$work/$1.yaml"
}

# stall_h2 NAME: once run NAME runs on h2, stop h2 for 4 s (past a 2 s dead time), continue
# it, and wait (up to 10 s) until its metrics show its builder unit fenced: that line goes to
# NAME.fenced.
stall_h2() {
    running_on 2 && sleep 1
    local victim
    victim=$(pgrep -f "$1.yaml --name h2" | head -1)
    kill -STOP "$victim" && sleep 4 && kill -CONT "$victim"
    for _ in $(seq 100); do
        ip netns exec "${tag}h0" "$sddaq" ctl -H 10.78.0.3:7020 metrics 2>/dev/null |
            grep -E '^sddaq_bu_fenced\{stage="bu2"[^}]*\} 1$' >"$work/$1.fenced" && return 0
        sleep 0.1
    done
    return 1
}

# cut_run NAME HOST LOGHOST SAYS WHAT: a paced 10 s run with heartbeats every 500 ms (dead
# time 10 s) in which host HOST's link to the bridge goes down for 4 s once it runs. Every node
# must end cleanly, the coordinator account for all $nh nodes with nothing written twice, and
# host LOGHOST's log say SAYS.
cut_run() {
    local name=$1 host=$2 loghost=$3 says=$4 what=$5 i rc rcs ok
    paced "$name" 10 500
    (running_on "$host" && sleep 1 && ip -n "$br" link set "v$host$tag" down && sleep 4 &&
        ip -n "$br" link set "v$host$tag" up) &
    local cutter=$!
    export SDDAQ_LOG=warn
    run_all "$name"
    rc=$?
    export SDDAQ_LOG=error
    rcs=$rc ok=$((rc == 0))
    for i in $(seq 1 $((nh - 1))); do
        eval "wait \"\$pid_$name$i\""
        rc=$?
        rcs="$rcs/$rc" ok=$((ok && rc == 0))
    done
    wait "$cutter"
    [ "$ok" = 1 ] || fail "$what: exits $rcs: $(cat "$work/$name".h?.json "$work/$name.h$loghost.err")"
    grep -q "$says" "$work/$name.h$loghost.err" ||
        fail "$what: h$loghost never noticed the cut: $(cat "$work/$name.h$loghost.err")"
    [ "$(field "$work/$name.h0.json" nodes)" = "$nh" ] &&
        [ "$(field "$work/$name.h0.json" accounted)" = True ] ||
        fail "$what: $(cat "$work/$name.h0.json")"
    written_once "$name" "$what"
}

ids() { "$sddaq" inspect "$1" -d 100000000 | awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= 5 { print $2 }'; }

# written_once NAME WHAT: the raw files of run NAME hold exactly the events its coordinator
# says were written, none twice.
written_once() {
    local f n dups written
    for f in "$work"/out/three_run*_w?.raw; do
        [ "$f" -nt "$work/$1.yaml" ] || continue
        ids "$f"
    done >"$work/$1.ids"
    n=$(wc -l <"$work/$1.ids")
    written=$(field "$work/$1.h0.json" written)
    dups=$(sort -n "$work/$1.ids" | uniq -d | wc -l)
    [ "$n" = "$written" ] || fail "$2: the files hold $n records, written $written"
    [ "$dups" = 0 ] || fail "$2: $dups events written twice"
}

# 1. A fixed-length run: 60000 events, prescale keeps exactly 12000 across the hosts.
topology evb-emu "events: 60000" >"$work/fixed.yaml"
"$sddaq" config check "$work/fixed.yaml" >/dev/null || fail "fixed: config check"
run_all fixed || fail "fixed: coordinator exit $?: $(cat "$work"/fixed.h*.err)"
wait || true
j=$work/fixed.h0.json
[ "$(field "$j" nodes)" = 3 ] || fail "fixed: coordinator summed $(field "$j" nodes) nodes"
[ "$(field "$j" accounted)" = True ] || fail "fixed: not accounted: $(cat "$j")"
[ "$(field "$j" generated)" = 60000 ] && [ "$(field "$j" built)" = 60000 ] ||
    fail "fixed: generated/built: $(cat "$j")"
[ "$(field "$j" kept)" = 12000 ] && [ "$(field "$j" written)" = 12000 ] ||
    fail "fixed: kept/written: $(cat "$j")"
records=0
for f in "$work"/out/three_run*_w?.raw; do
    n=$("$sddaq" inspect "$f" --json | "$py" -c 'import json,sys; print(json.load(sys.stdin)["records"])')
    records=$((records + n))
done
[ "$records" = 12000 ] || fail "fixed: the three raw files hold $records records"
for i in 1 2; do
    [ "$(field "$work/fixed.h$i.json" node_ok)" = True ] || fail "fixed: host $i: $(cat "$work/fixed.h$i.json")"
done

# 2. A timed run with the Hough tracker emulator: the coordinator ends it after 2 s.
topology hough-emu "duration: 2" >"$work/timed.yaml"
run_all timed || fail "timed: coordinator exit $?: $(cat "$work"/timed.h*.err)"
wait || true
j=$work/timed.h0.json
built=$(field "$j" built)
[ "$(field "$j" accounted)" = True ] || fail "timed: not accounted: $(cat "$j")"
[ "$built" -gt 0 ] && [ $((built % 32)) = 0 ] || fail "timed: $built events is not whole bulks"

# 3. Ctrl-C on host 2 ends the run on all three.
topology evb-emu "duration: 120" >"$work/int.yaml"
(sleep 3 && kill -INT "$(pgrep -f "name h2" | head -1)") &
t0=$(date +%s)
run_all int || fail "interrupted: coordinator exit $?: $(cat "$work"/int.h*.err)"
wait || true
[ $(($(date +%s) - t0)) -lt 60 ] || fail "interrupted: took $(($(date +%s) - t0)) s"
[ "$(field "$work/int.h0.json" accounted)" = True ] || fail "interrupted: $(cat "$work/int.h0.json")"
# 4. Run control across hosts: pause on the coordinator pauses every host at one agreed bulk
# (nothing half built), resume goes on, stop ends the run everywhere.
topology evb-emu "duration: 120" >"$work/ctl.yaml"
ctl() { ip netns exec "${tag}h0" "$sddaq" ctl -H "$1:7020" "${@:2}"; }
(
    sleep 2
    ctl 10.78.0.1 pause >"$work/ctl.pause" 2>&1
    sleep 0.5
    ctl 10.78.0.2 state >"$work/ctl.state1"
    ctl 10.78.0.2 resume >"$work/ctl.wrong" 2>&1 && echo accepted >>"$work/ctl.wrong"
    ctl 10.78.0.1 resume >"$work/ctl.resume" 2>&1
    sleep 1
    ctl 10.78.0.1 stop >"$work/ctl.stop" 2>&1
) &
run_all ctl || fail "run control: coordinator exit $?: $(cat "$work"/ctl.h*.err)"
wait || true
grep -q '"state":"paused"' "$work/ctl.pause" || fail "run control: pause: $(cat "$work/ctl.pause")"
grep -q '"state":"paused"' "$work/ctl.state1" || fail "run control: h1 not paused: $(cat "$work/ctl.state1")"
grep -q accepted "$work/ctl.wrong" && fail "run control: a node other than the coordinator resumed"
grep -q '"state":"running"' "$work/ctl.resume" || fail "run control: resume: $(cat "$work/ctl.resume")"
[ "$(field "$work/ctl.h0.json" accounted)" = True ] || fail "run control: $(cat "$work/ctl.h0.json")"
[ "$(field "$work/ctl.h0.json" incomplete)" = 0 ] || fail "run control: events cut by the pause: $(cat "$work/ctl.h0.json")"

# 5. A host killed mid-run: the others go on (the event builder fails its work over and flags
# its events), the coordinator ends the run, then reports the error naming the lost host.
topology evb-emu "duration: 4" >"$work/kill.yaml"
(sleep 2 && kill -9 "$(pgrep -f "kill.yaml --name h2" | head -1)") &
run_all kill
rc=$?
wait "$pid_kill1"
rc1=$?
wait || true
[ "$rc" = 1 ] || fail "killed host: coordinator exit $rc: $(cat "$work/kill.h0.json")"
field "$work/kill.h0.json" reason | grep -q "node h2 lost" ||
    fail "killed host: reason: $(cat "$work/kill.h0.json")"
[ "$(field "$work/kill.h0.json" incomplete)" -gt 0 ] ||
    fail "killed host: no event flagged incomplete: $(cat "$work/kill.h0.json")"
[ "$rc1" = 0 ] || fail "killed host: h1 exit $rc1: $(cat "$work/kill.h1.json" "$work/kill.h1.err")"
# 6. The coordinator killed mid-run of a long timed run: h1, the first node still answering,
# takes its place, ends the run for h2 and reports the error naming h0; nothing hangs.
topology evb-emu "duration: 120" >"$work/coord.yaml"
(sleep 2 && kill -9 "$(pgrep -f "coord.yaml --name h0" | head -1)") &
t0=$SECONDS
run_all coord
wait "$pid_coord1"
rc1=$?
wait "$pid_coord2"
rc2=$?
wait || true
[ $((SECONDS - t0)) -le 30 ] || fail "lost coordinator: the run took $((SECONDS - t0)) s"
[ "$rc1" = 1 ] || fail "lost coordinator: h1 exit $rc1: $(cat "$work/coord.h1.json" "$work/coord.h1.err")"
field "$work/coord.h1.json" reason | grep -q "node h0 (the coordinator) lost" ||
    fail "lost coordinator: h1 reason: $(cat "$work/coord.h1.json")"
[ "$rc2" = 0 ] || fail "lost coordinator: h2 exit $rc2: $(cat "$work/coord.h2.json" "$work/coord.h2.err")"
[ "$(field "$work/coord.h1.json" built)" -gt 0 ] || fail "lost coordinator: $(cat "$work/coord.h1.json")"
# 7. A trigger farm on another host: h0 and h1 build the events, their builder units send them
# over fabric links to a prescale stage and a raw writer on h2; every event is accounted for
# across the hosts and h2's file holds exactly the kept ones.
farm() {
    echo "run: {name: farm, output_dir: $work/out, events: 60000}"
    echo "fabric: {provider: tcp, port: 7100}"
    echo "nodes:"
    for i in 0 1 2; do echo "  - {name: h$i, host: 10.78.0.$((i + 1)), control_port: 7020}"; done
    echo "stages:"
    for i in 0 1; do
        echo "  - {name: src$i, type: source, node: h$i, fragment: {size: 1K}}"
        echo "  - {name: ru$i, type: ru, node: h$i, bulk_size: 32}"
        echo "  - {name: bu$i, type: bu, node: h$i, bulk_size: 32}"
    done
    echo "  - {name: keep, type: process, node: h2, algorithm: prescale, factor: 5}"
    echo "  - {name: w, type: writer, node: h2, format: raw}"
    echo "links:"
    for i in 0 1; do
        echo "  - {from: src$i, to: ru$i}"
        for j in 0 1; do echo "  - {from: ru$i, to: bu$j}"; done
        echo "  - {from: bu$i, to: keep}"
    done
    echo "  - {from: keep, to: w}"
}
farm >"$work/farm.yaml"
"$sddaq" config check "$work/farm.yaml" >/dev/null || fail "farm: config check"
run_all farm
rc=$?
wait "$pid_farm1" || fail "farm: h1: $(cat "$work/farm.h1.err")"
wait "$pid_farm2" || fail "farm: h2: $(cat "$work/farm.h2.err")"
[ "$rc" = 0 ] || fail "farm: coordinator exit $rc: $(cat "$work/farm.h0.json" "$work/farm.h0.err")"
[ "$(field "$work/farm.h0.json" accounted)" = True ] || fail "farm: $(cat "$work/farm.h0.json")"
[ "$(field "$work/farm.h0.json" kept)" = 12000 ] || fail "farm: kept: $(cat "$work/farm.h0.json")"
# Every built event crossed a link once: sent by h0 or h1, delivered on h2.
[ "$(field "$work/farm.h0.json" link_sent)" = 60000 ] &&
    [ "$(field "$work/farm.h0.json" link_received)" = 60000 ] ||
    fail "farm: link counts: $(cat "$work/farm.h0.json")"
out=$("$sddaq" inspect "$(ls "$work"/out/farm_run*_w.raw)") || fail "farm: inspect"
grep -q "^records  *12000$" <<<"$out" || fail "farm: h2 file: $out"
# 8. The farm host killed mid-run: the builders' links fail, the run ends (not hangs) in error.
farm | sed 's/events: 60000/duration: 120/' >"$work/farmkill.yaml"
(
    sleep 2
    for _ in $(seq 100); do
        victim=$(pgrep -f "farmkill.yaml --name h2" | head -1)
        [ -n "$victim" ] && kill -9 "$victim" && echo "$victim" >"$work/farmkill.victim" && break
        sleep 0.1
    done
) &
t0=$SECONDS
run_all farmkill
rc=$?
wait "$pid_farmkill1"
wait || true
[ -s "$work/farmkill.victim" ] || fail "farm killed: h2 was never found to kill"
[ $((SECONDS - t0)) -le 40 ] || fail "farm killed: the run took $((SECONDS - t0)) s: $(cat "$work/farmkill.h0.json" "$work/farmkill.h1.json")"
[ "$rc" = 1 ] || fail "farm killed: coordinator exit $rc: $(cat "$work/farmkill.h0.json")"
grep -qE "h2 lost|fabric link" <<<"$(field "$work/farmkill.h0.json" reason)" ||
    fail "farm killed: reason: $(cat "$work/farmkill.h0.json")"
# 9. A host stalled past the builder's dead time (SIGSTOP 4 s, dead_ms 2000) and continued: the
# others give it up and go on; it finds its leases lapsed, fences (drops what it held, builds
# nothing more) and says so in its metrics while it waits for the coordinator; the coordinator
# ends the run in error naming it. No event is written twice. The sources are paced so that
# the stop mostly lands between bulks; when it lands in a delivery (the acknowledgement window,
# docs/evb.md), the events built there are built again by a survivor, and the accounting takes
# them out of built as the fenced builder's uncommitted ones (section 14 makes that happen).
paced stall 10
stall_h2 stall &
watcher=$!
run_all stall
rc=$?
wait "$pid_stall1"
rc1=$?
wait "$pid_stall2"
rc2=$?
wait "$watcher"
[ "$rc" = 1 ] || fail "stalled host: coordinator exit $rc: $(cat "$work/stall.h0.json")"
field "$work/stall.h0.json" reason | grep -q "node h2 failed: .*fenced" ||
    fail "stalled host: reason: $(cat "$work/stall.h0.json")"
[ "$(field "$work/stall.h0.json" status)" = EFENCED ] || fail "stalled host: $(cat "$work/stall.h0.json")"
[ "$rc2" = 1 ] && [ "$(field "$work/stall.h2.json" status)" = EFENCED ] ||
    fail "stalled host: h2 exit $rc2: $(cat "$work/stall.h2.json" "$work/stall.h2.err")"
[ "$rc1" = 0 ] || fail "stalled host: h1 exit $rc1: $(cat "$work/stall.h1.json" "$work/stall.h1.err")"
[ -s "$work/stall.fenced" ] || fail "stalled host: h2's metrics never showed sddaq_bu_fenced 1"
[ "$(field "$work/stall.h0.json" accounted)" = True ] || fail "stalled host: $(cat "$work/stall.h0.json")"
[ "$(field "$work/stall.h0.json" incomplete)" -gt 0 ] ||
    fail "stalled host: nothing flagged without h2's source: $(cat "$work/stall.h0.json")"
written_once stall "stalled host"
# 10. A partition shorter than the builder's dead time (heartbeats every 500 ms: 10 s): h2's
# link to the bridge goes down for 4 s. h2 cannot reach the coordinator, but neither can it
# reach a majority, so it must not take over (it used to, and ended the run for h1 behind the
# real coordinator's back); once the link is back the run goes on and ends cleanly everywhere.
cut_run part 2 2 "cut off and does not take over" partition
# 11. The coordinator stalled past the dead time (SIGSTOP 4 s) in a 30 s run: continued, it
# fences, and as the coordinator it ends the run for the others at once (it used to finish
# alone and make them wait for a new coordinator, two minutes). Nothing written twice.
paced cstall 30
(
    running_on 0 && sleep 1
    victim=$(pgrep -f "cstall.yaml --name h0" | head -1)
    kill -STOP "$victim" && sleep 4 && kill -CONT "$victim"
) &
stopper=$!
t0=$SECONDS
run_all cstall
rc=$?
wait "$pid_cstall1"
rc1=$?
wait "$pid_cstall2"
rc2=$?
wait "$stopper"
[ $((SECONDS - t0)) -le 20 ] || fail "stalled coordinator: the run took $((SECONDS - t0)) s"
[ "$rc" = 1 ] && [ "$(field "$work/cstall.h0.json" status)" = EFENCED ] ||
    fail "stalled coordinator: exit $rc: $(cat "$work/cstall.h0.json")"
[ "$rc1" = 0 ] && [ "$rc2" = 0 ] || fail "stalled coordinator: exits $rc1/$rc2: $(cat "$work"/cstall.h[12].err)"
[ "$(field "$work/cstall.h0.json" nodes)" = 3 ] || fail "stalled coordinator: $(cat "$work/cstall.h0.json")"
written_once cstall "stalled coordinator"
# 12. Nobody left to fetch a summary: h2 stalls past the dead time and fences, and while it
# waits for the coordinator to fetch its summary, h0 and h1 are killed. Their hosts refuse
# connections, so h2 leaves within seconds (it used to wait a minute), still reporting EFENCED.
paced orphan 30
(stall_h2 orphan; kill -9 $(pgrep -f "orphan.yaml --name h[01]")) &
killer=$!
export SDDAQ_LOG=warn # h2 says why it leaves
run_all orphan
export SDDAQ_LOG=error
wait "$pid_orphan1"
wait "$killer"
t0=$SECONDS
wait "$pid_orphan2"
rc2=$?
[ $((SECONDS - t0)) -le 10 ] || fail "orphaned node: h2 waited $((SECONDS - t0)) s after the others died"
echo "orphaned node: h2 left $((SECONDS - t0)) s after the others died"
[ "$rc2" = 1 ] && [ "$(field "$work/orphan.h2.json" status)" = EFENCED ] ||
    fail "orphaned node: h2 exit $rc2: $(cat "$work/orphan.h2.json" "$work/orphan.h2.err")"
grep -q "no other node answers" "$work/orphan.h2.err" ||
    fail "orphaned node: h2 did not say why it left: $(cat "$work/orphan.h2.err")"
# 13. Two hosts left waiting for a dead coordinator: a 2 s run ends, h1 and h2 finish and wait
# for their summaries to be fetched, and h0 (the coordinator), held back before it fetches them
# (a test hook), is killed. h1 and h2 still answer each other, but each says that it only
# waits and cannot take over, so both leave within seconds (they used to wait a minute).
topology evb-emu "duration: 2" >"$work/orphans.yaml"
(running_on 0 && sleep 6 && kill -9 $(pgrep -f "orphans.yaml --name h0")) &
killer=$!
export SDDAQ_LOG=warn
export SDDAQ_TEST_GATHER_DELAY_MS=60000
run_all orphans
unset SDDAQ_TEST_GATHER_DELAY_MS
export SDDAQ_LOG=error
wait "$killer"
t0=$SECONDS
wait "$pid_orphans1"
rc1=$?
wait "$pid_orphans2"
rc2=$?
[ $((SECONDS - t0)) -le 10 ] || fail "orphaned pair: h1 and h2 waited $((SECONDS - t0)) s after h0 died"
echo "orphaned pair: h1 and h2 left $((SECONDS - t0)) s after the coordinator died"
for i in 1 2; do
    eval "rc=\$rc$i"
    [ "$rc" = 0 ] && [ "$(field "$work/orphans.h$i.json" status)" = OK ] ||
        fail "orphaned pair: h$i exit $rc: $(cat "$work/orphans.h$i.json" "$work/orphans.h$i.err")"
    grep -q "no other node answers that could take over" "$work/orphans.h$i.err" ||
        fail "orphaned pair: h$i did not say why it left: $(cat "$work/orphans.h$i.err")"
done
# 14. A stall inside the fencing window (docs/evb.md): a test hook makes the builder unit that
# delivers event 39941 stop its own process (SIGSTOP) halfway through handing that bulk on,
# past its lease check; it is continued 4 s later, past the dead time. The RUs re-sent the
# bulk to a survivor; the stalled builder delivered it too but never committed it, so its
# writer drops those events (said) when it fences, and no event is written twice (before
# the writers waited for the commit: 6 events written twice, seen once in CI). Each host also
# publishes its decisions on a feedback stage, which drops the uncommitted ones too (said).
paced dstall 20
sed -i -E 's/^(  - \{name: w([0-9]), type: writer, node: (h[0-9]), format: raw\})$/\1\n  - {name: fb\2, type: feedback, node: \3}/;
    s/^(  - \{from: keep([0-9]), to: w[0-9]\})$/\1\n  - {from: keep\2, to: fb\2}/' "$work/dstall.yaml"
grep -q "to: fb2" "$work/dstall.yaml" || fail "stall in a delivery: no feedback stages in the topology"
(
    for _ in $(seq 300); do
        pids=$(pgrep -d, -f "dstall.yaml --name")
        victim=$([ -n "$pids" ] && ps -o pid=,stat= -p "$pids" | awk '$2 ~ /^T/ { print $1; exit }')
        [ -n "$victim" ] && break
        sleep 0.1
    done
    echo "$victim" >"$work/dstall.victim"
    [ -n "$victim" ] && sleep 4 && kill -CONT "$victim"
) &
stopper=$!
export SDDAQ_LOG=warn SDDAQ_TEST_STALL_EVENT=39941
run_all dstall
rc=$?
unset SDDAQ_TEST_STALL_EVENT
export SDDAQ_LOG=error
wait "$pid_dstall1"
wait "$pid_dstall2"
wait "$stopper"
[ -s "$work/dstall.victim" ] || fail "stall in a delivery: no builder unit stopped itself"
[ "$rc" = 1 ] && [ "$(field "$work/dstall.h0.json" status)" = EFENCED ] ||
    fail "stall in a delivery: coordinator exit $rc: $(cat "$work/dstall.h0.json")"
grep -q "delivered across a stall" "$work"/dstall.h?.err ||
    fail "stall in a delivery: no bulk counted in doubt: $(cat "$work"/dstall.h?.err)"
grep -q "events not written: their builder unit fenced" "$work"/dstall.h?.err ||
    fail "stall in a delivery: no writer dropped the uncommitted events: $(cat "$work"/dstall.h?.err)"
grep -q "decisions not published: their builder unit fenced" "$work"/dstall.h?.err ||
    fail "stall in a delivery: no feedback stage dropped the uncommitted decisions: $(cat "$work"/dstall.h?.err)"
# The coordinator's accounting takes the fenced builder's uncommitted events out of built:
# the survivor built each of them once more.
[ "$(field "$work/dstall.h0.json" uncommitted)" -gt 0 ] && [ "$(field "$work/dstall.h0.json" accounted)" = True ] ||
    fail "stall in a delivery: not accounted: $(cat "$work/dstall.h0.json")"
written_once dstall "stall in a delivery"
# 15. Two hosts, h1 cut off for 4 s (heartbeats 500 ms: dead time 10 s). Two nodes have no
# majority to ask, and a cut link looks like a dead host: h1 used to take over after two missed
# probes and end the run in error on both sides. It now waits out the dead time first (it
# says so), so the cut heals and the run ends cleanly on both.
nh=2
cut_run pair 1 1 "nobody takes over unless it stays silent for 10000 ms" "two-host cut"
# 16. Two hosts, the coordinator killed: its host refuses the connection, which no cut link
# does, so h1 takes over at once (not after the dead time) and reports the error naming h0.
topology evb-emu "duration: 120" >"$work/pairkill.yaml"
(running_on 1 && sleep 1 && kill -9 "$(pgrep -f "pairkill.yaml --name h0" | head -1)") &
t0=$SECONDS
run_all pairkill
wait "$pid_pairkill1"
rc1=$?
wait || true
[ $((SECONDS - t0)) -le 30 ] || fail "two hosts, lost coordinator: the run took $((SECONDS - t0)) s"
[ "$rc1" = 1 ] && field "$work/pairkill.h1.json" reason | grep -q "node h0 (the coordinator) lost" ||
    fail "two hosts, lost coordinator: h1 exit $rc1: $(cat "$work/pairkill.h1.json" "$work/pairkill.h1.err")"
nh=3
# 17. The coordinator cut off for 4 s (heartbeats 500 ms: dead time 10 s). h1 and h2 reach
# each other, a majority, but h0's host does not refuse the connection: it may be cut off, not
# dead. They used to take over after two missed probes and end the run behind h0's back; they
# now wait out the dead time first (h1 says so), so the cut heals and the run ends cleanly.
cut_run cocut 0 1 "nobody takes over unless it stays silent for 10000 ms" "coordinator cut"
# 18. The coordinator cut off for longer than the dead time (14 s; heartbeats 500 ms: 10 s) in
# a 30 s run. h1 and h2 wait out the dead time (the builders give h0 up first), then h1 takes
# over, ends the run for h2 and reports h0 lost; h0's builder, cut off from every remote RU,
# fences.
paced colong 30 500
(running_on 0 && sleep 1 && ip -n "$br" link set "v0$tag" down && sleep 14 && ip -n "$br" link set "v0$tag" up) &
cutter=$!
export SDDAQ_LOG=warn
run_all colong
rc=$?
export SDDAQ_LOG=error
wait "$pid_colong1"
rc1=$?
wait "$pid_colong2"
rc2=$?
wait "$cutter"
[ "$rc" = 1 ] && [ "$(field "$work/colong.h0.json" status)" = EFENCED ] ||
    fail "long coordinator cut: h0 exit $rc: $(cat "$work/colong.h0.json" "$work/colong.h0.err")"
[ "$rc1" = 1 ] && field "$work/colong.h1.json" reason | grep -q "node h0 (the coordinator) lost" ||
    fail "long coordinator cut: h1 exit $rc1: $(cat "$work/colong.h1.json" "$work/colong.h1.err")"
[ "$rc2" = 0 ] || fail "long coordinator cut: h2 exit $rc2: $(cat "$work/colong.h2.json" "$work/colong.h2.err")"
# h1 waited, and took over only once its builder had given h0 up.
grep -E "nobody takes over unless|peer node 0 is gone|node h1 ended the run" "$work/colong.h1.err" |
    sed -E 's/.*(nobody takes over unless|peer node 0 is gone|node h1 ended the run).*/\1/' |
    tr '\n' '|' | grep -qx "nobody takes over unless|peer node 0 is gone|node h1 ended the run|" ||
    fail "long coordinator cut: h1's takeover order: $(cat "$work/colong.h1.err")"
# Written twice, and only so: events h0 built and wrote in the cut's first seconds, while its
# leases held, whose acknowledgements it posted into the cut. They never arrived, so the RUs
# re-sent those bulks once they gave h0 up (docs/evb.md "Failures": not closed yet). Each such
# event has one copy in h0's file and one flagged RESENT in another's; anything else fails.
for f in "$work"/out/three_run*_w?.raw; do
    [ "$f" -nt "$work/colong.yaml" ] || continue
    "$sddaq" inspect "$f" -d 100000000 |
        awk -v w="${f##*_}" '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= 5 { print $2, w, $4 }'
done >"$work/colong.recs"
twice=$("$py" - "$work/colong.recs" <<'PY'
import collections, sys
by_id = collections.defaultdict(list)
for line in open(sys.argv[1]):
    event, writer, flags = line.split()
    by_id[event].append((writer, int(flags, 16)))
window = bad = 0
for copies in by_id.values():
    if len(copies) < 2:
        continue
    writers = sorted(w for w, _ in copies)
    resent = [f & 16 for w, f in copies if w != "w0.raw"]
    if len(copies) == 2 and writers[0] == "w0.raw" and writers[1] != "w0.raw" and all(resent):
        window += 1
    else:
        bad += 1
print(window, bad)
PY
)
[ "${twice#* }" = 0 ] || fail "long coordinator cut: $twice (in the known window, otherwise) events written twice"
echo "long coordinator cut: ${twice% *} events written twice in the acknowledgement window"
echo "three hosts: all checks passed"
