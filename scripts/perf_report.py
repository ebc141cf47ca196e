#!/usr/bin/env python3
"""Generates the at-a-glance tables of docs/performance.md from the benchmarks' JSON.

  scripts/perf_report.py [--check] [--no-plots]   rewrite (or, with --check, compare) the tables
                                                  between <!-- perf:begin AREA --> and
                                                  <!-- perf:end AREA --> and the plots
  scripts/perf_report.py commit                   HEAD's short hash (-dirty: code changed)
  scripts/perf_report.py stamp FILE [--commit C] -- CMD...
                                                  record the commit and the command in FILE's
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
import datetime
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

# How a counter is written in a figure: (format of the scaled value, unit, scale). Unknown
# counters are written as "`name` value".
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
        return med[0]
    its = [r for r in rows if r.get("run_type", "iteration") == "iteration"]
    row = dict(its[0])
    for k, v in its[0].items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            row[k] = median([r[k] for r in its if k in r])
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
        e = {"spec": spec, "row": row, "file": fname, "peers": [], "targets": []}
        for p in spec.get("peers", []):
            pf = p.get("file", fname)
            if pf not in files:
                raise SpecError(f"area {area['name']}: peer {p['label']!r} reads {pf}, not in its data")
            prow = result(load(pf, cache), pf, p["name"])
            e["peers"].append({"spec": p, "row": prow, "ratio": value(prow, "time") / value(row, "time")})
        for t in spec.get("targets", []):
            if t.get("on") == "peer":
                if not e["peers"]:
                    raise SpecError(f"row {spec['label']!r}: a peer target needs a peer")
                v = e["peers"][0]["ratio"]  # the first peer is the one the target names
            else:
                v = value(row, t["counter"])
            e["targets"].append({"spec": t, "value": v, "met": target_met(t, v)})
        out.append(e)
    return out


def utc(date):
    """Google Benchmark's local ISO date as 'YYYY-MM-DD HH:MM' UTC."""
    try:
        d = datetime.datetime.fromisoformat(date)
    except ValueError:
        return date or "undated"
    if d.tzinfo is not None:
        d = d.astimezone(datetime.timezone.utc)
    return d.strftime("%Y-%m-%d %H:%M")


def header(area, cache):
    """Date, commit, load and command of the area's JSON files; files of one command share a
    heading."""
    groups = {}
    for fname in area["data"]:
        ctx = load(fname, cache).get("context", {})
        key = (ctx.get("commit", "not recorded"), ctx.get("command", "not recorded"))
        groups.setdefault(key, []).append((fname, ctx))
    lines = []
    for (commit, cmd), members in groups.items():
        links = ", ".join(f"[`{f}`](performance/data/{f})" for f, _ in members)
        dates = sorted(utc(c.get("date", "")) for _, c in members)
        when = dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1][11:]}"
        loads = [(c.get("load_avg") or [float("nan")])[0] for _, c in members]
        busy = f"{loads[0]:.1f}" if len(loads) == 1 else f"{min(loads):.1f}–{max(loads):.1f}"
        reps = max(r.get("repetitions", 1) for f, _ in members for r in cache[f]["benchmarks"])
        rep = f", medians of {reps} repetitions" if reps > 1 else ""
        cpus = members[0][1].get("num_cpus", 0)
        loaded = f" (**loaded**: other jobs shared the {cpus} CPUs, figures fall below a quiet run's)" \
            if cpus and max(loads) > cpus else ""
        lines += [f"{links}: {when} UTC, commit {commit}, {cpus} CPUs, load average {busy}{loaded}{rep}:", "",
                  "```sh", cmd, "```", ""]
    return lines


def figure(e):
    row, spec = e["row"], e["spec"]
    return ", ".join(show(row, c) for c in spec.get("show", ["time"]))


def peer_cell(e):
    """Each peer's time and the row's speedup over it (peer time ÷ row time)."""
    if not e["peers"]:
        return "—"
    cells = []
    for p in e["peers"]:
        cells.append(f"{p['spec']['label']} {fmt_ms(value(p['row'], 'time'))}: speedup {sig(p['ratio'])}×")
    return "; ".join(cells)


def target_cell(e):
    return "; ".join(target_text(t["spec"]) for t in e["targets"]) or "none (reported)"


def met_cell(e):
    """met, or which target is not met and, for a target on the row's own figure, why."""
    if not e["targets"]:
        return "—"
    missed = [t for t in e["targets"] if not t["met"]]
    if not missed:
        return "met"
    cell = "**not met**"
    if len(e["targets"]) > 1:
        cell += " (" + "; ".join(target_text(t["spec"]) for t in missed) + ")"
    why = e["spec"].get("why_not")
    if why and any(t["spec"].get("on") != "peer" for t in missed):
        cell += f": {why}"
    return cell


def table(area, cache):
    es = evaluate(area, cache)
    lines = header(area, cache)
    lines.append("| measured | figure | target | met | peer |")
    lines.append("|---|---|---|---|---|")
    for e in es:
        lines.append(f"| {e['spec']['label']} | {figure(e)} | {target_cell(e)} | {met_cell(e)} | {peer_cell(e)} |")
    for plot in area.get("plots", []):
        lines.append("")
        lines.append(f"![{plot['title']}](performance/{plot['file']})")
    return lines, es


# ---- plots -------------------------------------------------------------------------------------


def draw(area, es, plot, cache):
    """A bar per row that shows plot['counter'], the row's target as a tick over its bar."""
    try:
        import matplotlib
    except ImportError:
        fail("writing the plots needs matplotlib (apt-get install python3-matplotlib, the `plot` group "
             "of scripts/packages.txt); --no-plots rewrites the tables only")
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
    ctx = cache[area["data"][0]].get("context", {})
    ax.set_title(f"{plot['title']}\n{utc(ctx.get('date', ''))} UTC, commit {ctx.get('commit', 'not recorded')}",
                 fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    fig.text(0.99, 0.01, "green: target met, red: not met, black tick: the target, grey: no target on this figure", ha="right",
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
                draw(area, es, plot, cache)
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
    print(f"wrote {os.path.relpath(args.doc)}" + ("" if args.no_plots else " and its plots"))
    return 0


def head_commit():
    """HEAD's short hash, with -dirty when the code a benchmark measures has uncommitted changes."""
    git = ["git", "-C", ROOT]
    commit = subprocess.run(git + ["rev-parse", "--short=7", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(git + ["status", "--porcelain", "--", "include", "bench", "cmake", "CMakeLists.txt"],
                           capture_output=True, text=True).stdout.strip()
    return (commit or "unknown") + ("-dirty" if dirty else "")


def cmd_stamp(args):
    """Adds the commit (--commit, taken when the benchmark was built; default: HEAD now) and the
    command line to a Google Benchmark JSON's context."""
    with open(args.file) as f:
        data = json.load(f)
    ctx = data.setdefault("context", {})
    ctx["commit"] = args.commit or head_commit()
    ctx["command"] = shlex.join(args.command)
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
    if len(sys.argv) > 1 and sys.argv[1] == "commit":
        print(head_commit())
        return 0
    if len(sys.argv) > 1 and sys.argv[1] in ("stamp", "table"):
        ap = argparse.ArgumentParser(prog="perf_report.py " + sys.argv[1])
        ap.add_argument("file")
        if sys.argv[1] == "stamp":
            ap.add_argument("--commit", help="the commit the benchmark was built from (default: HEAD now)")
            rest = sys.argv[2:]
            cut = rest.index("--") if "--" in rest else len(rest)
            args = ap.parse_args(rest[:cut])
            args.command = rest[cut + 1:]
            if not args.command:
                ap.error("the command that made FILE goes after --")
            return cmd_stamp(args)
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
