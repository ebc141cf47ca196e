#!/usr/bin/env bash
# scripts/plot_solver.sh [TRACE.tsv] [OUT.png]
# Plots the trace replay of `scripts/bench.sh solver` (build/bench/solver_trace.tsv): the link's
# bandwidth, the monitor's estimate and the density of the codec the controller chose, over time.
# Needs gnuplot (Debian gnuplot-nox); installs it when missing. Not run in CI.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$SLUICE_ROOT"
in=${1:-build/bench/solver_trace.tsv}
out=${2:-docs/solver_trace.png}
command -v gnuplot >/dev/null || sluice_install plot
gnuplot <<GP
set terminal pngcairo size 1100,650 font "sans,11"
set output "$out"
set multiplot layout 2,1
set lmargin 12
set xrange [0:*]
set grid
set logscale y
set ylabel "Mbit/s"
set yrange [30:2000]
set key top right
set format x ""
plot "$in" using (\$1/60):2 with steps lw 2 lc rgb "#1f77b4" title "link bandwidth", \
     "$in" using (\$1/60):3 with lines lw 1 lc rgb "#ff7f0e" title "monitor estimate"
set xlabel "minutes"
set format x "%g"
set ylabel "codec density"
set yrange [0.0005:1.5]
plot "$in" using (\$1/60):4 with steps lw 2 lc rgb "#2ca02c" title "density chosen (ratio, bits/32)"
unset multiplot
GP
echo "wrote $out"
