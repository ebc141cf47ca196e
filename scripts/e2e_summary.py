#!/usr/bin/env python3
"""Summary of scripts/bench-e2e.sh: reads the example's JSON per run and writes the summary JSON,
a markdown table and a gnuplot script (accuracy against training time, one panel per link rate).

  e2e_summary.py RUN_DIR SUMMARY.json SUMMARY.md PLOT.png TARGET EPOCHS COMMIT "RATES" "CONFIGS"
"""
import json
import os
import sys
import time

run_dir, summary_json, summary_md, plot_png, target, epochs, commit, rates, configs = sys.argv[1:10]
target, epochs = float(target), int(epochs)
rates, configs = rates.split(), configs.split()
LABELS = {
    "mpi_dense": "dense fp32, MPI_Allreduce",
    "ring_dense": "dense fp32, ring (ZeroMQ)",
    "block_top_k": "block_top_k 1 % + residual",
    "top_k": "top_k 1 % + residual",
    "maxmin4": "maxmin_quantize 4 bit + residual",
    "ddp": "PyTorch DDP (gloo, fp32)",
    "ddp_fp16": "PyTorch DDP + fp16_compress_hook",
    "ddp_powersgd": "PyTorch DDP + PowerSGD rank 1",
}
COLORS = {"mpi_dense": "#d62728", "ring_dense": "#ff7f0e", "block_top_k": "#1f77b4", "top_k": "#2ca02c",
          "maxmin4": "#9467bd", "ddp": "#000000", "ddp_fp16": "#7f7f7f", "ddp_powersgd": "#8c564b"}
# The baselines each configuration is compared with (those of them that ran), and sluice's own
# configurations (the best of which is set against DDP as it comes).
BASES = ("mpi_dense", "ring_dense", "ddp")
SLUICE = ("block_top_k", "top_k", "maxmin4", "ring_dense")
# A configuration name + "_sgd" (e.g. top_k_sgd, ddp_sgd) is the same run with SGD momentum 0.9
# instead of Adam (scripts/bench-e2e.sh).
SGD_COLORS = {"top_k": "#17becf", "block_top_k": "#bcbd22", "ddp": "#e377c2"}


def base(c):
    return c[:-len("_sgd")] if c.endswith("_sgd") else c


def label(c):
    return LABELS[base(c)] + (", SGD momentum 0.9" if c.endswith("_sgd") else "")


def color(c):
    return SGD_COLORS.get(base(c), "#333333") if c.endswith("_sgd") else COLORS[c]


def how(c):
    if c == "mpi_dense":
        return "mpirun -np 4, TCP on loopback"
    if c.startswith("ddp"):
        return "4 processes, gloo over loopback"
    return "4 threads, local transport"


def load(name):
    path = os.path.join(run_dir, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def first_at_target(run):
    """(step, seconds, epoch) of the first evaluation reaching the target, or None."""
    for p in run["curve"]:
        if p["accuracy"] >= target:
            return p["step"], p["seconds"], p["epoch"]
    return None


def fmt_s(x):
    return "—" if x is None else f"{x:.1f} s"


def fmt_x(x):
    return "—" if x is None else f"{x:.2f}×"


summary = {"date": time.strftime("%Y-%m-%d"), "commit": commit, "target_accuracy": target, "epochs": epochs,
           "workers": 4, "no_link": {}, "rates": {}, "best_vs_ddp": {}}

# 1. No link: final accuracy after the same epochs, steps to the target, the floor compute sets.
nolink = {c: load(c + "-nolink") for c in configs}
dense_final = {c: nolink[c]["accuracy"] for c in ("ring_dense", "mpi_dense") if nolink.get(c)}
for c, run in nolink.items():
    if run is None:
        continue
    hit = first_at_target(run)
    summary["no_link"][c] = {
        "how": how(c),
        "final_accuracy": run["accuracy"], "best_accuracy": max(p["accuracy"] for p in run["curve"]),
        "epochs": run["epochs"], "steps": run["steps"],
        "step_seconds": run["train_seconds"] / run["steps"],
        "steps_to_target": hit[0] if hit else None, "epoch_to_target": hit[2] if hit else None,
        "time_to_target": hit[1] if hit else None,
        "points_vs_ring_dense": None if "ring_dense" not in dense_final else
        round(100 * (run["accuracy"] - dense_final["ring_dense"]), 2),
        "points_vs_mpi_dense": None if "mpi_dense" not in dense_final else
        round(100 * (run["accuracy"] - dense_final["mpi_dense"]), 2),
        "epoch_accuracy": [p["accuracy"] for p in run["curve"] if p["step"] % (run["steps"] // run["epochs"]) == 0],
        "sent_bytes_per_step": run["sent_bytes"] / run["steps"],
    }

# 2. Shaped links: measured, or projected (shaped step time x steps to the target without a link).
curves = {}
for rate in rates:
    rows = {}
    for c in configs:
        run, proj = load(f"{c}-{rate}"), load(f"{c}-{rate}-steptime")
        nl = summary["no_link"].get(c)
        if run is not None:
            hit = first_at_target(run)
            rows[c] = {"projected": False, "time_to_target": run["time_to_target"] if run["time_to_target"] >= 0
                       else None, "steps": hit[0] if hit else None,
                       "step_seconds": run["train_seconds"] / run["steps"],
                       "sent_bytes": run["sent_bytes"] if hit else None}
            curves[(rate, c)] = ([(p["seconds"], p["accuracy"]) for p in run["curve"]], False)
            if proj is not None and nl is not None and nl["steps_to_target"]:
                rows[c]["projected_time_to_target"] = proj["train_seconds"] / proj["steps"] * nl["steps_to_target"]
        elif proj is not None and nl is not None and nl["steps_to_target"]:
            st = proj["train_seconds"] / proj["steps"]
            n = nl["steps_to_target"]
            rows[c] = {"projected": True, "time_to_target": st * n, "steps": n, "step_seconds": st,
                       "steps_timed": proj["steps"], "sent_bytes": proj["sent_bytes"] / proj["steps"] * n}
            curves[(rate, c)] = ([(p["step"] * st, p["accuracy"]) for p in nolink[c]["curve"] if p["step"] <= n], True)
    for c, r in rows.items():
        t = r["time_to_target"]
        for bc in BASES:
            b = rows.get(bc, {}).get("time_to_target")
            r[f"speedup_vs_{bc}"] = b / t if (b and t) else None
            # The most this configuration could gain: the baseline's time over the floor compute sets.
            floor = summary["no_link"].get(c, {}).get("time_to_target")
            r[f"bound_vs_{bc}"] = b / floor if (b and floor) else None
    summary["rates"][rate] = rows
    # sluice's best configuration at this rate against DDP as it comes.
    timed = [(r["time_to_target"], c) for c, r in rows.items() if base(c) in SLUICE and r["time_to_target"]]
    d = rows.get("ddp", {}).get("time_to_target")
    if timed and d:
        t, c = min(timed)
        summary["best_vs_ddp"][rate] = {"config": c, "time_to_target": t, "ddp_time_to_target": d,
                                        "projected": rows[c]["projected"] or rows["ddp"]["projected"],
                                        "factor": d / t}
for c in configs:
    if nolink.get(c) and c != "mpi_dense" and not c.startswith("ddp"):
        curves[("no link", c)] = ([(p["seconds"], p["accuracy"]) for p in nolink[c]["curve"]], False)

with open(summary_json, "w") as f:
    json.dump(summary, f, indent=1)

# Markdown.
md = []
md.append(f"Target {target}, {epochs} epochs at most; {summary['date']}, commit {commit}.\n")
# The factor columns of the baselines that ran: block_top_k against MPI_Allreduce, sluice's best against DDP.
has_mpi, has_ddp = "mpi_dense" in configs, "ddp" in configs
extra = " |" + " |" * (2 * has_mpi + has_ddp)
md.append("| link per worker | " + " | ".join(label(c) for c in configs) + " |" +
          (" block_top_k vs MPI_Allreduce | (bound: MPI_Allreduce ÷ block_top_k floor) |" if has_mpi else "") +
          (" best sluice vs DDP |" if has_ddp else ""))
md.append("|---" * (len(configs) + 1 + 2 * has_mpi + has_ddp) + "|")
for rate in rates:
    rows = summary["rates"][rate]
    cells = []
    for c in configs:
        r = rows.get(c)
        cell = "—" if r is None else fmt_s(r["time_to_target"]) + (" (projected)" if r["projected"] else "")
        if r is not None and "projected_time_to_target" in r:
            cell += f" (projected {fmt_s(r['projected_time_to_target'])})"
        cells.append(cell)
    b = rows.get("block_top_k", {})
    best = summary["best_vs_ddp"].get(rate)
    md.append(f"| {rate} | " + " | ".join(cells) + " |" +
              (f" **{fmt_x(b.get('speedup_vs_mpi_dense'))}** | {fmt_x(b.get('bound_vs_mpi_dense'))} |" if has_mpi
               else "") +
              ((f" **{fmt_x(best['factor'])}** ({best['config']}) |" if best else " — |") if has_ddp else ""))
cells = [fmt_s(summary["no_link"].get(c, {}).get("time_to_target")) for c in configs]
md.append("| no link (floor) | " + " | ".join(cells) + extra)
cells = [str(summary["no_link"].get(c, {}).get("steps_to_target") or "—") for c in configs]
md.append("| steps to target | " + " | ".join(cells) + extra)
cells = ["—" if c not in summary["no_link"] else f"{summary['no_link'][c]['step_seconds'] * 1e3:.1f} ms"
         for c in configs]
md.append("| no-link step time | " + " | ".join(cells) + extra)
cells = []
for c in configs:
    times = [summary["rates"][rate].get(c, {}).get("step_seconds") for rate in rates]
    cells.append(" / ".join("—" if t is None else f"{t * 1e3:.1f}" for t in times) + " ms")
md.append(f"| step time at {' / '.join(rates)} | " + " | ".join(cells) + extra)
md.append("")
md.append("| speed-up of each configuration | " + " | ".join(rates) + " |")
md.append("|---" * (len(rates) + 1) + "|")
for c in configs:
    for b in BASES:
        if c == b or b not in configs or (c == "mpi_dense" and b == "ring_dense"):
            continue
        cells = []
        for rate in rates:
            r = summary["rates"][rate].get(c, {})
            cells.append(f"{fmt_x(r.get(f'speedup_vs_{b}'))} (bound {fmt_x(r.get(f'bound_vs_{b}'))})")
        md.append(f"| {label(c)} vs {label(b)} | " + " | ".join(cells) + " |")
md.append("")
md.append(f"| configuration (no link) | accuracy after {epochs} epochs | best | first epoch ≥ {target} | "
          "vs ring dense | vs MPI dense |")
md.append("|---|---|---|---|---|---|")
for c in configs:
    n = summary["no_link"].get(c)
    if n is None:
        continue
    md.append(f"| {label(c)} ({n['how']}) | {n['final_accuracy']:.4f} | {n['best_accuracy']:.4f} | "
              f"{n['epoch_to_target'] or '—'} | "
              f"{'—' if n['points_vs_ring_dense'] is None else format(n['points_vs_ring_dense'], '+.2f')} | "
              f"{'—' if n['points_vs_mpi_dense'] is None else format(n['points_vs_mpi_dense'], '+.2f')} |")
md.append("")
md.append("| configuration | " + " | ".join(str(i + 1) for i in range(epochs)) + " |")
md.append("|---" * (epochs + 1) + "|")
for c in configs:
    n = summary["no_link"].get(c)
    if n is not None:
        md.append(f"| {label(c)} | " + " | ".join(f"{a:.4f}" for a in n["epoch_accuracy"]) + " |")
with open(summary_md, "w") as f:
    f.write("\n".join(md) + "\n")

# Gnuplot: one panel per link rate (and no link), one curve per configuration; projected dashed.
# The "no link" panel only when its runs exist (scripts/demo.sh runs the shaped phase alone).
panels = list(rates) + (["no link"] if any(k[0] == "no link" for k in curves) else [])
cols = min(2, len(panels))
gp = [f'set terminal pngcairo size {700 * cols},{450 * ((len(panels) + 1) // 2)} font "sans,10"',
      f'set output "{plot_png}"', f"set multiplot layout {(len(panels) + 1) // 2},{cols}",
      "set termoption noenhanced", "set grid", "set key bottom right", 'set xlabel "training time (s, evaluations excluded)"',
      'set ylabel "test accuracy"', f"set yrange [0.80:{max(0.90, target + 0.01)}]", "set xrange [0:*]"]
for i, panel in enumerate(panels):
    plots = []
    for c in configs:
        if (panel, c) not in curves:
            continue
        pts, proj = curves[(panel, c)]
        tsv = os.path.join(run_dir, f"plot-{panel.replace(' ', '_')}-{c}.tsv")
        with open(tsv, "w") as f:
            f.write("0\t0\n" if not pts else "")
            for s, a in pts:
                f.write(f"{s:.3f}\t{a:.4f}\n")
        title = label(c) + (" (projected)" if proj else "")
        plots.append(f'"{tsv}" using 1:2 with linespoints lw 2 pt 7 ps 0.5 dt {2 if proj else 1} '
                     f'lc rgb "{color(c)}" title "{title}"')
    plots.append(f'{target} with lines lw 1.5 lc rgb "black" dt 3 title "target {target}"')
    gp.append(f'set title "{panel}: 4 workers, time to {target} test accuracy"'
              if panel != "no link" else f'set title "no link (4 threads, local transport): the compute floor"')
    gp.append("plot " + ", \\\n     ".join(plots))
gp.append("unset multiplot")
with open(os.path.join(run_dir, "plot.gp"), "w") as f:
    f.write("\n".join(gp) + "\n")
