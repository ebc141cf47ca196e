#!/usr/bin/env python3
"""Generates the at-a-glance tables of docs/performance.md from the benchmarks' JSON.

  scripts/perf_report.py [--check] [--no-plots]   rewrite (or, with --check, compare) the tables
                                                  between <!-- perf:begin AREA --> and
                                                  <!-- perf:end AREA --> and the plots
  scripts/perf_report.py stamp FILE -- CMD...     record the commit and the command in FILE's
                                                  context (scripts/bench.sh does this)
  scripts/perf_report.py table FILE [--filter RE] every row of one Google Benchmark JSON as a
                                                  markdown table (medians when there are
                                                  aggregates)

What goes into each table is declared in docs/performance/report.toml: per area the JSON files
(in docs/performance/data/, one Google Benchmark output per file, stamped with commit and
command), the rows, the counters shown, the targets and the peer each row is compared with.
--check exits 1 when docs/performance.md differs from what the JSON gives (a ctest runs it), or
when a plot the page shows is missing; it needs only the standard library. Writing the plots needs
matplotlib (python3-matplotlib, the `plot` group of scripts/packages.txt).
"""
import argparse
import difflib
import json
import math
import os
import re
import shlex
import subprocess
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "performance.md")
SPEC = os.path.join(ROOT, "docs", "performance", "report.toml")
DATA = os.path.join(ROOT, "docs", "performance", "data")
PLOTS = os.path.join(ROOT, "docs", "performance")

TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}

# How a counter is written in a figure: (format of the value, unit). Unknown counters are written
# as "`name` value".
COUNTERS = {
    "bytes_per_second": ("{:.1f}", "GB/s", 1e-9),
    "items_per_second": ("{:.3g}", "G items/s", 1e-9),
    "frac_of_bound": ("{:.2f}", "of the bound", 1.0),
}


class SpecError(Exception):
    pass


def fail(msg):
    print(f"perf_report.py: {msg}", file=sys.stderr)
    sys.exit(2)


# ---- numbers ----------------------------------------------------------------------------------


def sig(v, digits=3):
    """v with `digits` significant digits, no exponent for the magnitudes the tables show."""
    if v == 0 or not math.isfinite(v):
        return str(v)
    mag = math.floor(math.log10(abs(v)))
    decimals = max(0, digits - 1 - mag)
    return f"{v:.{decimals}f}"


def fmt_ms(ms):
    if ms >= 1000:
        return f"{sig(ms / 1000)} s"
    if ms < 1:
        return f"{sig(ms * 1000)} µs"
    return f"{sig(ms)} ms"


# ---- Google Benchmark JSON ------------------------------------------------------------------


def load(name, cache):
    if name not in cache:
        path = os.path.join(DATA, name)
        if not os.path.exists(path):
            raise SpecError(f"{os.path.relpath(path, ROOT)} is missing (listed in report.toml)")
        with open(path) as f:
            cache[name] = json.load(f)
    return cache[name]


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def result(data, fname, pattern):
    """The row whose run_name matches `pattern` in full: its median aggregate when there is one,
    else the median of its repetitions. Exactly one run name must match."""
    rx = re.compile(pattern)
    rows = [r for r in data["benchmarks"] if rx.fullmatch(r.get("run_name", r["name"]))]
    names = sorted({r.get("run_name", r["name"]) for r in rows})
    if len(names) != 1:
        raise SpecError(f"{fname}: pattern {pattern!r} matches {len(names)} run names"
                        f"{': ' + ', '.join(names) if names else ''}; it must match one")
    for r in rows:
        if r.get("error_occurred"):
            raise SpecError(f"{fname}: {names[0]} failed: {r.get('error_message', '')}")
    med = [r for r in rows if r.get("run_type") == "aggregate" and r.get("aggregate_name") == "median"]
    if med:
        row = dict(med[0])
        row["_n"] = row.get("repetitions", 1)
        return row
    its = [r for r in rows if r.get("run_type", "iteration") == "iteration"]
    row = dict(its[0])
    for k, v in its[0].items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            row[k] = median([r[k] for r in its if k in r])
    row["_n"] = len(its)
    return row


def value(row, counter):
    if counter == "time":
        return row["real_time"] * TO_MS[row["time_unit"]]
    if counter not in row:
        raise SpecError(f"{row['run_name']} has no counter {counter!r}")
    return float(row[counter])


def show(row, counter):
    v = value(row, counter)
    if counter == "time":
        return fmt_ms(v)
    if counter in COUNTERS:
        f, unit, scale = COUNTERS[counter]
        return f"{f.format(v * scale)} {unit}"
    return f"`{counter}` {sig(v)}"


# ---- targets -----------------------------------------------------------------------------------


def target_text(t):
    if "text" in t:
        return t["text"]
    what = "time" if t["counter"] == "time" else f"`{t['counter']}`"
    if "min" in t:
        return f"{what} ≥ {t['min']:g}"
    return f"{what} ≤ {t['max']:g}"


def target_met(t, v):
    if "min" in t:
        return v >= t["min"]
    if "max" in t:
        return v <= t["max"]
    raise SpecError(f"target {t} has neither min nor max")


def scale_of(t):
    """Scale a target's values are written in: percent targets say so."""
    return 100.0 if t.get("percent") else 1.0


# ---- one area ----------------------------------------------------------------------------------


def evaluate(area, cache):
    """Every row of an area with its values and the status of its targets."""
    files = area["data"]
    out = []
    for spec in area["rows"]:
        fname = spec.get("file", files[0])
        if fname not in files:
            raise SpecError(f"area {area['name']}: row {spec['label']!r} reads {fname}, not in its data")
        row = result(load(fname, cache), fname, spec["name"])
        e = {"spec": spec, "row": row, "file": fname, "peer": None, "targets": []}
        if "peer" in spec:
            p = spec["peer"]
            pf = p.get("file", fname)
            prow = result(load(pf, cache), pf, p["name"])
            e["peer"] = {"spec": p, "row": prow, "ratio": value(prow, "time") / value(row, "time")}
        for t in spec.get("targets", []):
            if t.get("on") == "peer":
                if e["peer"] is None:
                    raise SpecError(f"row {spec['label']!r}: a peer target needs a peer")
                v = e["peer"]["ratio"]
            else:
                v = value(row, t["counter"]) * scale_of(t)
            e["targets"].append({"spec": t, "value": v, "met": target_met(t, v)})
        out.append(e)
    return out


def header(area, cache):
    """Date, commit and command of each JSON the area reads."""
    lines = []
    for fname in area["data"]:
        ctx = load(fname, cache).get("context", {})
        date = ctx.get("date", "")[:16].replace("T", " ")
        commit = ctx.get("commit", "not recorded")
        cmd = ctx.get("command", "not recorded")
        reps = sorted({r.get("repetitions", 1) for r in load(fname, cache)["benchmarks"]})
        rep = f", {reps[-1]} repetitions (medians)" if reps and reps[-1] > 1 else ""
        lines.append(f"[`{fname}`](performance/data/{fname}): {date}, commit {commit}, "
                     f"{ctx.get('num_cpus', '?')} CPUs{rep}:")
        lines.append("")
        lines.append("```sh")
        lines.append(cmd)
        lines.append("```")
        lines.append("")
    return lines


def figure(e):
    row, spec = e["row"], e["spec"]
    return ", ".join(show(row, c) for c in spec.get("show", ["time"]))


def peer_cell(e):
    p = e["peer"]
    if p is None:
        return "—"
    ps = p["spec"]
    cell = f"{ps['label']} {fmt_ms(value(p['row'], 'time'))}: {sig(p['ratio'])}× " + \
        ("faster" if p["ratio"] >= 1 else "slower") if ps.get("speed", True) else ps["label"]
    for t in e["targets"]:
        if t["spec"].get("on") == "peer":
            cell += f" (target {target_text(t['spec'])}: {'met' if t['met'] else '**not met**'})"
    return cell


def met_cell(e):
    own = [t for t in e["targets"] if t["spec"].get("on") != "peer"]
    if not own:
        return "—"
    if all(t["met"] for t in own):
        return "met"
    why = e["spec"].get("why_not")
    return "**not met**" + (f": {why}" if why else "")


def table(area, cache):
    es = evaluate(area, cache)
    lines = header(area, cache)
    lines.append("| measured | figure | target | met | peer |")
    lines.append("|---|---|---|---|---|")
    for e in es:
        own = [t for t in e["targets"] if t["spec"].get("on") != "peer"]
        tgt = "; ".join(target_text(t["spec"]) for t in own) or e["spec"].get("target_note", "none (reported)")
        lines.append(f"| {e['spec']['label']} | {figure(e)} | {tgt} | {met_cell(e)} | {peer_cell(e)} |")
    for plot in area.get("plots", []):
        lines.append("")
        lines.append(f"![{plot['title']}](performance/{plot['file']})")
    return lines, es


# ---- plots -------------------------------------------------------------------------------------


def draw(area, es, plot):
    """A bar per row that shows plot['counter'], the row's target as a tick over its bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counter = plot["counter"]
    picked = [e for e in es if counter in e["row"] or counter == "time"]
    if "rows" in plot:
        picked = [e for e in picked if re.search(plot["rows"], e["spec"]["label"])]
    labels = [re.sub(r"[`*]", "", e["spec"].get("short", e["spec"]["label"])) for e in picked]
    vals = [value(e["row"], counter) for e in picked]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.55 * len(picked) + 2), 3.6), dpi=100)
    colors = []
    for i, e in enumerate(picked):
        ts = [t for t in e["targets"] if t["spec"].get("counter") == counter]
        met = all(t["met"] for t in ts) if ts else None
        colors.append({True: "#4c9a2a", False: "#c0392b", None: "#7f8c8d"}[met])
        for t in ts:
            lim = t["spec"].get("min", t["spec"].get("max"))
            ax.plot([i - 0.4, i + 0.4], [lim, lim], color="black", linewidth=1.5)
    ax.bar(range(len(picked)), vals, color=colors)
    ax.set_xticks(range(len(picked)))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(plot.get("ylabel", counter))
    ax.set_title(plot["title"], fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    fig.text(0.99, 0.01, "green: target met, red: not met, black tick: target", ha="right",
             fontsize=7, color="#555555")
    fig.tight_layout()
    fig.savefig(os.path.join(PLOTS, plot["file"]), metadata={"Software": None})
    plt.close(fig)


# ---- the page ----------------------------------------------------------------------------------


def render(text, spec, cache, plots):
    for area in spec["areas"]:
        name = area["name"]
        begin, end = f"<!-- perf:begin {name} -->", f"<!-- perf:end {name} -->"
        i, j = text.find(begin), text.find(end)
        if i < 0 or j < i:
            raise SpecError(f"docs/performance.md has no '{begin}' … '{end}' block for area {name}")
        lines, es = table(area, cache)
        if plots:
            for plot in area.get("plots", []):
                draw(area, es, plot)
        text = text[: i + len(begin)] + "\n" + "\n".join(lines) + "\n" + text[j:]
    return text


def cmd_report(args):
    with open(args.spec, "rb") as f:
        spec = tomllib.load(f)
    with open(args.doc) as f:
        old = f.read()
    cache = {}
    try:
        new = render(old, spec, cache, plots=not (args.check or args.no_plots))
    except SpecError as e:
        fail(str(e))
    if args.check:
        missing = [p["file"] for a in spec["areas"] for p in a.get("plots", [])
                   if not os.path.exists(os.path.join(PLOTS, p["file"]))]
        if new != old or missing:
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                                       "docs/performance.md", "from the JSON"))
            for m in missing:
                print(f"missing plot docs/performance/{m}")
            print("docs/performance.md is out of date: run scripts/perf_report.py", file=sys.stderr)
            return 1
        print(f"docs/performance.md matches {len(cache)} JSON files")
        return 0
    if new != old:
        with open(args.doc, "w") as f:
            f.write(new)
    print("wrote docs/performance.md" + ("" if args.no_plots else " and its plots"))
    return 0


def cmd_stamp(args):
    """Adds the commit (with -dirty when the code measured has uncommitted changes) and the
    command line to a Google Benchmark JSON's context."""
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    git = ["git", "-C", ROOT]
    commit = subprocess.run(git + ["rev-parse", "--short=7", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(git + ["status", "--porcelain", "--", "include", "bench", "cmake", "CMakeLists.txt"],
                           capture_output=True, text=True).stdout.strip()
    with open(args.file) as f:
        data = json.load(f)
    ctx = data.setdefault("context", {})
    ctx["commit"] = (commit or "unknown") + ("-dirty" if dirty else "")
    ctx["command"] = shlex.join(cmd)
    with open(args.file, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    return 0


STANDARD = {"name", "run_name", "run_type", "repetitions", "repetition_index", "threads", "iterations",
            "real_time", "cpu_time", "time_unit", "bytes_per_second", "items_per_second", "family_index",
            "per_family_instance_index", "aggregate_name", "aggregate_unit", "error_occurred", "error_message",
            "label"}


def cmd_table(args):
    with open(args.file) as f:
        data = json.load(f)
    rows = data["benchmarks"]
    if any(r.get("run_type") == "aggregate" for r in rows):
        rows = [r for r in rows if r.get("aggregate_name") == "median"]
    if args.filter:
        rx = re.compile(args.filter)
        rows = [r for r in rows if rx.search(r["name"])]
    extra = []
    for r in rows:
        for k in r:
            if k not in STANDARD and k != "bw_frac" and k not in extra:
                extra.append(k)
    ctx = data.get("context", {})
    print(f"<!-- {ctx.get('date', '')} commit={ctx.get('commit', '')} cpus={ctx.get('num_cpus', '')} -->")
    head = ["benchmark", "time", "GB/s", "G items/s", "bw_frac"] + extra
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    g = lambda v: sig(v) if isinstance(v, float) else str(v)  # noqa: E731
    for r in rows:
        cells = [r["name"].replace("_median", ""), f"{r['real_time']:.4g} {r['time_unit']}",
                 g(r.get("bytes_per_second", 0) / 1e9), g(r.get("items_per_second", 0) / 1e9),
                 g(r.get("bw_frac", float("nan")))]
        cells += [g(r.get(k, "")) for k in extra]
        print("| " + " | ".join(cells) + " |")
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("stamp", "table"):
        ap = argparse.ArgumentParser(prog="perf_report.py " + sys.argv[1])
        ap.add_argument("file")
        if sys.argv[1] == "stamp":
            ap.add_argument("command", nargs=argparse.REMAINDER, help="-- the command that made FILE")
            return cmd_stamp(ap.parse_args(sys.argv[2:]))
        ap.add_argument("--filter")
        return cmd_table(ap.parse_args(sys.argv[2:]))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare, write nothing; exit 1 on a difference")
    ap.add_argument("--no-plots", action="store_true", help="rewrite the tables only")
    ap.add_argument("--doc", default=DOC)
    ap.add_argument("--spec", default=SPEC)
    return cmd_report(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
