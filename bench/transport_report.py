#!/usr/bin/env python3
"""Report for bench/transport.sh: parse every run's output, take medians with min-max per
(provider, comparison, size), print one table per comparison with the ratio sddaq/reference
and its target, and write all raw samples plus the summary as one JSON file.

Input: a manifest (TSV, one line per run: case, provider, tool, size, iters, rep, rc, wall_s,
output file, command) and --meta KEY=VALUE pairs describing the machine. Python 3 stdlib only.

How the reference numbers are read:
  fi_pingpong  the row "bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec". It counts
               both directions: usec/xfer = elapsed / (2 * iters), the one-way latency (half
               a round trip, averaged); MB/sec = 2 * size * iters / elapsed (10^6 B/s), which
               equals size / usec/xfer, i.e. the same definition as sddaq's lat-test bw_MBps.
               Both columns have two decimals; the latency is taken from whichever of the two
               has more significant digits.
  ucx_perftest the final row "iterations, latency p50/average/overall (usec), bandwidth
               average/overall (MB/s), message rate average/overall". Ping-pong tests
               (tag_lat, ucp_put_lat) report half the round trip; stream tests (tag_bw,
               ucp_put_bw, ucp_get) report time per operation. Its MB is 2^20 bytes: converted
               here to 10^6 bytes. The "overall" columns (whole-run averages) are used.
  sddaq perf   its --json line: lat_us.mean (one-way for send/write, whole read for read;
               means are compared because the references only give means) and bw_MBps.
  memcpy       bench_memcpy --json lines: GBps per size.
"""
import argparse
import json
import math
import os
import re
import sys
from report_common import fmt_size, print_table, read_text, stats

MIB = 1048576.0 / 1e6  # UCX "MB/s" is MiB/s

# One table per (case, metric): title, which samples, metric, better direction, target.
TABLES = [
    # case, metric, title, reference label, size filter, target (op, value)
    ("send", "lat_us", "send/recv one-way latency, usec (mean)", "fi_pingpong",
     lambda s: s < 65536, ("<=", 1.10)),
    ("send", "bw_MBps", "send/recv ping-pong bandwidth, MB/s", "fi_pingpong",
     lambda s: s >= 65536, (">=", 0.95)),
    ("rma-write-lat", "lat_us", "RMA write latency (one-way), usec", "ucp_put_lat", None, None),
    ("rma-read-lat", "lat_us", "RMA read latency (whole read), usec", "ucp_get -O 1", None, None),
    ("rma-write-bw", "bw_MBps", "RMA write bandwidth, MB/s", "ucp_put_bw", None, None),
    ("rma-read-bw", "bw_MBps", "RMA read bandwidth, MB/s", "ucp_get", None, None),
    ("stream-bw", "bw_MBps", "streaming send bandwidth, MB/s", "tag_bw", None, None),
]

SIZE_SUFFIX = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_fi_size(text):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)", text)
    if not m:
        return None
    return float(m.group(1)) * SIZE_SUFFIX[m.group(2)]


def parse_fi_pingpong(text, size):
    """Return (values, error) from fi_pingpong client output."""
    row = re.compile(r"^\s*(\S+)\s+(\S+)\s+([=+-])(\S+)\s+(\S+)\s+([\d.]+)s\s+([\d.]+)\s+"
                     r"([\d.]+)\s+([\d.]+)\s*$")
    for line in text.splitlines():
        m = row.match(line)
        if not m:
            continue
        nbytes = parse_fi_size(m.group(1))
        if nbytes is not None and size and int(nbytes) != size:
            return None, "fi_pingpong reported size %s, expected %d" % (m.group(1), size)
        if m.group(3) != "=":
            return None, "fi_pingpong: sent and acked counts differ (%s%s)" % (m.group(3),
                                                                            m.group(4))
        mbps, usec = float(m.group(7)), float(m.group(8))
        if usec <= 0 and mbps <= 0:
            return None, "fi_pingpong: zero time"
        # Two decimals each: the larger number carries more significant digits.
        if mbps > usec and mbps > 0:
            lat = size / mbps
        else:
            lat = usec
        bw = mbps if mbps > 0 else size / usec
        return {"lat_us": lat, "bw_MBps": bw, "usec_per_xfer": usec, "MBps_col": mbps,
                "time_s": float(m.group(6))}, None
    return None, "no fi_pingpong result row"


def parse_ucx(text):
    num = r"(-?[\d.]+(?:e[+-]?\d+)?|inf|nan)"
    row = re.compile(r"^\s*(?:Final:)?\s*" + r"\s+".join([num] * 8) + r"\s*$")
    found = None
    for line in text.splitlines():
        m = row.match(line)
        if m:
            found = [float(x) for x in m.groups()]
    if found is None:
        return None, "no ucx_perftest result row"
    iters, p50, _avg, overall, _bw_avg, bw_overall, _mr_avg, mr_overall = found
    if not all(math.isfinite(x) for x in found):
        return None, "ucx_perftest printed non-finite numbers"
    return {"lat_us": overall, "lat_p50_us": p50, "bw_MBps": bw_overall * MIB,
            "msg_rate_kps": mr_overall / 1e3, "iters_done": int(iters)}, None


def parse_json_lines(text, tool):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if obj.get("tool") == tool:
            out.append(obj)
    return out


def parse_sddaq(text, size):
    objs = parse_json_lines(text, "sddaq-perf")
    for obj in objs:
        if int(obj.get("size", -1)) != size:
            continue
        vals = {"bw_MBps": obj.get("bw_MBps"), "msg_rate_kps": obj.get("msg_rate_kps"),
                "provider_name": obj.get("provider"), "window": obj.get("window"),
                "iters_done": obj.get("iters")}
        lat = obj.get("lat_us")
        if isinstance(lat, dict):
            vals["lat_us"] = lat.get("mean")
            vals["lat_p50_us"] = lat.get("p50")
            vals["lat_p99_us"] = lat.get("p99")
        return vals, None
    return None, "no sddaq-perf JSON line for size %d" % size


def first_error(path):
    for suffix in (".err", ".srv"):
        text = read_text(path + suffix).strip()
        if text:
            lines = [l for l in text.splitlines() if l.strip()]
            for l in lines:
                if re.search(r"error|fail|cannot|refused|timeout|abort", l, re.I):
                    return l.strip()[:200]
            return lines[-1].strip()[:200]
    return ""


NOTES = [
    "fi_pingpong: usec/xfer = elapsed / (2 * iters) = mean one-way latency; MB/sec = size / "
    "usec/xfer (10^6 B/s); no warm-up, so its first (connecting) message is timed.",
    "sddaq latency = lat_us.mean (the references give means only); p50/p99 are in the JSON.",
    "ucx_perftest: ping-pong tests report half the round trip, stream tests (ucp_put_bw, "
    "ucp_get, tag_bw) time per operation with -O WINDOW in flight; MB/s converted from MiB/s.",
    "RMA read latency: UCX over sm maps the peer's memory, so ucp_get -O 1 can be a local copy "
    "that never waits for the peer; over tcp it is emulated with messages (about 1 ms here).",
    "ratio = ratio of medians; best = best run against best run (min latency, max bandwidth); "
    "'paired_ratios' in the JSON pair the back-to-back runs.",
]


def load_samples(manifest, run_timeout):
    samples = []
    with open(manifest) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 10:
                continue
            case, prov, tool, size, iters, rep, rc, wall, path, cmd = parts[:10]
            size, iters, rep = int(size), int(iters), int(rep)
            s = {"case": case, "provider": prov, "tool": tool, "size": size, "iters": iters,
                 "rep": rep, "wall_s": float(wall or 0), "cmd": cmd, "status": "ok"}
            if rc == "missing":
                s["status"] = "missing"
                s["error"] = "tool not available"
                samples.append(s)
                continue
            if rc == "skipped":
                s["status"] = "skipped"
                s["error"] = "not run: it hung before at this size, or three times in this comparison"
                samples.append(s)
                continue
            s["rc"] = int(rc)
            text = read_text(path)
            s["raw"] = text[-1500:]
            if s["rc"] in (124, 137):
                s["status"] = "timeout"
                s["error"] = "killed after the per-run timeout"
                samples.append(s)
                continue
            if tool == "memcpy":
                rows = parse_json_lines(text, "memcpy")
                if not rows:
                    s["status"] = "failed"
                    s["error"] = first_error(path) or "no memcpy JSON"
                for row in rows:
                    m = dict(s)
                    m["size"] = int(row["size"])
                    m["GBps"] = row.get("GBps")
                    m["ns_per_copy"] = row.get("ns_per_copy")
                    m.pop("raw", None)
                    samples.append(m)
                if not rows:
                    samples.append(s)
                continue
            if tool == "fi_pingpong":
                vals, err = parse_fi_pingpong(text, size)
            elif tool == "ucx":
                vals, err = parse_ucx(text)
            else:
                vals, err = parse_sddaq(text, size)
            if vals is None or s["rc"] != 0:
                s["status"] = "failed"
                s["error"] = (first_error(path) or err or "exit code %d" % s["rc"])
                if s["rc"] != 0:
                    s["error"] = "rc=%d: %s" % (s["rc"], s["error"])
                if run_timeout and s["wall_s"] * 2 >= run_timeout:
                    # The server's own timeout ended it: the client was stuck or starved.
                    s["status"] = "timeout"
                    s["error"] = "no result after %.0f s (hung or starved); client said: %s" % (
                        s["wall_s"], s["error"])
            else:
                s.update({k: v for k, v in vals.items() if v is not None})
            samples.append(s)
    return samples


def fmt(v):
    if v is None:
        return "n/a"
    a = abs(v)
    if a >= 1000:
        return "%.0f" % v
    if a >= 100:
        return "%.1f" % v
    if a >= 1:
        return "%.2f" % v
    return "%.3f" % v


def fmt_stat(st):
    if st is None:
        return "n/a"
    if st["n"] == 1:
        return fmt(st["median"])
    return "%s [%s-%s]" % (fmt(st["median"]), fmt(st["min"]), fmt(st["max"]))


def summarize(samples):
    summary = []
    verdicts = {"PASS": 0, "MISS": 0, "n/a": 0}
    providers = []
    for s in samples:
        if s["provider"] != "local" and s["provider"] not in providers:
            providers.append(s["provider"])
    # sddaq names the provider it really used ("tcp;ofi_rxm"); the tables show it.
    sddaq_prov = {}
    for s in samples:
        if s["tool"] == "sddaq" and s.get("provider_name"):
            sddaq_prov.setdefault(s["provider"], s["provider_name"])
    for prov in providers:
        for case, metric, title, ref_label, size_ok, target in TABLES:
            mine = [s for s in samples if s["provider"] == prov and s["case"] == case]
            if not mine:
                continue
            sizes = sorted({s["size"] for s in mine if size_ok is None or size_ok(s["size"])})
            if not sizes:
                continue
            lower_better = metric == "lat_us"
            rows = []
            for size in sizes:
                ref = [s for s in mine if s["size"] == size and s["tool"] != "sddaq"]
                sdd = [s for s in mine if s["size"] == size and s["tool"] == "sddaq"]
                rst = stats([s.get(metric) for s in ref if s["status"] == "ok"])
                sst = stats([s.get(metric) for s in sdd if s["status"] == "ok"])
                ratio = None
                if rst and sst and rst["median"] > 0:
                    ratio = sst["median"] / rst["median"]
                # Best run against best run: on this machine small-message latency switches
                # between modes (about 0.3 and 1 us on shm for every tool), so medians of a few
                # runs can compare different modes; the best runs compare the same one.
                best = None
                if rst and sst:
                    rb = rst["min"] if lower_better else rst["max"]
                    sb = sst["min"] if lower_better else sst["max"]
                    best = sb / rb if rb else None
                # Ratios of the pairs run back to back, for a view less exposed to drift.
                paired = []
                for rep in sorted({s["rep"] for s in mine if s["size"] == size}):
                    a = [s.get(metric) for s in ref if s["rep"] == rep and s["status"] == "ok"]
                    b = [s.get(metric) for s in sdd if s["rep"] == rep and s["status"] == "ok"]
                    if a and b and a[0] and b[0] is not None:
                        paired.append(b[0] / a[0])
                verdict = None
                best_verdict = None
                if target:
                    op, val = target

                    def judge(r):
                        if r is None:
                            return "n/a"
                        return "PASS" if ((r <= val) if op == "<=" else (r >= val)) else "MISS"

                    verdict = judge(ratio)
                    best_verdict = judge(best)
                    verdicts[verdict] += 1
                errors = sorted({"%s: %s" % (s["tool"], s.get("error", ""))
                                 for s in ref + sdd if s["status"] != "ok"})
                entry = {"provider": prov, "case": case, "metric": metric, "title": title,
                         "size": size, "iters": (ref + sdd)[0]["iters"],
                         "reference": {"tool": ref_label, "stats": rst},
                         "sddaq": {"stats": sst}, "ratio": ratio, "best_ratio": best,
                         "best_verdict": best_verdict,
                         "paired_ratios": paired,
                         "ratio_meaning": "sddaq/reference, %s is better" %
                                          ("lower" if lower_better else "higher"),
                         "target": ("%s %.2f" % target) if target else None,
                         "verdict": verdict, "problems": errors}
                summary.append(entry)
                rows.append(entry)
            header = ["size", "iters", ref_label + " median [min-max]",
                      "sddaq median [min-max]", "ratio", "best", "target: median / best"]
            table = []
            for e in rows:
                tgt = e["target"] or "-"
                if e["verdict"]:
                    tgt = "%s %s / %s" % (tgt, e["verdict"], e["best_verdict"])
                table.append([fmt_size(e["size"]), e["iters"], fmt_stat(e["reference"]["stats"]),
                              fmt_stat(e["sddaq"]["stats"]),
                              "n/a" if e["ratio"] is None else "%.2f" % e["ratio"],
                              "n/a" if e["best_ratio"] is None else "%.2f" % e["best_ratio"],
                              tgt])
            pname = sddaq_prov.get(prov) or prov
            print_table("[%s] %s  (ratio = sddaq/%s, %s is better; sddaq provider %s)" %
                        (prov, title, ref_label, "lower" if lower_better else "higher", pname),
                        header, table, first=">")
            for e in rows:
                for p in e["problems"]:
                    print("    %s: %s" % (fmt_size(e["size"]), p))
    # memcpy ceiling
    mem = [s for s in samples if s["tool"] == "memcpy"]
    if mem:
        rows = []
        for size in sorted({s["size"] for s in mem if s["size"] > 0}):
            gst = stats([s.get("GBps") for s in mem if s["size"] == size and s["status"] == "ok"])
            nst = stats([s.get("ns_per_copy") for s in mem
                         if s["size"] == size and s["status"] == "ok"])
            summary.append({"provider": "local", "case": "memcpy", "metric": "GBps",
                            "size": size, "memcpy": {"GBps": gst, "ns_per_copy": nst}})
            rows.append([fmt_size(size), fmt_stat(gst), fmt_stat(nst),
                         "n/a" if gst is None else fmt(gst["median"] * 1000)])
        if not rows:
            rows.append(["-", "n/a", "n/a", "n/a"])
            bad = [s.get("error", "") for s in mem if s["status"] != "ok"]
            if bad:
                print("    memcpy: %s" % bad[0])
        print_table("[local] memcpy, one thread (the ceiling of a copying transport)",
                    ["size", "GB/s median [min-max]", "ns/copy median [min-max]", "= MB/s"],
                    rows, first=">")
    return summary, verdicts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--meta", action="append", default=[], help="KEY=VALUE")
    args = ap.parse_args()

    meta = {}
    for kv in args.meta:
        k, _, v = kv.partition("=")
        meta[k] = v
    try:
        run_timeout = float(meta.get("run_timeout_s", "0"))
    except ValueError:
        run_timeout = 0.0
    samples = load_samples(args.manifest, run_timeout)
    summary, verdicts = summarize(samples)
    print()
    for note in NOTES:
        print("note: " + note)
    print("targets: %d PASS, %d MISS, %d n/a" % (verdicts["PASS"], verdicts["MISS"],
                                                 verdicts["n/a"]))
    result = {"schema": "sddaq-bench-transport/1", "meta": meta, "notes": NOTES,
              "verdicts": verdicts,
              "summary": summary, "samples": samples}
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, args.out)
    print("results: %s" % args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
