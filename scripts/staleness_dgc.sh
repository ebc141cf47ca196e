#!/usr/bin/env bash
# Steps to 0.88 test accuracy of examples/fashion_mnist with top_k and block_top_k 1 % at staleness
# 0, 1 and 2 (default compensation, local_step), with and without DGC's pieces. Variants:
#   adam-residual, adam-residual-warmup: Adam 1e-3 with residual (+ warm-up)
#   sgd-residual: SGD lr 0.05 momentum 0.9 with residual
#   sgd-mc, sgd-mc-warmup: momentum_correction 0.9 (DGC; the optimizer SGD lr 0.05 without
#     momentum, as the pipeline requires) (+ warm-up)
# Warm-up: the kept fraction starts at 25 % and ramps to 1 % in WARMUP one-epoch stages. 4 workers
# as threads, local transport, batch 64 per worker, seed 1, evaluation every 117 steps, at most 12
# epochs. Deterministic for a seed: the machine's load does not change the step counts.
#   scripts/staleness_dgc.sh [build dir] [output dir]
# Knobs (environment): TABLE_ONLY=1 (print the table of the runs there), CODECS (identity: the dense reference, without feedback), STALENESS, VARIANTS,
# WARMUP (epochs), SGD_LR.
# Needs the example built with FASHION_MNIST_CODECS containing top_k and block_top_k.
set -euo pipefail
build=${1:-build/release}
out=${2:-staleness-dgc}
fm=$build/examples/fashion_mnist/fashion_mnist
data=${FASHION_MNIST_DATA:-/usr/share/datasets/fashion-mnist}
codecs=${CODECS:-"block_top_k top_k"}
stalenesses=${STALENESS:-"0 1 2"}
variants=${VARIANTS:-"adam-residual adam-residual-warmup sgd-residual sgd-mc sgd-mc-warmup"}
warmup=${WARMUP:-2}
sgd_lr=${SGD_LR:-0.05}
mkdir -p "$out"
for s in $stalenesses; do
  for codec in $codecs; do
    for v in $variants; do
      cell="$out/$codec-$v-s$s"
      [[ -s $cell.json || -n ${TABLE_ONLY:-} ]] && continue
      case $v in
        adam-residual*) extra=(--optimizer adam --lr 1e-3 --feedback residual) ;;
        sgd-residual*) extra=(--optimizer sgd --lr "$sgd_lr" --momentum 0.9 --feedback residual) ;;
        sgd-mc*) extra=(--optimizer sgd --lr "$sgd_lr" --momentum 0.9 --feedback momentum_correction) ;;
        *) echo "unknown variant $v" >&2; exit 1 ;;
      esac
      [[ $v == *-warmup ]] && extra+=(--warmup-epochs "$warmup")
      if [[ $codec == identity ]]; then  # the dense reference: adam-residual and sgd-residual without feedback
        [[ $v == adam-residual || $v == sgd-residual ]] || continue
        extra=("${extra[@]/residual/none}")
      fi
      "$fm" --workers 4 --transport local --batch 64 --seed 1 --eval-every 117 --target-accuracy 0.88 --epochs 12 \
        --data "$data" --quiet --codec "$codec" --ratio 0.01 "${extra[@]}" \
        --staleness "$s" --compensation local_step --json "$cell.json" > "$cell.log" 2>&1 || true
    done
  done
done
python3 - "$out" "$codecs" "$variants" "$stalenesses" <<'PY'
import json, pathlib, sys
out, codecs, variants, stal = sys.argv[1:]
stal = stal.split()
print("| codec 1 % | optimizer, feedback | " + " | ".join(f"s = {s}" for s in stal) + " |")
print("|---" * (len(stal) + 2) + "|")
for c in codecs.split():
    for v in variants.split():
        if c == "identity" and v not in ("adam-residual", "sgd-residual"):
            continue
        cells = []
        for s in stal:
            f = pathlib.Path(out) / f"{c}-{v}-s{s}.json"
            if not f.exists():
                cells.append("not run")
                continue
            j = json.loads(f.read_text())
            steps = str(j["steps"]) if j["time_to_target"] >= 0 else f"— by {j['steps']} ({j['accuracy']:.4f})"
            cells.append(f"{steps}, {j['sent_bytes'] / 1e6:.1f} MB")
        label = {"adam-residual": "Adam 1e-3, residual", "adam-residual-warmup": "Adam 1e-3, residual + warm-up",
                 "sgd-residual": "SGD momentum 0.9, residual", "sgd-mc": "SGD, momentum_correction 0.9",
                 "sgd-mc-warmup": "SGD, momentum_correction 0.9 + warm-up"}.get(v, v)
        if c == "identity":
            label = label.replace(", residual", ", dense")
        print(f"| {c} | {label} | " + " | ".join(cells) + " |")
PY
