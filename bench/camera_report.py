#!/usr/bin/env python3
"""Report for bench/camera.sh: judge single runs and format all runs into tables and JSON.

  camera_report.py judge --rate R FILE
      Exit 0 when the run in FILE (the JSON line of camera_sidechannel or bench_tcp_frames)
      sustained R frames per second, else print why and exit 1. One definition for every path:
        - the program ran and exited 0, with zero bad frames (checksum, number, order)
        - complete accounting: delivered + skipped = every frame since the first delivered
        - delivered fps >= 98 % of R (the control system gets the rate, not just the camera;
          98 and not 99 because a camera that sleeps between frames on a virtual machine
          misses about 1 % of 200 us deadlines by a whole period from wake-up jitter alone)
        - skipped <= 1 % of the frames since the first delivered (a KSB skips when behind)
        - p99 frame age <= 1 ms
      A plain TCP stream never skips; when it cannot keep up the sender blocks and misses its
      deadlines, which shows as delivered fps below the target.

  camera_report.py report --manifest M --out FILE.json [--meta KEY=VALUE ...]
      M: TSV, one line per run: case, path, fps, attempt, rc, output file, command. Prints the
      tables and writes every run plus the summary as one JSON file. Python 3 stdlib only.
"""
import argparse
import json
import os
import sys
from report_common import print_table

MAX_P99_US = 1000.0       # sustainable: p99 frame age
MIN_DELIVERED = 0.98      # sustainable: delivered fps / target
MAX_SKIPPED = 0.01        # sustainable: skipped / frames since the first delivered
TARGET_FPS = 5000         # the operating point
TARGET_P99_US = 200.0     # at TARGET_FPS on shm
TARGET_RATIO = 3.0        # shm highest sustainable rate / plain-tcp's


def read_run(path):
    """The last JSON line of a run's stdout, or None."""
    try:
        with open(path, errors="replace") as f:
            text = f.read(1 << 20)
    except OSError:
        return None
    found = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if obj.get("tool") == "camera-sidechannel":
                found = obj
    return found


def first_error(path):
    try:
        with open(path + ".err", errors="replace") as f:
            lines = [l.strip() for l in f.read(1 << 16).splitlines() if l.strip()]
    except OSError:
        return ""
    for l in lines:
        if any(w in l.lower() for w in ("error", "cannot", "fail", "refused", "timeout")):
            return l[:200]
    return lines[-1][:200] if lines else ""


def why_not(run, rate, rc=0):
    """None when run sustained rate, else the first reason it did not."""
    if run is None:
        return "no result (rc=%s)" % rc
    if rc not in (0, 1):
        return "exit code %s" % rc
    if run.get("error"):
        return "error: %s" % run["error"]
    if run.get("bad", 1) or run.get("out_of_order", 1):
        return "%s bad, %s out of order" % (run.get("bad"), run.get("out_of_order"))
    if not run.get("complete"):
        return "accounting incomplete (delivered + skipped != frames since the first)"
    fps = run.get("delivered_fps", 0.0)
    if rate > 0 and fps < MIN_DELIVERED * rate:
        return "delivered %.0f fps < %.0f%% of %d (camera %s fps, %s dropped)" % (
            fps, MIN_DELIVERED * 100, rate, fmt(run.get("camera_fps")), run.get("camera_dropped"))
    since = max(run.get("since_first", 0), 1)
    if run.get("skipped", 0) > MAX_SKIPPED * since:
        return "skipped %d of %d (> %.0f%%)" % (run["skipped"], since, MAX_SKIPPED * 100)
    if run.get("age_p99_us", 1e18) > MAX_P99_US:
        return "p99 age %.0f us > %.0f us" % (run["age_p99_us"], MAX_P99_US)
    return None


def cmd_judge(args):
    run = read_run(args.file)
    why = why_not(run, args.rate)
    if why:
        print(why)
        return 1
    return 0


def fmt(v, digits=None):
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, int):
        return str(v)
    if digits is not None:
        return "%.*f" % (digits, v)
    a = abs(v)
    if a >= 100:
        return "%.0f" % v
    if a >= 10:
        return "%.1f" % v
    return "%.2f" % v


def load(manifest):
    runs = []
    with open(manifest) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 7:
                continue
            case, path, fps, attempt, rc, out, cmd = parts[:7]
            r = {"case": case, "path": path, "fps": int(fps), "attempt": int(attempt),
                 "rc": int(rc), "cmd": cmd, "result": read_run(out)}
            if r["rc"] in (124, 137):
                r["problem"] = "timed out"
            elif r["result"] is None:
                r["problem"] = first_error(out) or "no JSON (rc=%d)" % r["rc"]
            r["why_not_sustained"] = why_not(r["result"], r["fps"], r["rc"])
            runs.append(r)
    return runs


def cmd_report(args):
    meta = dict(kv.partition("=")[::2] for kv in args.meta)
    runs = load(args.manifest)
    paths = []
    for r in runs:
        if r["path"] not in paths:
            paths.append(r["path"])
    summary = {}
    verdicts = []

    # (a) the operating point
    rows = []
    for p in paths:
        r = next((x for x in runs if x["path"] == p and x["case"] == "rate5000"), None)
        res = r["result"] if r else None
        summary.setdefault(p, {})["at_5000"] = res
        if res is None:
            rows.append([p] + ["n/a"] * 12 + [(r or {}).get("problem", "not run")])
            continue
        rows.append([p, fmt(res.get("camera_fps")), fmt(res.get("camera_dropped")),
                     fmt(res["delivered_fps"]), fmt(res["gbps"]), fmt(res["skipped"]),
                     fmt(res["torn_retries"]), fmt(res["bad"]), fmt(res["complete"]),
                     fmt(res["age_p50_us"], 1), fmt(res["age_p99_us"], 1),
                     fmt(res["age_max_us"], 1), "ok" if res.get("ok") else "FAILED", ""])
    print_table("(a) %d fps, 512x512 8-bit frames (256 KiB): camera -> control system" %
                TARGET_FPS,
                ["path", "camera fps", "dropped", "delivered fps", "Gbit/s", "skipped", "torn",
                 "bad", "complete", "age p50 us", "p99 us", "max us", "run", ""], rows, rest=">")

    # (b) flat out and (c) the sweep
    rows = []
    for p in paths:
        flat = next((x for x in runs if x["path"] == p and x["case"] == "flatout"), None)
        fres = flat["result"] if flat else None
        sweep = [x for x in runs if x["path"] == p and x["case"] == "sweep"]
        rates = sorted({x["fps"] for x in sweep})
        passed = [f for f in rates if any(x["fps"] == f and not x["why_not_sustained"]
                                          for x in sweep)]
        failed = [f for f in rates if f not in passed]
        best = max(passed) if passed else None
        first_fail = min((f for f in failed if best is None or f > best), default=None)
        fail_why = None
        if first_fail is not None:
            fail_why = [x["why_not_sustained"] for x in sweep if x["fps"] == first_fail][-1]
        best_run = None
        if best is not None:
            best_run = next(x["result"] for x in sweep
                            if x["fps"] == best and not x["why_not_sustained"])
        summary[p].update({
            "flat_out": fres,
            "sweep": [{"fps": x["fps"], "attempt": x["attempt"],
                       "sustained": not x["why_not_sustained"],
                       "why_not": x["why_not_sustained"]} for x in sweep],
            "max_sustainable_fps": best, "first_failing_fps": first_fail,
            "first_failing_why": fail_why, "at_max_sustainable": best_run})
        rows.append([p,
                     fmt(fres["delivered_fps"]) if fres else "n/a",
                     fmt(fres["camera_fps"]) if fres else "n/a",
                     fmt(fres["torn_retries"]) if fres else "n/a",
                     fmt(fres["gbps"]) if fres else "n/a",
                     fmt(best) if best else "< %d" % min(rates) if rates else "n/a",
                     fmt(best_run["gbps"]) if best_run else "n/a",
                     fmt(best_run["age_p99_us"], 1) if best_run else "n/a",
                     "%d: %s" % (first_fail, fail_why) if first_fail else "-"])
    print_table("(b) flat out (camera as fast as it can) and (c) highest sustainable rate",
                ["path", "flat-out delivered fps", "camera fps", "torn", "Gbit/s",
                 "max sustainable fps", "Gbit/s", "p99 us", "first failing rate: why"], rows, rest=">")

    # (d) targets
    def verdict(name, ok, detail):
        v = "n/a" if ok is None else ("PASS" if ok else "MISS")
        verdicts.append({"target": name, "verdict": v, "detail": detail})

    shm = summary.get("shm", {}).get("at_5000")
    if "shm" in summary:
        verdict("shm %d fps: every frame delivered or counted as skipped" % TARGET_FPS,
                None if shm is None else bool(shm["complete"]),
                None if shm is None else "%d delivered + %d skipped of %d since the first" % (
                    shm["delivered"], shm["skipped"], shm["since_first"]))
        verdict("shm %d fps: p99 frame age <= %.0f us" % (TARGET_FPS, TARGET_P99_US),
                None if shm is None else shm["age_p99_us"] <= TARGET_P99_US,
                None if shm is None else "p99 %.1f us" % shm["age_p99_us"])
        verdict("shm %d fps: zero torn (bad) deliveries" % TARGET_FPS,
                None if shm is None else shm["bad"] == 0 and shm["out_of_order"] == 0,
                None if shm is None else "%d bad (%d torn fetches retried and dropped)" % (
                    shm["bad"], shm["torn_retries"]))
    ratio = None
    base = summary.get("plain-tcp", {}).get("max_sustainable_fps")
    for p in paths:
        mx = summary[p].get("max_sustainable_fps")
        summary[p]["ratio_to_plain_tcp"] = (mx / base) if mx and base else None
    for p in ("shm", "shm-stream", "shm-inplace"):
        if p not in summary:
            continue
        mx = summary[p].get("max_sustainable_fps")
        ratio = (mx / base) if mx and base else None
        verdict("%s highest sustainable rate >= %.0fx plain-tcp's" % (p, TARGET_RATIO),
                None if ratio is None else ratio >= TARGET_RATIO,
                "n/a" if ratio is None else "%s / %s fps = %.2fx" % (fmt(mx), fmt(base), ratio))
    print()
    print("(d) ratios of highest sustainable rates to plain-tcp: " + ", ".join(
        "%s %s" % (p, "n/a" if summary[p]["ratio_to_plain_tcp"] is None
                   else "%.2fx" % summary[p]["ratio_to_plain_tcp"]) for p in paths))
    print()
    print("targets:")
    for v in verdicts:
        print("  %-4s  %s  (%s)" % (v["verdict"], v["target"], v["detail"]))
    notes = [
        "sustainable = zero bad, complete accounting, delivered >= %.0f%% of the target, "
        "skipped <= %.0f%% of frames since the first delivered, p99 age <= %.0f us; a rate "
        "passes when one of two tries passes" % (MIN_DELIVERED * 100, MAX_SKIPPED * 100,
                                                 MAX_P99_US),
        "age: KSB = camera commit -> frame usable at the clone; plain-tcp = send stamp -> "
        "whole frame received (same host, CLOCK_MONOTONIC)",
        "flat out: a KSB camera never waits, so the clone mostly races the writer (torn "
        "fetches) and skips; a TCP sender is held back by the receiver. The sweep, not the "
        "flat-out run, gives the sustainable rate",
        "camera dropped: frames never made because the camera fell more than its 8-frame "
        "buffer behind its deadlines: OS wake-up jitter or CPU contention for a KSB camera "
        "(which never waits for readers), backpressure for the plain TCP sender",
    ]
    print()
    for n in notes:
        print("note: " + n)
    result = {"schema": "sddaq-bench-camera/1", "meta": meta, "notes": notes,
              "targets": verdicts, "summary": summary, "runs": runs}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    os.replace(tmp, args.out)
    print("results: %s" % args.out)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    j = sub.add_parser("judge")
    j.add_argument("--rate", type=int, required=True)
    j.add_argument("file")
    r = sub.add_parser("report")
    r.add_argument("--manifest", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--meta", action="append", default=[], help="KEY=VALUE")
    args = ap.parse_args()
    return cmd_judge(args) if args.cmd == "judge" else cmd_report(args)


if __name__ == "__main__":
    sys.exit(main())
