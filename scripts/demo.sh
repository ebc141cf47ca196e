#!/usr/bin/env bash
# Installs what is missing, builds Release, and runs the main job: compressing a real
# gradient-sized tensor with three codecs (encode, frame, validate, decode), then 4 data-parallel
# ranks training with top-k + error feedback + sparse allgather + SGD, printing what they did.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$SLUICE_ROOT"
sluice_install build core engines test
# Its own build directory: the release preset's cache (tests, benchmarks) stays as scripts/test.sh
# and the benchmarks configure it.
cmake --preset release -B build/demo -DSLUICE_BUILD_TESTS=OFF -DSLUICE_BUILD_BENCH=OFF >/dev/null
cmake --build build/demo -j "$(sluice_jobs)" --target compress_gradient data_parallel_step
./build/demo/examples/compress_gradient "$@"
echo
./build/demo/examples/data_parallel_step
