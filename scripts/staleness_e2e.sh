#!/usr/bin/env bash
# Steps to 0.88 test accuracy (and the accuracy after 2 epochs) of examples/fashion_mnist for the
# staleness compensations of sluice::pipeline: 4 workers as threads, local transport, seed 1,
# batch 64 per worker, evaluation every 117 steps (half an epoch), at most 12 epochs (4 for SGD with
# momentum without compensation). Steps are
# deterministic for a seed, so the figures do not depend on the machine's load.
#   scripts/staleness_e2e.sh [build dir] [output dir]
# Needs the example built with FASHION_MNIST_CODECS containing identity, random_k and block_top_k.
set -euo pipefail
build=${1:-build/ci}
out=${2:-staleness-e2e}
fm=$build/examples/fashion_mnist/fashion_mnist
data=${FASHION_MNIST_DATA:-/usr/share/datasets/fashion-mnist}
mkdir -p "$out"
common=(--workers 4 --transport local --batch 64 --seed 1 --eval-every 117 --target-accuracy 0.88
        --data "$data" --quiet)
run() {  # name, then the example's options
  local name=$1
  shift
  [[ -s $out/$name.json ]] || "$fm" "${common[@]}" --json "$out/$name.json" "$@" > "$out/$name.log" 2>&1 || true
}
# Most telling first. SGD momentum without compensation is cut at 4 epochs (it diverges).
for s in 1 2; do
  for comp in local_step none weight_prediction; do
    cap=(--epochs 12)
    [[ $comp != local_step ]] && cap=(--epochs 4)
    run "sgd-dense-s$s-$comp" --codec identity --feedback none --optimizer sgd --lr 0.05 --momentum 0.9 --staleness $s --compensation $comp "${cap[@]}"
    run "adam-dense-s$s-$comp" --codec identity --feedback none --optimizer adam --lr 1e-3 --staleness $s --compensation $comp --epochs 12
    run "sgd-randomk-s$s-$comp" --codec random_k --ratio 0.05 --feedback residual --optimizer sgd --lr 0.05 --momentum 0.9 --staleness $s --compensation $comp "${cap[@]}"
    run "adam-blocktopk-s$s-$comp" --codec block_top_k --ratio 0.01 --feedback residual --optimizer adam --lr 1e-3 --staleness $s --compensation $comp --epochs 12
  done
done
for name in sgd-dense adam-dense sgd-randomk adam-blocktopk; do  # staleness 0: compensation has nothing to do
  case $name in
    sgd-dense) opts=(--codec identity --feedback none --optimizer sgd --lr 0.05 --momentum 0.9) ;;
    adam-dense) opts=(--codec identity --feedback none --optimizer adam --lr 1e-3) ;;
    sgd-randomk) opts=(--codec random_k --ratio 0.05 --feedback residual --optimizer sgd --lr 0.05 --momentum 0.9) ;;
    adam-blocktopk) opts=(--codec block_top_k --ratio 0.01 --feedback residual --optimizer adam --lr 1e-3) ;;
  esac
  run "$name-s0-none" "${opts[@]}" --staleness 0 --compensation none --epochs 12
done
python3 - "$out" <<'PY'
import json, pathlib, sys
rows = []
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    j = json.loads(f.read_text())
    reached = j["time_to_target"] >= 0
    at2 = [p["accuracy"] for p in j["curve"] if p["step"] == 468]
    rows.append((f.stem, j["steps"] if reached else f"> {j['steps']}", at2[0] if at2 else float("nan")))
print("| run | steps to 0.88 | accuracy after 2 epochs |")
print("|---|---|---|")
for name, steps, acc in rows:
    print(f"| {name} | {steps} | {acc:.4f} |")
PY
