#!/usr/bin/env bash
# scripts/rerate_trials.sh [-N TRIALS] [-n RANKS] [-s SECONDS] [-i INTERVAL] [-r RATES] [-q] [-- COMMAND...]
# Live link re-rates against zmq_transport: TRIALS (default 30) runs of bench/netns/rerate_probe
# (RANKS ranks, default 4, exchanging messages between every pair for SECONDS, default 8) under
# scripts/netns.sh, while every link's tbf rate is changed every INTERVAL seconds (default 0.7)
# through RATES (default "100mbit 1gbit 10mbit", cycled; the links start at the first). Prints one
# line per trial and a count of outcomes; each trial's rank logs stay in OUT_DIR/trial<i>
# (default build/bench/rerate). SLUICE_ZMQ_TRACE=1 is passed to the ranks unless -q: every
# connection event of their sockets is logged, with its time, to the rank logs. After --, COMMAND
# runs on every rank instead of the probe (e.g. build/release/bench/shaped_switch 40 1000 "" 1048576).
# Needs root.
# NETNS_PREFIX (default zr) and NETNS_SUBNET (default 10.232.0) name the namespaces and addresses;
# BUILD_DIR (build/release) needs SLUICE_BUILD_BENCH=ON and ZeroMQ.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$SLUICE_ROOT"
trials=30 ranks=4 seconds=8 interval=0.7 rates="100mbit 1gbit 10mbit" trace=1
while getopts "N:n:s:i:r:q" opt; do
  case $opt in
    N) trials=$OPTARG ;;
    n) ranks=$OPTARG ;;
    s) seconds=$OPTARG ;;
    i) interval=$OPTARG ;;
    r) rates=$OPTARG ;;
    q) trace=0 ;;
    *) sed -n '2,14p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ "${1:-}" == "--" ]] && shift
[[ $(id -u) == 0 ]] || { echo "rerate_trials.sh: needs root (ip netns, tc)" >&2; exit 2; }
build=${BUILD_DIR:-build/release}
out=${OUT_DIR:-build/bench/rerate}
export NETNS_PREFIX=${NETNS_PREFIX:-zr} NETNS_SUBNET=${NETNS_SUBNET:-10.232.0}
read -r -a rate_list <<< "$rates"
cmake --build "$build" --target rerate_probe -j "$(sluice_jobs)" >/dev/null
command=("$(realpath "$build/bench/rerate_probe")" "$seconds")
(( $# > 0 )) && command=("$@")
mkdir -p "$out"

ok=0 failed=0 lost=0 other=0
for (( i = 0; i < trials; i++ )); do
  dir=$out/trial$i
  rm -rf "$dir" && mkdir -p "$dir"
  NETNS_LOG_DIR=$dir NETNS_TIMEOUT=$(( ${seconds%.*} + 120 )) SLUICE_ZMQ_TRACE=$trace \
    scripts/netns.sh -n "$ranks" -r "${rate_list[0]}" -p "$NETNS_PREFIX" -- "${command[@]}" > "$dir/netns.out" 2>&1 &
  run=$!
  (
    NETNS_SOURCE_ONLY=1 NETNS_RANKS=$ranks
    source scripts/netns.sh
    sleep 1
    k=1
    while kill -0 "$run" 2>/dev/null; do
      rate=${rate_list[k % ${#rate_list[@]}]}
      netns_rerate "$rate" 2>/dev/null && echo "$(date +%s.%N) $rate" >> "$dir/rerates.log" || true
      k=$(( k + 1 ))
      sleep "$interval"
    done
  ) &
  rerater=$!
  rc=0
  wait "$run" || rc=$?
  wait "$rerater" || true
  changes=$(wc -l < "$dir/rerates.log" 2>/dev/null || echo 0)
  if (( rc == 0 )); then
    ok=$(( ok + 1 ))
    echo "trial $i: ok ($changes re-rates$(grep -h 'rank 0 ok' "$dir"/*rank0.log | sed 's/.*ok, /; /'))"
  else
    failed=$(( failed + 1 ))
    why=$(grep -h "FAILED" "$dir"/*rank*.log | head -1 || true)
    [[ -n $why ]] || why=$(grep -hiE "error|lost|timeout" "$dir"/*rank*.log | grep -v "trace:" | head -1 || true)
    if grep -q "peer lost" "$dir"/*rank*.log; then lost=$(( lost + 1 )); else other=$(( other + 1 )); fi
    echo "trial $i: FAILED rc=$rc ($changes re-rates): ${why:-no rank said why}"
  fi
done
echo "rerate_trials: $trials trials, $ranks ranks, ${seconds}s each, re-rated every ${interval}s through [$rates]:" \
  "$ok ok, $failed failed ($lost with peer_lost, $other other) [${command[*]}]"
