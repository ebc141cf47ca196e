#!/usr/bin/env bash
# scripts/bench.sh AREA [google-benchmark args...]
# Builds Release and runs bench_AREA (AREA: core, compress, feedback, optim, collective, solver,
# cuda, ...), writing JSON to build/bench/AREA.json and a markdown table to build/bench/AREA.md.
# The JSON's context records the commit and this command line (scripts/perf_report.py stamp), so
# that docs/performance.md, generated from copies in docs/performance/data/, can name both.
# AREA e2e is scripts/bench-e2e.sh (Fashion-MNIST time to accuracy over shaped links; root).
# AREA cuda needs nvcc and a GPU and skips (exit 0) without them.
# AREA shaped-switch runs scripts/shaped_switch.sh (the controller on tbf-shaped links; root).
# Installs benchmark-only peers (libtorch-dev for torch baselines) when missing.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$SLUICE_ROOT"
if [ $# -lt 1 ]; then
  echo "usage: scripts/bench.sh AREA [google-benchmark args]" >&2
  exit 2
fi
area=$1
shift
if [[ $area == shaped-switch ]]; then exec "$SLUICE_ROOT/scripts/shaped_switch.sh" "$@"; fi
if [[ $area == e2e ]]; then exec "$SLUICE_ROOT/scripts/bench-e2e.sh" "$@"; fi
if [[ $area == cuda ]] && ! { { command -v nvcc || [ -x /usr/local/cuda/bin/nvcc ]; } && nvidia-smi -L; } >/dev/null 2>&1; then
  echo "bench.sh cuda: SKIPPED: needs nvcc and a visible GPU (scripts/gpu-check.sh runs it on a GPU host)"
  exit 0
fi
sluice_install build core engines test bench torch
commit=$(python3 scripts/perf_report.py commit)  # before the build: the code the JSON measures
# The default CUDA architectures (sm_80 + sm_90), whatever scripts/test.sh left in the cache.
cmake --preset release -DSLUICE_BUILD_BENCH=ON -UCMAKE_CUDA_ARCHITECTURES >/dev/null
cmake --build --preset release -j "$(sluice_jobs)" --target "bench_$area"
mkdir -p build/bench
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
export OMP_PROC_BIND=${OMP_PROC_BIND:-close}
"./build/release/bench/bench_$area" --benchmark_out="build/bench/$area.json" --benchmark_out_format=json "$@"
python3 scripts/perf_report.py stamp "build/bench/$area.json" --commit "$commit" -- scripts/bench.sh "$area" "$@"
python3 scripts/perf_report.py table "build/bench/$area.json" > "build/bench/$area.md"
echo "wrote build/bench/$area.json and build/bench/$area.md"
if [ "$area" = solver ]; then echo "trace: build/bench/solver_trace.{json,tsv}; plot it with scripts/plot_solver.sh"; fi
