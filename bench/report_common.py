"""Helpers the bench/*_report.py scripts share: reading a run's text output, medians with
their spread, byte sizes for table cells and plain-text tables."""
import math
import statistics


def read_text(path, limit=1 << 20):
    """The file's text (at most limit characters), or "" when it cannot be read."""
    try:
        with open(path, "r", errors="replace") as f:
            return f.read(limit)
    except OSError:
        return ""


def stats(values):
    """Median, min, max and count of the finite numbers in values; None when there are none."""
    values = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values), "values": values}


# Two-sided 95 % Student t quantiles for 1..30 degrees of freedom; 1.96 beyond.
T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
       2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
       2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def geomean_ci(ratios):
    """Geometric mean of positive ratios with its 95 % confidence interval (a t interval on
    their logarithms: back-to-back pairs share the machine's state, so their ratio is the
    sample). None for fewer than two ratios."""
    logs = [math.log(r) for r in ratios if isinstance(r, (int, float)) and r > 0
            and math.isfinite(r)]
    if len(logs) < 2:
        return None
    n = len(logs)
    mean = statistics.fmean(logs)
    half = (T95[n - 2] if n - 1 <= len(T95) else 1.96) * statistics.stdev(logs) / math.sqrt(n)
    return {"geomean": math.exp(mean), "low": math.exp(mean - half),
            "high": math.exp(mean + half), "n": n}


def median_ci(values):
    """Median of values with its distribution-free 95 % confidence interval: the order
    statistics a sign test puts around it, so a few pairs spoiled by the machine changing state
    between their two runs move it less than a mean. None for fewer than six values (below that
    the interval is the whole range)."""
    v = sorted(x for x in values if isinstance(x, (int, float)) and math.isfinite(x))
    n = len(v)
    if n < 6:
        return None
    k = max(int(math.floor((n - 1.96 * math.sqrt(n)) / 2)), 0)  # 0-based lower rank
    return {"median": statistics.median(v), "low": v[k], "high": v[n - 1 - k], "n": n}


def fmt_size(n):
    """4096 -> "4 KiB"; sizes that are not whole KiB or MiB stay in bytes."""
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return "%d %s" % (n // div, unit)
    return "%d B" % n


def print_table(title, header, rows, first="<", rest="<"):
    """A title, the header, a rule and the rows; first/rest: "<" left- or ">" right-aligned
    (the first column, the others)."""
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]

    def line(cells):
        return "  ".join(("{:%s%d}" % (first if i == 0 else rest, widths[i])).format(str(c))
                         for i, c in enumerate(cells)).rstrip()

    print()
    print(title)
    head = line(header)
    print(head)
    print("-" * len(head))
    for r in rows:
        print(line(r))
