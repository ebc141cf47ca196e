#!/usr/bin/env bash
# Runs bench_collective on 4 ranks in network namespaces joined by tbf-shaped veth links (100 Mbps
# and 1 Gbps by default): the sluice collectives over ZeroMQ, then our dense ring and Open MPI's own
# MPI_Allreduce under mpirun (BTL tcp over the shaped links only). Namespaces are removed on exit.
#
#   scripts/bench-collective.sh [BUILD_DIR]      (default build/release; needs root)
#   RATES="100mbit 1gbit" RANKS=4 FILTER_ZMQ=... FILTER_MPI=... SKIP_MPI=1
# Writes BUILD_DIR/bench/collective-<rate>-zmq.json and -mpi.json (rank 0's Google Benchmark output).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build/release}
bin=$(realpath "$build/bench/bench_collective")
[[ -x $bin ]] || { echo "bench-collective.sh: $bin not built (cmake --build $build --target bench_collective)" >&2; exit 2; }
rates=${RATES:-"100mbit 1gbit"}
filter_zmq=${FILTER_ZMQ:-'^BM_(transport_|ring_allreduce|sparse_|scatter_)'}
filter_mpi=${FILTER_MPI:-'^BM_(transport_|ring_allreduce|baseline_mpi_allreduce)'}
export NETNS_RANKS=${RANKS:-4}
export NETNS_PREFIX=slcb$$
export NETNS_SOURCE_ONLY=1
# shellcheck source=netns.sh
source "$here/netns.sh"
trap netns_down EXIT INT TERM
out_dir=$(realpath "$build/bench")
mkdir -p "$out_dir"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=passive
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

run_zmq() {
  local json=$1 pids=() status=0
  for (( r = 0; r < NETNS_RANKS; r++ )); do
    if (( r == 0 )); then
      netns_exec 0 timeout 900 "$bin" --benchmark_filter="$filter_zmq" --benchmark_out="$json" \
        --benchmark_out_format=json &
    else
      netns_exec "$r" timeout 900 "$bin" --benchmark_filter="$filter_zmq" > /dev/null 2> "${json%.json}-r$r.log" &
    fi
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || status=$?; done
  (( status == 0 )) || echo "bench-collective.sh: a rank failed ($status); rank logs: ${json%.json}-r*.log" >&2
  return $status
}

run_mpi() {
  local json=$1
  # mpirun lives in the bridge namespace and reaches its ranks (PMIx, OOB) over br0; rank traffic
  # uses the TCP BTL on the shaped links only (no shared memory, no loopback).
  ip -n "${NETNS_PREFIX}br" addr add "${NETNS_SUBNET}.254/24" dev br0
  ip netns exec "${NETNS_PREFIX}br" env PMIX_MCA_ptl_tcp_remote_connections=1 PMIX_MCA_ptl_tcp_if_include=br0 \
    NETNS_RANK0_ARGS="--benchmark_out=$json --benchmark_out_format=json" SLUICE_LINK_BPS="$(rate_bps "$NETNS_RATE")" \
    timeout 900 mpirun -np "$NETNS_RANKS" --oversubscribe -x NETNS_PREFIX -x NETNS_RANK0_ARGS -x SLUICE_LINK_BPS \
    -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x PMIX_MCA_ptl_tcp_remote_connections \
    --mca oob_tcp_if_include br0 --mca btl tcp,self --mca btl_tcp_if_include "${NETNS_SUBNET}.0/24" \
    "$here/netns-exec-rank.sh" "$bin" --benchmark_filter="$filter_mpi"
}

# Each JSON's context records the commit and this command line (docs/performance.md names both).
cmd=(scripts/bench-collective.sh "$@")
for v in FILTER_MPI FILTER_ZMQ SKIP_MPI RANKS RATES; do if [[ -n ${!v:-} ]]; then cmd=("$v=${!v}" "${cmd[@]}"); fi; done
commit=$(python3 "$here/perf_report.py" commit)
stamp() { python3 "$here/perf_report.py" stamp "$1" --commit "$commit" -- "${cmd[@]}"; }

for rate in $rates; do
  export NETNS_RATE=$rate
  netns_down
  netns_up
  echo "== $rate: ZeroMQ ranks"
  run_zmq "$out_dir/collective-$rate-zmq.json"
  stamp "$out_dir/collective-$rate-zmq.json"
  if [[ "${SKIP_MPI:-0}" != 1 ]] && command -v mpirun > /dev/null; then
    echo "== $rate: MPI ranks"
    run_mpi "$out_dir/collective-$rate-mpi.json"
    stamp "$out_dir/collective-$rate-mpi.json"
  fi
  netns_down
done
echo "results: $out_dir/collective-*-{zmq,mpi}.json"
# A markdown table of every result (for docs/performance/collective.md).
python3 - "$out_dir" $rates <<'PY'
import json, sys, os
out, rates = sys.argv[1], sys.argv[2:]
print("| link | engine | benchmark | time per call (ms) | CPU user+sys (ms) | wire bytes per rank | bound (ms) | fraction of bound |")
print("|---|---|---|---|---|---|---|---|")
for rate in rates:
    for eng in ("zmq", "mpi"):
        f = os.path.join(out, f"collective-{rate}-{eng}.json")
        if not os.path.exists(f):
            continue
        for b in json.load(open(f))["benchmarks"]:
            if b.get("error_occurred"):
                continue
            parts = b["name"].split("/")
            name = parts[0] + ("/" + parts[1] if parts[1].isdigit() else "")
            t = b["real_time"] * {"ms": 1, "us": 1e-3, "ns": 1e-6, "s": 1e3}[b["time_unit"]]
            bound = b.get("bound_s", 0) * 1e3
            cpu = f"{b.get('cpu_user_s', 0) * 1e3:.0f}+{b.get('cpu_sys_s', 0) * 1e3:.0f}"
            print(f"| {rate} | {eng} | {name} | {t:.0f} | {cpu} | {b.get('wire_bytes', 0) / 1e6:.2f} MB | {bound:.0f} | {b.get('frac_of_bound', 0):.2f} |")
PY
