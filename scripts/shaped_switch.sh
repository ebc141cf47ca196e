#!/usr/bin/env bash
# scripts/shaped_switch.sh [-n RANKS] [-s STEPS] [-c CHANGE_AT] [-f FROM] [-t TO] [-e ELEMENTS] [-m COMPUTE_MS] [-S STALENESS]
# (also: scripts/bench.sh shaped-switch [options]). The solver's controller on real shaped links:
# RANKS (default 2) ranks, STEPS (80) steps, of bench/netns/shaped_switch.cpp under scripts/netns.sh at FROM (1gbit);
# after rank 0's step CHANGE_AT (30) every link's tbf rate is changed live to TO (100mbit). Writes
# to OUT_DIR (build/bench/shaped_switch): run.jsonl (rank 0's per-step log), summary.json (the
# first step after the change whose monitor estimate is within 15% of TO, in steps and seconds;
# the controller's switches; the estimate before the change; medians of the step's parts),
# steps.tsv, and the plot PNG (default docs/solver_shaped_switch.png; gnuplot). Needs root.
# The ranks run at nice NICE (-10): the exchange times the monitor reads include any wait for a CPU.
# BUILD_DIR (build/release; configured here when missing) needs SLUICE_BUILD_BENCH=ON and ZeroMQ.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$SLUICE_ROOT"
ranks=2 steps=80 change_at=30 from=1gbit to=100mbit elements=4194304 compute_ms=200 staleness=0
while getopts "n:s:c:f:t:e:m:S:" opt; do
  case $opt in
    n) ranks=$OPTARG ;;
    s) steps=$OPTARG ;;
    c) change_at=$OPTARG ;;
    f) from=$OPTARG ;;
    t) to=$OPTARG ;;
    e) elements=$OPTARG ;;
    m) compute_ms=$OPTARG ;;
    S) staleness=$OPTARG ;;
    *) sed -n '2,10p' "$0"; exit 2 ;;
  esac
done
[[ $(id -u) == 0 ]] || { echo "shaped_switch.sh: needs root (ip netns, tc)" >&2; exit 2; }
build=${BUILD_DIR:-build/release}
out=${OUT_DIR:-build/bench/shaped_switch}
png=${PLOT:-docs/solver_shaped_switch.png}
command -v gnuplot >/dev/null || sluice_install plot
if [[ -f $build/CMakeCache.txt ]]; then
  cmake -B "$build" -DSLUICE_BUILD_BENCH=ON >/dev/null # scripts/test.sh configures without benchmarks
else
  sluice_install build core engines bench
  cmake --preset release -DSLUICE_BUILD_BENCH=ON >/dev/null
fi
cmake --build "$build" --target shaped_switch -j "$(sluice_jobs)"
mkdir -p "$out"
marker=$(mktemp -d)
prefix=slcsw$$
trap 'rm -rf "$marker"' EXIT

NETNS_LOG_DIR=$out NETNS_TIMEOUT=${NETNS_TIMEOUT:-900} scripts/netns.sh -n "$ranks" -r "$from" -p "$prefix" -- \
  nice -n "${NICE:--10}" "$build/bench/shaped_switch" "$steps" "$change_at" "$marker" "$elements" "$compute_ms" "$staleness" > "$out/run.jsonl" &
run=$!
while [[ ! -e $marker/reached ]] && kill -0 "$run" 2>/dev/null; do sleep 0.05; done
if [[ -e $marker/reached ]]; then
  (
    NETNS_SOURCE_ONLY=1 NETNS_PREFIX=$prefix NETNS_RANKS=$ranks
    source scripts/netns.sh
    netns_rerate "$to"
    echo "$(rate_bps "$to") $(date +%s.%N)" > "$marker/changed.tmp"
  )
  mv "$marker/changed.tmp" "$marker/changed"
  echo "shaped_switch.sh: links re-rated $from -> $to after step $(cat "$marker/reached")"
fi
wait "$run"

python3 - "$out" "$change_at" <<'PY'
import json, statistics, sys
out, change_at = sys.argv[1], int(sys.argv[2])
rows, switches, head, changed = [], [], {}, None
for line in open(f"{out}/run.jsonl"):
    line = line.strip()
    if not line.startswith("{"):
        continue
    d = json.loads(line)
    if "step" in d: rows.append(d)
    elif "switch" in d: switches.append(d)
    elif "changed" in d: changed = d
    elif "start" in d: head = d
med = lambda xs: statistics.median(xs) if xs else None
s = {"world": head.get("world"), "elements": head.get("elements"), "compute_ms": head.get("compute_ms"), "staleness": head.get("staleness"),
     "from_bps": head.get("shaped_bps"), "first_ratio": head.get("ratio")}
before = [r for r in rows if change_at - 10 < r["step"] <= change_at]
s["before"] = {"steps": [before[0]["step"], before[-1]["step"]] if before else None,
               "estimate_bps_median": med([r["estimate_bps"] for r in before]),
               "sample_bps_median": med([r["sample_bps"] for r in before]),
               "step_s_median": med([r["step_s"] for r in before]),
               "exchange_s_median": med([r["exchange_s"] for r in before]),
               "ratio": before[-1]["ratio"] if before else None}
s["parts_median"] = {k: med([r[k] for r in rows[2:]]) for k in ("compute_s", "encode_s", "apply_s")}
if changed:
    tc, to = changed["changed"], changed["shaped_bps"]
    s["to_bps"], s["changed_time"] = to, tc
    last = max((r["step"] for r in rows if r["time"] <= tc), default=-1)
    s["last_step_before_change"] = last
    after = [r for r in rows if r["step"] > last]
    hit = next((r for r in after if abs(r["estimate_bps"] / to - 1) <= 0.15), None)
    if hit:
        s["within_15pct"] = {"step": hit["step"], "steps_after_change": hit["step"] - last,
                             "seconds_after_change": round(hit["time"] - tc, 3), "estimate_bps": hit["estimate_bps"]}
        rest = [r for r in after if r["step"] >= hit["step"]]
        s["within_15pct"]["fraction_of_later_steps_within"] = round(
            sum(abs(r["estimate_bps"] / to - 1) <= 0.15 for r in rest) / len(rest), 3)
    tail = [r for r in after if r["step"] >= last + 21]  # from the 21st step after the change
    s["after"] = {"estimate_bps_median": med([r["estimate_bps"] for r in tail]),
                  "sample_bps_median": med([r["sample_bps"] for r in tail]),
                  "sample_bps_p90": sorted(r["sample_bps"] for r in tail)[int(0.9 * (len(tail) - 1))] if tail else None,
                  "steps_within_15pct": f'{sum(abs(r["estimate_bps"] / to - 1) <= 0.15 for r in tail)}/{len(tail)}',
                  "step_s_median": med([r["step_s"] for r in tail]),
                  "exchange_s_median": med([r["exchange_s"] for r in tail]),
                  "ratio": tail[-1]["ratio"] if tail else None}
    for w in switches:
        w["steps_after_change"] = w["decided_step"] - last
        hit_at = next((r["time"] for r in rows if r["step"] == w["effective_step"]), None)
        w["effective_seconds_after_change"] = round(hit_at - tc, 3) if hit_at else None
s["switches"] = switches
json.dump(s, open(f"{out}/summary.json", "w"), indent=1)
with open(f"{out}/steps.tsv", "w") as f:
    f.write("# step\tshaped_mbps\testimate_mbps\tsample_mbps\tratio\n")
    for r in rows:
        f.write(f'{r["step"]}\t{r["shaped_bps"]/1e6:.3f}\t{r["estimate_bps"]/1e6:.3f}\t{r["sample_bps"]/1e6:.3f}\t{r["ratio"]}\n')
print(json.dumps(s, indent=1))
PY

gnuplot <<GP
set terminal pngcairo size 1000,600 font "sans,11"
set output "$png"
set multiplot layout 2,1
set lmargin 12
set grid
set logscale y
set ylabel "Mbit/s"
set yrange [20:2000]
set key top right
set format x ""
plot "$out/steps.tsv" using 1:2 with steps lw 2 lc rgb "#1f77b4" title "tbf rate", \
     "$out/steps.tsv" using 1:4 with points pt 7 ps 0.5 lc rgb "#999999" title "exchange sample (sent bytes / time)", \
     "$out/steps.tsv" using 1:3 with lines lw 2 lc rgb "#ff7f0e" title "monitor estimate"
set xlabel "step"
set format x "%g"
set ylabel "top_k ratio"
set yrange [0.01:0.6]
plot "$out/steps.tsv" using 1:5 with steps lw 2 lc rgb "#2ca02c" title "ratio the step ran with"
unset multiplot
GP
echo "wrote $out/{run.jsonl,summary.json,steps.tsv} and $png"
