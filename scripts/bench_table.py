#!/usr/bin/env python3
"""Turns a Google Benchmark JSON file into a markdown table for docs/performance.md.

Usage: scripts/bench_table.py build/bench/AREA.json [--filter REGEX]
Columns: name, real time, GB/s, G items/s, bw_frac, and every other user counter present.
With repetitions, only the median aggregate rows are shown.
"""
import json
import re
import sys

STANDARD = {"name", "run_name", "run_type", "repetitions", "repetition_index", "threads", "iterations",
            "real_time", "cpu_time", "time_unit", "bytes_per_second", "items_per_second", "family_index",
            "per_family_instance_index", "aggregate_name", "aggregate_unit", "error_occurred", "error_message",
            "label"}


def fmt(v):
    if isinstance(v, float):
        if v == 0 or 1e-3 <= abs(v) < 1e6:
            return f"{v:.3g}" if abs(v) < 10 else f"{v:.4g}"
        return f"{v:.3e}"
    return str(v)


def main():
    path = sys.argv[1]
    filt = None
    if "--filter" in sys.argv:
        filt = re.compile(sys.argv[sys.argv.index("--filter") + 1])
    data = json.load(open(path))
    rows = data["benchmarks"]
    if any(r.get("run_type") == "aggregate" for r in rows):
        rows = [r for r in rows if r.get("aggregate_name") == "median"]
    if filt:
        rows = [r for r in rows if filt.search(r["name"])]
    extra = []
    for r in rows:
        for k in r:
            if k not in STANDARD and k != "bw_frac" and k not in extra:
                extra.append(k)
    ctx = data.get("context", {})
    print(f"<!-- {ctx.get('date', '')} host={ctx.get('host_name', '')} cpus={ctx.get('num_cpus', '')} "
          f"-->")
    head = ["benchmark", "time", "GB/s", "G items/s", "bw_frac"] + extra
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        cells = [r["name"].replace("_median", ""), f"{r['real_time']:.4g} {r['time_unit']}",
                 fmt(r.get("bytes_per_second", 0) / 1e9), fmt(r.get("items_per_second", 0) / 1e9),
                 fmt(r.get("bw_frac", float("nan")))]
        cells += [fmt(r.get(k, "")) for k in extra]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
