#!/usr/bin/env bash
# Multi-cluster time to accuracy: Fashion-MNIST (examples/fashion_mnist, 4 ZeroMQ workers) in 2
# groups of 2, each group on an unshaped bridge, the groups joined by one link shaped with tc tbf
# (scripts/netns.sh -g 2). Flat (every worker on the thin link) against by_hierarchical (one
# compressed stream per group), for each configuration and rate; one JSON per run (the example's
# --json) under BUILD_DIR/bench/tiers/, and a markdown table of time and steps to TARGET and the
# bytes each worker sent, and the bytes per step that crossed the thin link (the uplinks' tbf counters).
#
#   scripts/bench-tiers.sh BUILD_DIR     # needs root; BUILD_DIR has examples/fashion_mnist built
#                                        # with FASHION_MNIST_HIERARCHICAL=ON
# Knobs: RATES ("100mbit 1gbit"), CONFIGS ("block_top_k ring_dense"; also block_top_k2: 2 %, maxmin4,
# ddp: PyTorch DDP, flat),
# EXCHANGES ("codec hierarchical"; also hierarchical_gather: a sparse codec's frames gathered by
# the leaders), TARGET (0.88), EPOCHS (15), SEED (1: the data order and initial weights; runs with
# another seed are named ...-sSEED); NETNS_PREFIX and NETNS_SUBNET as scripts/netns.sh.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(realpath "${1:?usage: scripts/bench-tiers.sh BUILD_DIR}")
[[ $(id -u) == 0 ]] || { echo "bench-tiers.sh: needs root (ip netns, tc)" >&2; exit 2; }
fm="$build/examples/fashion_mnist/fashion_mnist"
[[ -x $fm ]] || { echo "bench-tiers.sh: $fm is not built" >&2; exit 2; }
RATES=${RATES:-"100mbit 1gbit"}
CONFIGS=${CONFIGS:-"block_top_k ring_dense"}
TARGET=${TARGET:-0.88}
EPOCHS=${EPOCHS:-15}
SEED=${SEED:-1}
out="$build/bench/tiers"
mkdir -p "$out"
common=(--batch 64 --staleness 1 --seed "$SEED" --optimizer adam --lr 1e-3 --eval-every 117 --epochs "$EPOCHS"
        --target-accuracy "$TARGET" --quiet)
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
# PyTorch DDP (configuration ddp: scripts/ddp_fashion_mnist.py, gloo, one process per rank, the
# same job) runs flat only: it has no hierarchical exchange.
source "$here/lib.sh"
if [[ " $CONFIGS " == *" ddp "* ]]; then
  torch_py=$(sluice_torch_python) || { echo "bench-tiers.sh: ddp needs python3-torch (scripts/packages.txt group ddp)" >&2; exit 2; }
fi
ddp=("$here/ddp_fashion_mnist.py" --batch 64 --seed "$SEED" --optimizer adam --lr 1e-3 --eval-every 117 --epochs "$EPOCHS"
     --target-accuracy "$TARGET" --quiet)
config_args() {
  case $1 in
    block_top_k) echo "--codec block_top_k --ratio 0.01 --feedback residual" ;;
    block_top_k2) echo "--codec block_top_k --ratio 0.02 --feedback residual" ;;
    maxmin4) echo "--codec maxmin_quantize --bits 4 --feedback residual" ;;
    ring_dense) echo "--codec identity --feedback none" ;;
    ddp) echo "--hook none" ;;
    *) echo "bench-tiers.sh: unknown configuration '$1'" >&2; exit 2 ;;
  esac
}
NETNS_SOURCE_ONLY=1 NETNS_RANKS=4 NETNS_GROUP_SIZE=2 NETNS_PREFIX=${NETNS_PREFIX:-tier$$}
# shellcheck source=netns.sh
source "$here/netns.sh"
trap netns_down EXIT
port=29700
# Bytes that crossed the thin link so far: what left each group through its shaped uplink (the tbf
# qdiscs' counters: payload, TCP/IP headers and ACKs), every group summed.
uplink_bytes() {
  local total=0 k v
  for ((k = 0; k * NETNS_GROUP_SIZE < NETNS_RANKS; k++)); do
    v=$(ip netns exec "${NETNS_PREFIX}br" tc -s qdisc show dev "u${k}a" | sed -n 's/.*Sent \([0-9]*\) bytes.*/\1/p')
    total=$((total + v))
  done
  echo "$total"
}
for rate in $RATES; do
  NETNS_RATE=$rate
  netns_down
  netns_up
  for c in $CONFIGS; do
    exchanges=${EXCHANGES:-codec hierarchical}
    [[ $c == ddp ]] && exchanges=flat
    for x in $exchanges; do
      name="$c-$x-$rate"
      [[ $SEED == 1 ]] || name+="-s$SEED"
      port=$((port + 1))
      pids=()
      before=$(uplink_bytes)
      for ((r = 0; r < NETNS_RANKS; r++)); do
        # shellcheck disable=SC2046
        if [[ $c == ddp ]]; then
          cmd=("$torch_py" "${ddp[@]}")
        else
          cmd=("$fm" --transport zmq "${common[@]}" --exchange "$x" --group-size 2)
        fi
        NETNS_MASTER_PORT=$port netns_exec "$r" timeout 1800 "${cmd[@]}" \
          $(config_args "$c") --json "$out/$name.json" > "$out/$name.rank$r.log" 2>&1 &
        pids+=($!)
      done
      status=0
      for p in "${pids[@]}"; do wait "$p" || status=$?; done
      ((status == 0)) || { echo "bench-tiers.sh: $name failed ($status); see $out/$name.rank*.log" >&2; exit 1; }
      echo $(($(uplink_bytes) - before)) > "$out/$name.thin-link-bytes"
      echo "$name: $(tail -1 "$out/$name.rank0.log")"
    done
  done
done
python3 - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
rows = []
for f in sorted(out.glob("*.json")):
    j = json.loads(f.read_text())
    rows.append((f.stem, j))
print("| run | time to target (s) | steps | final accuracy | sent per worker (MB) | thin link per step (kB) |")
print("|---|---|---|---|---|---|")
for name, j in rows:
    t = j.get("time_to_target")
    w = out / f"{name}.thin-link-bytes"
    thin = f"{int(w.read_text()) / j['steps'] / 1e3:.1f}" if w.exists() and j.get("steps") else "-"
    print(f"| {name} | {t if t is not None else '-'} | {j.get('steps')} | {j.get('accuracy')} | {j.get('sent_bytes', 0) / 1e6:.1f} | {thin} |")
PY
