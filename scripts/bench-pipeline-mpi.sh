#!/usr/bin/env bash
# Runs bench_pipeline_mpi (the pipeline's overlap rows over Open MPI: MPI_Allreduce, the ring over
# MPI, block_top_k) on 4 ranks in network namespaces joined by tbf-shaped veth links, under mpirun
# with the TCP BTL on the shaped links only (as scripts/bench-collective.sh). Needs root.
#
#   scripts/bench-pipeline-mpi.sh [BUILD_DIR]          (default build/release)
#   RATES="100mbit 1gbit" RANKS=4 FILTER=<regex> STEPS=<timed steps per row, default 6>
# Writes BUILD_DIR/bench/pipeline_mpi-<rate>.json (rank 0's Google Benchmark output).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build/release}
bin=$(realpath "$build/bench/bench_pipeline_mpi")
[[ -x $bin ]] || { echo "bench-pipeline-mpi.sh: $bin not built (cmake --build $build --target bench_pipeline_mpi)" >&2; exit 2; }
rates=${RATES:-"100mbit 1gbit"}
export NETNS_RANKS=${RANKS:-4}
export NETNS_PREFIX=slcp$$
export NETNS_SOURCE_ONLY=1
# shellcheck source=netns.sh
source "$here/netns.sh"
trap netns_down EXIT INT TERM
out_dir=$(realpath "$build/bench")
mkdir -p "$out_dir"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=passive SLUICE_BENCH_STEPS=${STEPS:-6}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for rate in $rates; do
  export NETNS_RATE=$rate
  netns_down
  netns_up
  json="$out_dir/pipeline_mpi-$rate.json"
  echo "== $rate: MPI ranks"
  # mpirun lives in the bridge namespace and reaches its ranks (PMIx, OOB) over br0.
  ip -n "${NETNS_PREFIX}br" addr add "${NETNS_SUBNET}.254/24" dev br0
  ip netns exec "${NETNS_PREFIX}br" env PMIX_MCA_ptl_tcp_remote_connections=1 PMIX_MCA_ptl_tcp_if_include=br0 \
    NETNS_RANK0_ARGS="--benchmark_out=$json --benchmark_out_format=json" SLUICE_LINK_BPS="$(rate_bps "$rate")" \
    timeout 1800 mpirun -np "$NETNS_RANKS" --oversubscribe -x NETNS_PREFIX -x NETNS_RANK0_ARGS -x SLUICE_LINK_BPS \
    -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x SLUICE_BENCH_STEPS -x PMIX_MCA_ptl_tcp_remote_connections \
    --mca oob_tcp_if_include br0 --mca btl tcp,self --mca btl_tcp_if_include "${NETNS_SUBNET}.0/24" \
    "$here/netns-exec-rank.sh" "$bin" --benchmark_filter="${FILTER:-.}"
  netns_down
done
echo "results: $out_dir/pipeline_mpi-*.json"
