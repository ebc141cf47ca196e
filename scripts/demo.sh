#!/usr/bin/env bash
# Installs what is missing, builds Release, and runs the main job: compressing a real
# gradient-sized tensor with three codecs (encode, frame, validate, decode), then 4 data-parallel
# ranks training with top-k + error feedback + sparse allgather + SGD, printing what they did.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$SLUICE_ROOT"
sluice_install build core engines test
cmake --preset release -DSLUICE_BUILD_TESTS=OFF -DSLUICE_BUILD_BENCH=OFF >/dev/null
cmake --build --preset release -j "$(sluice_jobs)" --target compress_gradient data_parallel_step
./build/release/examples/compress_gradient "$@"
echo
./build/release/examples/data_parallel_step
