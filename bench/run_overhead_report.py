#!/usr/bin/env python3
"""Report of bench/run_overhead.sh: `sddaq run` (processing none, writer null) against the bare
event builder (`sddaq evb launch`), and the default chain's throughput and per-stage age.

Reads the manifest the script wrote (one line per run: kind, provider, fragment bytes, events,
repetition, exit code, wall/user/sys seconds from /usr/bin/time, output file, command), prints
the tables and writes one JSON object with every sample. Exit 1 when a run failed or did not
account for every event (or a provider was missing), else 0; a missed target is not a failure.
"""
import argparse
import json
import os
import sys
from report_common import fmt_size, geomean_ci, median_ci, print_table, read_text, stats

TARGET = 0.90  # runtime events/s over bare events/s: overhead <= 10 %

NOTES = [
    "runtime = `sddaq run TOPO -n N` of 2 evb-emu sources -> 2 RU -> 2 BU (every RU to every BU) "
    "-> process none -> writer null, one process (threads); bare = `sddaq evb launch -n 2` "
    "(2 processes, each RU+BU) with the same provider, N, fragment size, bulk 64, credits 4, "
    "verify header.",
    "events/s = each tool's own figure: built / seconds from the start of the run to its end "
    "(the runtime's end is seen by its monitor thread, which the last stage to finish wakes; "
    "setup and teardown are outside both).",
    "ratio = runtime median / bare median; pairs = the ratios of the A/B runs done back to "
    "back, their geometric mean and its 95 % confidence interval (t on the logs). Target: "
    "overhead <= 10 %, i.e. >= 0.90: PASS when the whole interval is >= 0.90, MISS when all of "
    "it is below, OPEN (not resolved by these pairs) otherwise. The pairs' median with its "
    "sign-test 95 % interval is shown beside it (less moved by a pair the VM spoiled), not "
    "used for the verdict; CPU s/Mev = process user+sys seconds (/usr/bin/time, setup included) "
    "per million events.",
    "age = time from an event's building (BU) to the moment the stage was done with it.",
]


def last_json(text):
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def stage_ages(obj):
    ages = {}
    for st in obj.get("stages", []) or []:
        if st.get("type") in ("process", "writer", "feedback"):
            ages[st["name"]] = {"type": st["type"], "p50_us": st.get("latency_p50_us"),
                                "p99_us": st.get("latency_p99_us"),
                                "events_in": st.get("events_in"),
                                "events_out": st.get("events_out")}
    return ages


def load_samples(manifest):
    samples = []
    with open(manifest) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 11:
                continue
            kind, prov, frag, events, rep, rc, wall, user, sys_s, path, cmd = parts[:11]
            s = {"kind": kind, "provider": prov, "frag": int(frag), "events": int(events),
                 "rep": int(rep), "cmd": cmd, "status": "ok"}
            if kind == "missing":
                s["status"] = "missing"
                s["error"] = "provider not available (sddaq info)"
                samples.append(s)
                continue
            s["rc"] = int(rc)
            s["wall_s"], s["user_s"], s["sys_s"] = num(wall), num(user), num(sys_s)
            if s["user_s"] is not None and s["sys_s"] is not None:
                s["cpu_s"] = s["user_s"] + s["sys_s"]
            obj = last_json(read_text(path))
            err = read_text(path + ".err").strip()
            kb = read_text(path + ".du").strip()
            if kb.isdigit():
                s["scratch_kib"] = int(kb)
            s["json"] = obj
            problems = []
            if s["rc"] in (124, 137):
                problems.append("killed after the per-run timeout")
            elif s["rc"] != 0:
                problems.append("exit code %d" % s["rc"])
            if obj is None:
                problems.append("no JSON")
            else:
                s["events_per_s"] = num(obj.get("events_per_s"))
                s["seconds"] = num(obj.get("seconds"))
                s["built"] = obj.get("built")
                if kind in ("runtime", "default"):
                    if obj.get("status") != "OK":
                        problems.append("status %s: %s" % (obj.get("status"), obj.get("reason")))
                    if obj.get("accounted") is not True:
                        problems.append("accounted is %s" % json.dumps(obj.get("accounted")))
                    s["ages"] = stage_ages(obj)
                    for k in ("generated", "kept", "rejected", "written", "dropped"):
                        s[k] = obj.get(k)
                if kind in ("runtime", "bare") and obj.get("built") != s["events"]:
                    problems.append("built %s of %d events" % (obj.get("built"), s["events"]))
                if kind == "bare":
                    for k in ("lost", "dup", "incomplete", "corrupt"):
                        if obj.get(k):
                            problems.append("%s %s" % (k, obj[k]))
                if not s.get("events_per_s"):
                    problems.append("no events/s")
            if problems:
                s["status"] = "failed"
                s["error"] = "; ".join(problems)
                if err:
                    s["stderr"] = err[-600:]
            samples.append(s)
    return samples


def fmt_rate(v):
    if v is None:
        return "n/a"
    return "%.2fM" % (v / 1e6) if v >= 1e6 else "%.0fk" % (v / 1e3)


def fmt_stat(st, f=fmt_rate):
    if st is None:
        return "n/a"
    if st["n"] == 1:
        return f(st["median"])
    return "%s [%s-%s]" % (f(st["median"]), f(st["min"]), f(st["max"]))


def fmt_num(v):
    if v is None:
        return "n/a"
    return "%.0f" % v if abs(v) >= 100 else "%.1f" % v if abs(v) >= 10 else "%.2f" % v


def summarize(samples):
    summary = []
    verdicts = {"PASS": 0, "MISS": 0, "OPEN": 0, "n/a": 0}
    points = []
    for s in samples:
        if s["kind"] in ("runtime", "bare", "missing"):
            key = (s["provider"], s["frag"])
            if key not in points:
                points.append(key)
    rows, cpu_rows = [], []
    for prov, frag in points:
        mine = [s for s in samples if s["provider"] == prov and s["frag"] == frag]
        rt = [s for s in mine if s["kind"] == "runtime"]
        bare = [s for s in mine if s["kind"] == "bare"]
        rok = [s for s in rt if s["status"] == "ok"]
        bok = [s for s in bare if s["status"] == "ok"]
        rst = stats([s.get("events_per_s") for s in rok])
        bst = stats([s.get("events_per_s") for s in bok])
        ratio = rst["median"] / bst["median"] if rst and bst and bst["median"] else None
        paired = []
        for rep in sorted({s["rep"] for s in mine}):
            a = [s["events_per_s"] for s in rok if s["rep"] == rep]
            b = [s["events_per_s"] for s in bok if s["rep"] == rep]
            if a and b and b[0]:
                paired.append(a[0] / b[0])
        pst = stats(paired)
        ci = geomean_ci(paired)
        mci = median_ci(paired)  # shown beside the verdict's statistic, not used by it
        if ratio is None:
            verdict = "n/a"
        elif ci is None:
            verdict = "OPEN"  # one pair cannot tell a 10 % overhead from this VM's noise
        elif ci["low"] >= TARGET:
            verdict = "PASS"
        elif ci["high"] < TARGET:
            verdict = "MISS"
        else:
            verdict = "OPEN"
        verdicts[verdict] = verdicts.get(verdict, 0) + 1
        cpu = {}
        for side, lst in (("runtime", rok), ("bare", bok)):
            cpu[side] = stats([s["cpu_s"] / s["events"] * 1e6 for s in lst
                               if s.get("cpu_s") is not None and s["events"]])
        problems = sorted({("%s rep %d: %s" % (s["kind"], s["rep"], s.get("error", "")))
                           if s["kind"] != "missing" else s["error"]
                           for s in mine if s["status"] != "ok"})
        events = mine[0]["events"]
        entry = {"provider": prov, "frag": frag, "events": events,
                 "runtime": {"tool": "sddaq run", "events_per_s": rst},
                 "bare": {"tool": "sddaq evb launch -n 2", "events_per_s": bst},
                 "ratio": ratio, "paired_ratios": paired, "paired_geomean": ci,
                 "paired_median": mci,
                 "target": ">= %.2f" % TARGET,
                 "verdict": verdict, "cpu_s_per_Mev": cpu,
                 "problems": problems}
        summary.append(entry)
        rows.append([prov, fmt_size(frag) if frag else "-", events or "-", fmt_stat(rst),
                     fmt_stat(bst), "n/a" if ratio is None else "%.2f" % ratio,
                     "n/a" if pst is None else "%.2f-%.2f" % (pst["min"], pst["max"]),
                     "n/a" if ci is None else "%.3f [%.3f-%.3f]" % (ci["geomean"], ci["low"],
                                                                  ci["high"]),
                     "n/a" if mci is None else "%.2f [%.2f-%.2f]" % (mci["median"], mci["low"],
                                                                  mci["high"]),
                     ">= %.2f %s" % (TARGET, verdict)])
        cpu_rows.append([prov, fmt_size(frag) if frag else "-",
                         fmt_stat(cpu["runtime"], fmt_num), fmt_stat(cpu["bare"], fmt_num)])
    print_table("[overhead] events/s, median [min-max]; ratio = sddaq run / evb launch "
                "(target >= %.2f: runtime overhead <= 10 %%)" % TARGET,
                ["provider", "frag", "events", "sddaq run", "evb launch", "ratio", "pairs",
                 "pair geomean [95% CI]", "pair median [95% CI]", "target"], rows)
    for e in summary:
        for p in e["problems"]:
            where = fmt_size(e["frag"]) if e["frag"] else "-"
            print("    %s %s: %s" % (e["provider"], where, p))
    # No ages here: process none and the null writer run inline in the builder's thread and
    # time nothing (their ages are null in the run's summary).
    print_table("[overhead] where the time goes: process CPU s per million events (user+sys)",
                ["provider", "frag", "sddaq run CPU", "evb launch CPU"], cpu_rows)
    return summary, verdicts


def default_chain(samples, auto_provider):
    d = [s for s in samples if s["kind"] == "default"]
    if not d:
        return None
    s = d[0]
    entry = {"cmd": s["cmd"], "status": s["status"], "error": s.get("error"),
             "seconds": s.get("seconds"), "events_per_s": s.get("events_per_s"),
             "built": s.get("built"), "kept": s.get("kept"), "rejected": s.get("rejected"),
             "written": s.get("written"), "dropped": s.get("dropped"),
             "kept_fraction": None, "ages": s.get("ages", {}), "cpu_s": s.get("cpu_s"),
             "output_kib": s.get("scratch_kib")}
    if s.get("built") and s.get("kept") is not None:
        entry["kept_fraction"] = s["kept"] / s["built"]
    print()
    if s["status"] != "ok":
        print("default chain: FAILED (%s): %s" % (s["cmd"], s.get("error")))
        if s.get("stderr"):
            print("    " + s["stderr"].replace("\n", "\n    "))
        return entry
    ages = ", ".join("%s %s/%s" % (n, fmt_num(a.get("p50_us")), fmt_num(a.get("p99_us")))
                     for n, a in entry["ages"].items())
    print("default chain: %s ev/s built (%s in %.2f s), kept %.1f %% (%s), written %s, "
          "%.0f MiB of HDF5 (deleted); fabric auto = %s" %
          (fmt_rate(entry["events_per_s"]), entry["built"], entry["seconds"] or 0,
           100 * (entry["kept_fraction"] or 0), entry["kept"], entry["written"],
           (entry["output_kib"] or 0) / 1024, auto_provider))
    print("default chain age p50/p99 (us): %s" % ages)
    return entry


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--meta", action="append", default=[], help="KEY=VALUE")
    args = ap.parse_args()
    meta = dict(kv.partition("=")[::2] for kv in args.meta)

    samples = load_samples(args.manifest)
    summary, verdicts = summarize(samples)
    dflt = default_chain(samples, meta.get("auto_provider", "unknown"))
    print()
    for note in NOTES:
        print("note: " + note)
    print("targets: %d PASS, %d MISS, %d OPEN, %d n/a" % (verdicts["PASS"], verdicts["MISS"],
                                                          verdicts["OPEN"], verdicts["n/a"]))
    bad = [s for s in samples if s["status"] != "ok"]
    result = {"schema": "sddaq-bench-run-overhead/1", "meta": meta, "notes": NOTES,
              "verdicts": verdicts, "summary": summary, "default_chain": dflt,
              "failures": len(bad), "samples": samples}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    os.replace(tmp, args.out)
    print("results: %s" % args.out)
    missing = [s for s in bad if s["status"] == "missing"]
    if len(bad) > len(missing):
        print("FAILED: %d run(s) did not end cleanly with every event accounted for"
              % (len(bad) - len(missing)))
    if missing:
        print("FAILED: provider(s) not available: %s"
              % ", ".join(s["provider"] for s in missing))
    if bad:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
