#!/usr/bin/env bash
# Installs what is missing, then: clang-format check, Release build with warnings as errors and
# every test (benchmarks: scripts/bench.sh), ASan+UBSan build running the `unit` tests, TSan build running the `threaded` tests,
# and each libFuzzer target for SLUICE_FUZZ_SECONDS (default: 24 s shared by all targets) when clang is present.
# Stages can be skipped with SLUICE_SKIP="format asan tsan fuzz" (for local iteration only).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$SLUICE_ROOT"
# libtorch (the torch group: ~190 Debian packages, 2 min to install, 3 min of CPU to build against)
# only when asked for: SLUICE_WITH_TORCH=1 scripts/test.sh also builds and runs sluice::torch's tests.
sluice_install build core engines test ${SLUICE_WITH_TORCH:+torch}

skip=" ${SLUICE_SKIP:-} "
jobs=$(sluice_jobs)
stage() { echo; echo "=== sluice test: $* ($(date -u +%H:%M:%S)) ==="; }

if [[ $skip != *" format "* ]]; then
  stage "clang-format"
  mapfile -t files < <(git ls-files '*.hpp' '*.ipp' '*.cpp' '*.cuh' '*.cu' 2>/dev/null || find include tests bench examples -name '*.[chi]pp')
  clang-format --dry-run --Werror "${files[@]}"
fi

stage "release build at -O1 (-Werror), header check and all tests"
# Explicit, so that a build directory configured otherwise (tests or examples off) cannot turn
# this stage into an empty one; ctest fails when it finds no test. The benchmarks are not tests:
# scripts/bench.sh builds them (with -Werror too), which keeps ~3 minutes of CPU out of CI. The
# .cu tests are compiled for sm_80 (machine code and PTX) only: without a device they are only
# compiled, and scripts/gpu-check.sh builds sm_80 + sm_90 on a GPU host.
# The `ci` preset is `release` at -O1 in build/ci: 19-28 % less compile time per TU than -O2
# (what keeps CI near 25 minutes on 2 cores); benchmarks and the demo build at -O3
# (scripts/bench.sh with -Werror). The header check (SLUICE_VERIFY_HEADERS, on here) is
# part of this build. The Fashion-MNIST example is compiled with three of its seven codecs: one
# test runs that binary (one epoch of a small MLP through scripts/sluice-run; tests/fashion_mnist
# trains through the same trainer), and the other codecs' pipelines are compiled by tests/pipeline;
# scripts/demo.sh builds the two it runs.
cmake --preset ci -DSLUICE_BUILD_TESTS=ON -DSLUICE_BUILD_BENCH=OFF -DSLUICE_BUILD_EXAMPLES=ON \
  -DCMAKE_CUDA_ARCHITECTURES=80 "-DFASHION_MNIST_CODECS=identity;maxmin_quantize;sign" -DFASHION_MNIST_HIERARCHICAL=OFF >/dev/null
cmake --build --preset ci -j "$jobs"
ctest --preset ci --no-tests=error

if [[ $skip != *" asan "* ]]; then
  stage "ASan+UBSan: unit tests"
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$jobs"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --preset asan --no-tests=error
fi

if [[ $skip != *" tsan "* ]]; then
  stage "TSan: threaded tests"
  cmake --preset tsan >/dev/null
  cmake --build --preset tsan -j "$jobs"
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ctest --preset tsan --no-tests=error
fi

if [[ $skip != *" fuzz "* ]] && command -v clang++ >/dev/null; then
  # Default: 24 s over all targets together (CI stays near 30 minutes as targets are added; long
  # runs are made by hand: `build/fuzz/tests/fuzz/<target> <corpus> -max_total_time=<s>`).
  targets=$(ls tests/fuzz/fuzz_*.cpp | wc -l)
  secs=${SLUICE_FUZZ_SECONDS:-$((24 / targets))}
  stage "libFuzzer targets, ${secs}s each"
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz -j "$jobs"
  for f in build/fuzz/tests/fuzz/fuzz_*; do
    [ -x "$f" ] || continue
    name=$(basename "$f")
    corpus="build/fuzz/corpus/$name"
    mkdir -p "$corpus"
    echo "--- $name"
    "$f" "$corpus" -max_total_time="$secs" -print_final_stats=1 -error_exitcode=77 2>&1 | tail -n 12
  done
fi

stage "done"
echo "sluice: all test stages passed"
