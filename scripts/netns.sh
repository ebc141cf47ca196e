#!/usr/bin/env bash
# Network namespaces for collective experiments on this machine only: N rank namespaces, each joined
# by a veth pair to a bridge in its own namespace, every link shaped with tc tbf (up and down).
# Everything is removed on exit, even on failure or Ctrl-C.
#
#   scripts/netns.sh [-n RANKS] [-r RATE] [-g GROUP_SIZE] [-p PREFIX] -- COMMAND [ARGS...]
#
# COMMAND runs once per rank inside its namespace with RANK, WORLD_SIZE, MASTER_ADDR (rank 0's
# address), MASTER_PORT, SLUICE_ZMQ_HOST (its own address) and SLUICE_LINK_BPS set; the script waits
# for all ranks (killing them after NETNS_TIMEOUT seconds, default 600) and exits non-zero if any failed.
# Rank r's stdout/stderr go to ${NETNS_LOG_DIR:-/tmp}/PREFIX-rank<r>.log; rank 0's stdout also to ours.
# Sourced (NETNS_SOURCE_ONLY=1), it only defines netns_up / netns_down / netns_exec / netns_rerate.
# Knobs: NETNS_QUEUE (tbf latency, default 25ms), NETNS_CC (TCP congestion control in the rank
# namespaces: default cubic if allowed, else reno; 'host' keeps the host's).
# Two tiers (-g G): consecutive ranks form groups of G, each on a bridge of its own with unshaped
# links (the fast path inside a cluster); each group bridge joins a core bridge through one link
# shaped to RATE both ways (the thin link between clusters). LOCAL_RANK, LOCAL_WORLD_SIZE are set.
set -euo pipefail

NETNS_RANKS=${NETNS_RANKS:-4}
NETNS_RATE=${NETNS_RATE:-1gbit}
NETNS_PREFIX=${NETNS_PREFIX:-slc$$}
NETNS_SUBNET=${NETNS_SUBNET:-10.231.0}

# Bits per second of a tc rate such as 100mbit or 1gbit.
rate_bps() {
  local r=$1
  case "$r" in
    *gbit) echo $(( ${r%gbit} * 1000000000 )) ;;
    *mbit) echo $(( ${r%mbit} * 1000000 )) ;;
    *kbit) echo $(( ${r%kbit} * 1000 )) ;;
    *) echo "$r" ;;
  esac
}

# tbf bucket for a rate: at least 4 ms of traffic and 64 KiB (veth GSO segments reach 64 KiB).
tbf_burst() {
  local burst=$(( $(rate_bps "$1") / 8 / 250 )); (( burst < 65536 )) && burst=65536
  echo "$burst"
}

netns_addr() { echo "${NETNS_SUBNET}.$(( $1 + 1 ))"; }

netns_down() {
  local p=$NETNS_PREFIX
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${p}(br|r[0-9]+)$" || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
}

netns_up() {
  local p=$NETNS_PREFIX n=$NETNS_RANKS rate=$NETNS_RATE g=${NETNS_GROUP_SIZE:-0}
  local burst; burst=$(tbf_burst "$rate")
  ip netns add "${p}br"
  ip -n "${p}br" link set lo up
  ip -n "${p}br" link add br0 type bridge
  ip -n "${p}br" link set br0 up
  if (( g > 0 )); then  # br0 is the core; group k's bridge gk joins it through the shaped uplink uk
    for (( k = 0; k * g < n; k++ )); do
      ip -n "${p}br" link add "g$k" type bridge
      ip -n "${p}br" link set "g$k" up
      ip -n "${p}br" link add "u${k}a" type veth peer name "u${k}b"
      ip -n "${p}br" link set "u${k}a" master "g$k"
      ip -n "${p}br" link set "u${k}b" master br0
      ip -n "${p}br" link set "u${k}a" up
      ip -n "${p}br" link set "u${k}b" up
      ip netns exec "${p}br" tc qdisc add dev "u${k}a" root tbf rate "$rate" burst "$burst" latency "${NETNS_QUEUE:-25ms}"
      ip netns exec "${p}br" tc qdisc add dev "u${k}b" root tbf rate "$rate" burst "$burst" latency "${NETNS_QUEUE:-25ms}"
    done
  fi
  for (( r = 0; r < n; r++ )); do
    local ns="${p}r${r}" a="${p}r${r}a" b="${p}r${r}b"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # Long-lived connections keep their congestion window between collective calls, as tuned
    # training clusters do (the default restarts slow start after every idle gap).
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_slow_start_after_idle=0
    # Loss-based congestion control (Linux's default cubic where this host allows it, else reno):
    # BBR v1 (some hosts' default) keeps sending into the 25 ms tbf queue while 3 flows share a link,
    # and its retransmissions took ~0.07 of the link here (docs/performance/collective.md).
    # NETNS_CC=host keeps the host's choice.
    local cc=${NETNS_CC:-}
    if [[ -z $cc ]]; then
      cc=reno
      [[ " $(ip netns exec "$ns" sysctl -n net.ipv4.tcp_allowed_congestion_control) " == *" cubic "* ]] && cc=cubic
    fi
    [[ $cc == host ]] || ip netns exec "$ns" sysctl -qw net.ipv4.tcp_congestion_control="$cc"
    ip link add "$a" type veth peer name "$b"
    ip link set "$a" netns "$ns"
    ip link set "$b" netns "${p}br"
    ip -n "$ns" addr add "$(netns_addr "$r")/24" dev "$a"
    ip -n "$ns" link set "$a" up
    if (( g > 0 )); then  # inside a group: unshaped
      ip -n "${p}br" link set "$b" master "g$(( r / g ))"
      ip -n "${p}br" link set "$b" up
      continue
    fi
    ip -n "${p}br" link set "$b" master br0
    ip -n "${p}br" link set "$b" up
    # Upload (rank -> bridge) and download (bridge -> rank) both shaped.
    ip netns exec "$ns" tc qdisc add dev "$a" root tbf rate "$rate" burst "$burst" latency "${NETNS_QUEUE:-25ms}"
    ip netns exec "${p}br" tc qdisc add dev "$b" root tbf rate "$rate" burst "$burst" latency "${NETNS_QUEUE:-25ms}"
  done
}

# netns_rerate RATE: changes the tbf rate (and bucket) of every live link of NETNS_PREFIX's
# NETNS_RANKS ranks, both directions, while the ranks run (scripts/bench.sh shaped-switch).
netns_rerate() {
  local p=$NETNS_PREFIX rate=$1
  local burst; burst=$(tbf_burst "$rate")
  for (( r = 0; r < NETNS_RANKS; r++ )); do
    ip netns exec "${p}r${r}" tc qdisc change dev "${p}r${r}a" root tbf rate "$rate" burst "$burst" latency "${NETNS_QUEUE:-25ms}"
    ip netns exec "${p}br" tc qdisc change dev "${p}r${r}b" root tbf rate "$rate" burst "$burst" latency "${NETNS_QUEUE:-25ms}"
  done
}

# netns_exec RANK COMMAND...: runs COMMAND in rank RANK's namespace with the rendezvous variables.
netns_exec() {
  local r=$1; shift
  local g=${NETNS_GROUP_SIZE:-0} local_env=()
  (( g > 0 )) && local_env=(LOCAL_RANK="$(( r % g ))" LOCAL_WORLD_SIZE="$g")
  ip netns exec "${NETNS_PREFIX}r${r}" env "${local_env[@]}" RANK="$r" WORLD_SIZE="$NETNS_RANKS" MASTER_ADDR="$(netns_addr 0)" \
    MASTER_PORT="${NETNS_MASTER_PORT:-29500}" SLUICE_ZMQ_HOST="$(netns_addr "$r")" \
    SLUICE_LINK_BPS="$(rate_bps "$NETNS_RATE")" "$@"
}

[[ "${NETNS_SOURCE_ONLY:-0}" == 1 ]] && return 0

while getopts "n:r:p:g:" opt; do
  case $opt in
    n) NETNS_RANKS=$OPTARG ;;
    g) NETNS_GROUP_SIZE=$OPTARG ;;
    r) NETNS_RATE=$OPTARG ;;
    p) NETNS_PREFIX=$OPTARG ;;
    *) sed -n '2,15p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ "${1:-}" == "--" ]] && shift
(( $# > 0 )) || { sed -n '2,15p' "$0"; exit 2; }
[[ $(id -u) == 0 ]] || { echo "netns.sh: needs root (ip netns, tc)" >&2; exit 2; }

trap netns_down EXIT INT TERM
netns_down
netns_up
log_dir=${NETNS_LOG_DIR:-/tmp}
pids=()
for (( r = 0; r < NETNS_RANKS; r++ )); do
  if (( r == 0 )); then
    netns_exec "$r" "$@" > >(tee "$log_dir/$NETNS_PREFIX-rank$r.log") 2>&1 &
  else
    netns_exec "$r" "$@" > "$log_dir/$NETNS_PREFIX-rank$r.log" 2>&1 &
  fi
  pids+=($!)
done
status=0
deadline=$(( SECONDS + ${NETNS_TIMEOUT:-600} ))
for pid in "${pids[@]}"; do
  while kill -0 "$pid" 2>/dev/null; do
    if (( SECONDS > deadline )); then
      echo "netns.sh: ranks still running after ${NETNS_TIMEOUT:-600}s; killing them" >&2
      kill -9 "${pids[@]}" 2>/dev/null || true
      status=124
      break 2
    fi
    sleep 0.2
  done
  wait "$pid" || status=$?
done
exit $status
