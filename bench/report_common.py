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
