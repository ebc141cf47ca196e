#!/usr/bin/env bash
# Heterogeneous workers: Fashion-MNIST (examples/fashion_mnist), 4 ZeroMQ worker processes on
# loopback, each an emulated accelerator (--device-us-per-image DEVICE_US: every forward/backward
# also waits that long per image, off the CPU, so that four workers on a 2-core machine behave like
# four GPUs rather than four threads sharing two cores), rank 3 computing SLOW_FACTOR (2) times
# slower (--slow-rank/--slow-factor). Equal batches
# (64 per worker) against the solver's per-worker batches (sluice::allocate_batches over the
# workers' measured compute, as --plan-batches prints them), both at the same global batch
# (4 x 64 = 256 images per step, so an epoch is the same 234 steps and evaluations fall on the same
# images seen). Runs alternate, REPS times each; one JSON per run under BUILD_DIR/bench/hetero/ and
# a table of the time to TARGET per run and the medians.
#
#   scripts/bench-hetero.sh BUILD_DIR    # BUILD_DIR has examples/fashion_mnist built with block_top_k
# Knobs: REPS (3), TARGET (0.88), SLOW_FACTOR (2), DEVICE_US (1000), BATCHES (empty: a one-epoch
# --plan-batches run decides them first; its sizes are then used by every planned run), CODEC_ARGS.
set -euo pipefail
build=$(realpath "${1:?usage: scripts/bench-hetero.sh BUILD_DIR}")
fm="$build/examples/fashion_mnist/fashion_mnist"
[[ -x $fm ]] || { echo "bench-hetero.sh: $fm is not built" >&2; exit 2; }
REPS=${REPS:-3}
TARGET=${TARGET:-0.88}
SLOW_FACTOR=${SLOW_FACTOR:-2}
DEVICE_US=${DEVICE_US:-1000}
CODEC_ARGS=${CODEC_ARGS:-"--codec block_top_k --ratio 0.01 --feedback residual"}
out="$build/bench/hetero"
mkdir -p "$out"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
# shellcheck disable=SC2206
common=(--transport zmq --spawn --workers 4 --batch 64 --staleness 1 --seed 1 --optimizer adam --lr 1e-3
        --eval-every 117 --slow-rank 3 --slow-factor "$SLOW_FACTOR" --device-us-per-image "$DEVICE_US"
        $CODEC_ARGS)
if [[ -z ${BATCHES:-} ]]; then
  "$fm" "${common[@]}" --epochs 1 --plan-batches --json "$out/plan.json" > "$out/plan.log" 2>&1
  BATCHES=$(sed -n 's/^plan-batches: --batch-sizes //p' "$out/plan.log")
  grep '^plan-batches' "$out/plan.log"
fi
echo "planned batches: $BATCHES (load: $(cut -d' ' -f1-3 /proc/loadavg))"
for ((i = 1; i <= REPS; i++)); do
  "$fm" "${common[@]}" --epochs 15 --target-accuracy "$TARGET" --quiet --json "$out/equal-$i.json" > "$out/equal-$i.log" 2>&1
  echo "equal-$i: $(tail -1 "$out/equal-$i.log") (load $(cut -d' ' -f1 /proc/loadavg))"
  # shellcheck disable=SC2086
  "$fm" "${common[@]}" --epochs 15 --target-accuracy "$TARGET" --quiet --batch-sizes $BATCHES --json "$out/planned-$i.json" > "$out/planned-$i.log" 2>&1
  echo "planned-$i: $(tail -1 "$out/planned-$i.log") (load $(cut -d' ' -f1 /proc/loadavg))"
done
python3 - "$out" "$REPS" <<'PY'
import json, pathlib, statistics, sys
out, reps = pathlib.Path(sys.argv[1]), int(sys.argv[2])
rows = {}
print("| run | batches | steps | time to target (s) | final accuracy |")
print("|---|---|---|---|---|")
for kind in ("equal", "planned"):
    for i in range(1, reps + 1):
        j = json.loads((out / f"{kind}-{i}.json").read_text())
        rows.setdefault(kind, []).append(j)
        b = " ".join(map(str, j["batches"])) or "64 64 64 64"
        print(f"| {kind}-{i} | {b} | {j['steps']} | {j['time_to_target']:.1f} | {j['accuracy']:.4f} |")
med = {k: statistics.median(r["time_to_target"] for r in v) for k, v in rows.items()}
acc = {k: statistics.median(r["accuracy"] for r in v) for k, v in rows.items()}
print(f"\nmedian time to target: equal {med['equal']:.1f} s, planned {med['planned']:.1f} s: "
      f"{med['equal'] / med['planned']:.2f}x sooner; median final accuracy {acc['equal']:.4f} / {acc['planned']:.4f}")
PY
