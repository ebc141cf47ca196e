#!/usr/bin/env bash
# Accuracy of examples/fashion_mnist after the same epochs at staleness 0, 1 and 2 with the default
# compensation (local_step), for SGD with momentum 0.9, per model, learning rate and codec (+ residual;
# identity without feedback): 4 workers as threads, local transport, batch 64 per worker, seed 1,
# evaluation at each epoch's end. Runs are deterministic for a seed, so the machine's load does not
# change the figures. Prints one markdown table per model and learning rate.
#   scripts/staleness_matrix.sh [build dir] [output dir]
# Knobs (environment): TABLE_ONLY=1 (print the table of the runs there), MODELS ("name=w0,w1,...;..."),
# LRS, CODECS (qsgd: 4 bits, qsgd8: 8 bits), STALENESS, EPOCHS, MOMENTUM, SEED.
# Needs the example built with FASHION_MNIST_CODECS containing every codec of CODECS.
set -euo pipefail
build=${1:-build/release}
out=${2:-staleness-matrix}
fm=$build/examples/fashion_mnist/fashion_mnist
data=${FASHION_MNIST_DATA:-/usr/share/datasets/fashion-mnist}
models=${MODELS:-"mlp=784,256,128,10;deep=784,512,256,128,10"}
lrs=${LRS:-"0.02 0.1"}
codecs=${CODECS:-"identity random_k top_k block_top_k maxmin_quantize qsgd qsgd8 sign"}
stalenesses=${STALENESS:-"0 1 2"}
epochs=${EPOCHS:-2}
momentum=${MOMENTUM:-0.9}
seed=${SEED:-1}
mkdir -p "$out"
codec_opts() {  # the codec's options: the settings of docs/performance/e2e.md
  case $1 in
    identity) echo "--codec identity --feedback none" ;;
    random_k) echo "--codec random_k --ratio 0.05 --feedback residual" ;;
    top_k | block_top_k) echo "--codec $1 --ratio 0.01 --feedback residual" ;;
    maxmin_quantize | qsgd) echo "--codec $1 --bits 4 --feedback residual" ;;
    qsgd8) echo "--codec qsgd --bits 8 --feedback residual" ;;  # with residual the example takes 24 (4 bits), 512 (8) per norm
    sign) echo "--codec sign --feedback residual" ;;
    *) echo "unknown codec $1" >&2; exit 1 ;;
  esac
}
IFS=';' read -r -a model_list <<< "$models"
for lr in $lrs; do
  for m in "${model_list[@]}"; do
    name=${m%%=*}
    IFS=',' read -r -a sizes <<< "${m#*=}"
    for codec in $codecs; do
      for s in $stalenesses; do
        cell="$out/$name-lr$lr-$codec-s$s"
        [[ -s $cell.json || -n ${TABLE_ONLY:-} ]] && continue
        # shellcheck disable=SC2046
        "$fm" --workers 4 --transport local --batch 64 --seed "$seed" --epochs "$epochs" --data "$data" --quiet \
          --sizes "${sizes[@]}" --optimizer sgd --lr "$lr" --momentum "$momentum" $(codec_opts "$codec") \
          --staleness "$s" --compensation local_step --json "$cell.json" > "$cell.log" 2>&1 || true
      done
    done
  done
done
python3 - "$out" "$models" "$lrs" "$codecs" "$stalenesses" <<'PY'
import json, pathlib, sys
out, models, lrs, codecs, stal = sys.argv[1:]
stal = stal.split()
def acc(name, lr, codec, s):
    f = pathlib.Path(out) / f"{name}-lr{lr}-{codec}-s{s}.json"
    if not f.exists():
        log = f.with_suffix(".log")
        return None, ("diverged" if log.exists() and "non-finite" in log.read_text() else "not run")
    return json.loads(f.read_text())["accuracy"], ""
for m in models.split(";"):
    name, sizes = m.split("=")
    for lr in lrs.split():
        print(f"\n{name} ({sizes.replace(',', '-')}), SGD lr {lr} momentum 0.9:\n")
        print("| codec | " + " | ".join(f"s = {s}" for s in stal) + " | worst s > 0 − s = 0 (points) |")
        print("|---" * (len(stal) + 2) + "|")
        for c in codecs.split():
            cells, vals = [], []
            for s in stal:
                a, why = acc(name, lr, c, s)
                cells.append(f"{a:.4f}" if a is not None else why)
                vals.append(a)
            drop = ""
            if vals[0] is not None and len(vals) > 1:
                rest = [v for v in vals[1:] if v is not None]
                if "diverged" in cells[1:]:
                    drop = "diverged"
                elif rest:
                    drop = f"{100 * (min(rest) - vals[0]):+.2f}"
            print(f"| {c} | " + " | ".join(cells) + f" | {drop} |")
PY
