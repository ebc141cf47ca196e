#!/usr/bin/env bash
# Fault trials: every collective over local threads and over ZeroMQ processes (4 ranks), N trials
# (default 50) of each fault: kill, stall past the deadline, drop, duplicate, corrupt. Every rank
# must end with the correct bits, the same on every rank, or raise a sluice::error. Prints the
# table (also written to build/faults/report.md) and fails on any silent disagreement or hang.
#   scripts/faults.sh [N]          (SLUICE_FAULTS_BUILD=<dir> to reuse a configured build dir)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$SLUICE_ROOT"
sluice_install build core engines test

trials=${1:-50}
build=${SLUICE_FAULTS_BUILD:-build/faults}
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake --preset release -B "$build" -DSLUICE_BUILD_BENCH=OFF -DSLUICE_BUILD_EXAMPLES=OFF \
    -DSLUICE_VERIFY_HEADERS=OFF >/dev/null
fi
cmake --build "$build" -j "$(sluice_jobs)" --target test_fault_trials
mkdir -p build/faults
echo "sluice fault trials: $trials per cell, commit $(git rev-parse --short HEAD), $(date -u +%Y-%m-%d)"
SLUICE_FAULT_TRIALS=$trials SLUICE_FAULT_REPORT="$SLUICE_ROOT/build/faults/report.md" \
  "$build/tests/collective/test_fault_trials" 2>/dev/null | grep '^|' || true
test -f build/faults/report.md
if awk -F'|' 'NR > 2 && ($8 + 0 > 0 || $9 + 0 > 0) { bad = 1 } END { exit !bad }' build/faults/report.md; then
  echo "sluice fault trials: FAILED (silent disagreement or hang above)"
  exit 1
fi
echo "sluice fault trials: no silent disagreement, no hang"
