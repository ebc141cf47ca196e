#!/usr/bin/env bash
# scripts/pipeline_timeline.sh [BUILD_DIR] [OUT.png]
# Runs examples/pipeline_telemetry with staleness 0 and 1 (2 ranks, 40 ms of stand-in compute per
# step), and staleness 1 with the parameters and gradients in the pipeline's buffers, and plots
# rank 0's stage samples as a timeline: one row per thread (the trainer's waits and its copy of
# the parameters; the encode thread's reads and encodes; exchange; the apply thread's applies and
# compensated views), one panel per run. Needs gnuplot (Debian gnuplot-nox; installed when
# missing) and python3. Not run in CI.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$SLUICE_ROOT"
build=${1:-build/release}
out=${2:-docs/pipeline_timeline.png}
command -v gnuplot >/dev/null || sluice_install plot
cmake --build "$build" --target pipeline_telemetry -j "$(sluice_jobs)" >/dev/null
tmp=$(mktemp -d)
for run in 0:trainer 1:trainer 1:pipeline; do
  s=${run%%:*} homes=${run#*:}
  "$build/examples/pipeline_telemetry" "$tmp/s$s-$homes.jsonl" "$s" 40 6 "$homes"
  # One line per sample: start, end, row (0 trainer, 1 encode thread, 2 exchange, 3 apply thread), bucket.
  python3 - "$tmp/s$s-$homes.jsonl" > "$tmp/s$s-$homes.tsv" <<'PY'
import json, sys
rows = {"wait": 0, "publish": 0, "read": 1, "encode": 1, "exchange": 2, "apply": 3, "view": 3}
for line in open(sys.argv[1]):
    d = json.loads(line)
    if "stage" in d:
        print(f'{d["start"]*1e3:.3f}\t{(d["start"]+d["seconds"])*1e3:.3f}\t{rows[d["stage"]]}\t{d["bucket"]}')
PY
done
gnuplot <<GP
set terminal pngcairo size 1200,900 font "sans,11"
set output "$out"
set multiplot layout 3,1
set ytics ("trainer (waits, copy)" 0, "read + encode" 1, "exchange" 2, "apply (+ view)" 3)
set yrange [-0.6:3.6]
set grid x
set xlabel "ms since attach (rank 0; 40 ms of compute per step)"
set style fill solid 0.8
set title "staleness 0: the trainer waits for each step's exchange and update"
plot "$tmp/s0-trainer.tsv" using ((\$1+\$2)/2):3:((\$2-\$1)/2):(0.35):3 with boxxyerror lc variable notitle
set title "staleness 1: exchange and update of step t run while the trainer computes step t + 1"
plot "$tmp/s1-trainer.tsv" using ((\$1+\$2)/2):3:((\$2-\$1)/2):(0.35):3 with boxxyerror lc variable notitle
set title "staleness 1, parameters and gradients in the pipeline's buffers: no copy on the trainer's row, no reads"
plot "$tmp/s1-pipeline.tsv" using ((\$1+\$2)/2):3:((\$2-\$1)/2):(0.35):3 with boxxyerror lc variable notitle
unset multiplot
GP
rm -rf "$tmp"
echo "wrote $out"
