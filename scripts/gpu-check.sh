#!/usr/bin/env bash
# scripts/gpu-check.sh [--build-only] [BUILD_DIR]
# One command on a GPU host: builds the CUDA tests and benchmarks for the local GPU, runs the
# `gpu` tests (and the CPU-side CUDA tests), runs bench_cuda, and prints a summary of the figures
# against the targets of docs/cuda.md. Where the host allows network namespaces (root), it also
# runs the 4-rank collective benchmark at 1 Gbit/s (scripts/bench-collective.sh).
#
# Without nvcc or without a visible GPU it prints why and exits 0 (nothing to check);
# --build-only builds anyway (to debug the script on a machine without a GPU) and stops there.
#
# Environment: CUDA_ARCH (default: native when a GPU is visible, else "80-real;90"),
#   GPU_CHECK_COLLECTIVE=0 to skip the collective run, STRICT=1 to exit 3 when a target is missed.
# Outputs under BUILD_DIR (default build/gpu): gpu-check/bench_cuda.json, gpu-check/summary.md,
#   bench/collective-1gbit-zmq.json when the collective run happened.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$SLUICE_ROOT"

build_only=0
if [[ ${1:-} == --build-only ]]; then
  build_only=1
  shift
fi
build=${1:-build/gpu}
out="$build/gpu-check"
start=$(date +%s)
say() { echo "gpu-check: $*"; }

nvcc_bin=$(command -v nvcc || true)
[[ -z $nvcc_bin && -x /usr/local/cuda/bin/nvcc ]] && nvcc_bin=/usr/local/cuda/bin/nvcc
if [[ -z $nvcc_bin ]]; then
  say "SKIPPED: nvcc not found (install the CUDA Toolkit; /usr/local/cuda/bin/nvcc or on PATH)"
  exit 0
fi
PATH="$(dirname "$nvcc_bin"):$PATH"
export PATH

have_gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then have_gpu=1; fi
if [[ $have_gpu == 0 && $build_only == 0 ]]; then
  say "SKIPPED: no GPU visible (nvidia-smi -L failed); run with --build-only to build without one"
  exit 0
fi
[[ $have_gpu == 1 ]] && say "GPU: $(nvidia-smi -L | head -1)"

arch=${CUDA_ARCH:-}
if [[ -z $arch ]]; then
  if [[ $have_gpu == 1 ]]; then arch=native; else arch="80-real;90"; fi
fi

# --- build: only the CUDA targets, for this GPU ----------------------------------------------
targets=(test_cuda_gpu bench_cuda test_cuda_functors)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSLUICE_WERROR=ON -DSLUICE_BUILD_BENCH=ON \
  -DSLUICE_BUILD_EXAMPLES=OFF -DSLUICE_VERIFY_HEADERS=OFF -DSLUICE_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; say "FAILED: configure"; exit 1; }
grep -q "nvcc=ON" "$build.configure.log" || { say "FAILED: CMake did not enable CUDA (see $build.configure.log)"; exit 1; }
# NCCL found: the one-rank nccl_transport checks (frame gather; test_cuda_gpu then also runs
# cuda::allreduce over NCCL).
grep -q "NCCL=ON" "$build.configure.log" && targets+=(test_transport_nccl)
collective=0
if [[ ${GPU_CHECK_COLLECTIVE:-1} != 0 && $(id -u) == 0 ]] && grep -q "ZeroMQ=ON" "$build.configure.log" &&
  ip netns add "slgc$$" 2>/dev/null; then
  ip netns del "slgc$$"
  collective=1
  targets+=(bench_collective)
fi
t0=$(date +%s)
cmake --build "$build" -j "$(sluice_jobs)" --target "${targets[@]}"
say "built ${targets[*]} in $(($(date +%s) - t0)) s (CUDA architectures: $arch)"
if [[ $build_only == 1 ]]; then
  say "build only: done (no GPU run)"
  exit 0
fi

# --- tests -----------------------------------------------------------------------------------
mkdir -p "$out"
tests_ok=1
ctest --test-dir "$build" -R '^test_cuda_(gpu|functors)|^test_transport_nccl$' --output-on-failure --timeout 300 |
  tee "$out/ctest.log" || tests_ok=0
grep -q "tests passed, 0 tests failed" "$out/ctest.log" || tests_ok=0
grep -q "(Skipped)" "$out/ctest.log" && { say "FAILED: test_cuda_gpu skipped on a GPU host"; tests_ok=0; }

# --- benchmarks ------------------------------------------------------------------------------
"$build/bench/cuda/bench_cuda" --benchmark_out="$out/bench_cuda.json" --benchmark_out_format=json \
  --benchmark_min_time=0.3 | tee "$out/bench_cuda.log"

if [[ $collective == 1 ]]; then
  say "collective: 4 ranks at 1 Gbit/s in network namespaces"
  RATES=1gbit SKIP_MPI=1 timeout 120 scripts/bench-collective.sh "$build" >"$out/collective.log" 2>&1 ||
    say "collective run failed or timed out (see $out/collective.log)"
else
  say "collective: skipped (needs root, network namespaces and ZeroMQ; GPU_CHECK_COLLECTIVE=0 disables)"
fi

# --- summary ---------------------------------------------------------------------------------
set +e
python3 - "$out/bench_cuda.json" "$out/summary.md" <<'EOF'
import json, sys
data = json.load(open(sys.argv[1]))
dev = data.get("context", {}).get("cuda_device", "unknown GPU")
b = {x["name"].split("/")[0]: x for x in data["benchmarks"] if x.get("run_type", "iteration") == "iteration"}
def t(n): return b[n]["real_time"] if n in b else float("nan")
rows, missed = [], 0
def check(what, value, target, fmt="{:.2f}"):
    global missed
    ok = value >= target
    missed += 0 if ok else 1
    rows.append(f"| {what} | {fmt.format(value)} | >= {target} | {'ok' if ok else 'MISSED'} |")
copy = b.get("BM_d2d_copy", {}).get("bytes_per_second", 0) / 1e9
check("feedback + 4-bit quantize, bw_frac", b.get("BM_feedback_maxmin4", {}).get("bw_frac", 0), 0.7)
check("top_k 2^26 at 1%, speed-up vs full CUB sort", t("BM_baseline_cub_sort_top_k") / t("BM_top_k"), 10, "{:.1f}x")
check("top_k 2^26 at 1%, floor_frac (one read)", b.get("BM_top_k", {}).get("floor_frac", 0), 0.3)
check("feedback + random-k at 1%, bw_frac", b.get("BM_random_k_feedback", {}).get("bw_frac", 0), 0.6)
check("dense adam, bw_frac", b.get("BM_adam", {}).get("bw_frac", 0), 0.85)
lines = [f"GPU: {dev}; device-to-device copy {copy:.0f} GB/s (read + write)", "",
         "| figure | value | target | |", "|---|---|---|---|", *rows, "",
         "| benchmark | time (us) | GB/s |", "|---|---|---|"]
for n, x in b.items():
    lines.append(f"| {n} | {x['real_time']:.1f} | {x.get('bytes_per_second', 0) / 1e9:.0f} |")
text = "\n".join(lines)
print(text)
open(sys.argv[2], "w").write(text + "\n")
sys.exit(3 if missed else 0)
EOF
targets_status=$?
set -e
say "summary written to $out/summary.md; took $(($(date +%s) - start)) s"
if [[ $tests_ok == 0 ]]; then
  say "FAILED: gpu tests (see $out/ctest.log)"
  exit 1
fi
if [[ $targets_status == 3 && ${STRICT:-0} == 1 ]]; then exit 3; fi
[[ $targets_status == 0 || $targets_status == 3 ]] || { say "FAILED: summary"; exit 1; }
say "OK"
