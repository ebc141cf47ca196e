#!/usr/bin/env bash
# The main job: an MLP (784-256-128-10) trained on Fashion-MNIST by 4 worker processes over ZeroMQ
# until the test accuracy reaches 0.88, compressed (block_top_k 1 % + residual error feedback +
# sparse Adam, staleness 1) against dense (identity codec, fp32 ring allreduce, Adam).
#
# As root, every worker sits in its own network namespace behind a 100 Mbit/s link shaped with tc
# tbf (scripts/bench-e2e.sh, scripts/netns.sh): what sluice is for. Without root it runs the same
# two jobs on loopback through scripts/sluice-run, where the link is not what limits the step, and
# says how to see the shaped result. Either way it prints the time to the target for each and
# writes a plot (accuracy against training time; gnuplot), whose path it prints.
# Where python3-torch is importable (or with DDP=1, which installs it: scripts/packages.txt group
# ddp), it also trains PyTorch DistributedDataParallel (gloo, fp32, Adam) on the same job
# (scripts/ddp_fashion_mnist.py) to the same target at the same rate, and sets sluice against it.
# Installs what is missing (including the dataset package) and builds Release first.
#
#   scripts/demo.sh                      # about 4 minutes as root on 2 cores (+4 with DDP), 1 on loopback
#   RATE=1gbit scripts/demo.sh           # another link rate (root)
#   DDP=0 scripts/demo.sh                # without PyTorch DDP even where torch is installed
#   MPI=1 scripts/demo.sh                # also dense through Open MPI's MPI_Allreduce (root; ~4 min more)
#   SHAPED=0 scripts/demo.sh             # loopback, as without root
#   TARGET=0.86 EPOCHS=8 scripts/demo.sh
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib.sh"
cd "$SLUICE_ROOT"
sluice_install build core engines examples
command -v gnuplot > /dev/null || sluice_install plot

TARGET=${TARGET:-0.88}
EPOCHS=${EPOCHS:-15}
RATE=${RATE:-100mbit}
build=build/demo
# Its own build directory, with the two codecs the demo runs (the pipelines of the other five are
# not compiled). Warnings are not errors here (scripts/test.sh makes them errors): a newer
# compiler's new warning must not stop the demo.
cmake --preset release -B "$build" -DSLUICE_BUILD_TESTS=OFF -DSLUICE_BUILD_BENCH=OFF -DSLUICE_BUILD_TOOLS=OFF \
  -DSLUICE_VERIFY_HEADERS=OFF -DSLUICE_WERROR=OFF "-DFASHION_MNIST_CODECS=identity;block_top_k" > /dev/null
cmake --build "$build" -j "$(sluice_jobs)" --target fashion_mnist
fm=$(realpath "$build/examples/fashion_mnist/fashion_mnist")
out=$(realpath -m "$build/bench/e2e")
plot=$(realpath -m "$build/demo.png")
rm -rf "$out"
mkdir -p "$out"

shaped=0
if [[ ${SHAPED:-1} == 1 && $(id -u) == 0 ]] && ip netns add "sldemo$$" 2> /dev/null; then
  ip netns del "sldemo$$"
  shaped=1
fi

# PyTorch DDP: where torch imports, or DDP=1 (then installed); DDP=0 leaves it out.
torch_py=""
if [[ ${DDP:-} != 0 ]]; then
  [[ ${DDP:-} == 1 ]] && ! sluice_torch_python > /dev/null && sluice_install ddp
  torch_py=$(sluice_torch_python || true)
  [[ ${DDP:-} == 1 && -z $torch_py ]] && { echo "demo.sh: DDP=1 but no python3 imports torch" >&2; exit 1; }
fi
configs="block_top_k ring_dense"
[[ ${MPI:-0} == 1 ]] && configs+=" mpi_dense"
[[ -n $torch_py ]] && configs+=" ddp"
if ((shaped)); then
  where="$RATE links (network namespaces, tc tbf)"
  echo "== 4 workers, each behind a $RATE link (tc tbf, network namespaces): compressed, then dense$(
    [[ -n $torch_py ]] && echo ", then PyTorch DDP"), to $TARGET"
  SKIP_BUILD=1 RATES=$RATE CONFIGS=$configs PROJECT= PHASES="shaped summary" TARGET=$TARGET EPOCHS=$EPOCHS \
    PLOT=$plot "$here/bench-e2e.sh" "$build" > "$out/bench-e2e.log" 2>&1 ||
    { tail -20 "$out/bench-e2e.log"; echo "demo.sh: the shaped runs failed; log: $out/bench-e2e.log" >&2; exit 1; }
  rate_name=$RATE
else
  where="loopback (no shaped link)"
  echo "== 4 workers on loopback (not root, or no network namespaces here): compressed, then dense$(
    [[ -n $torch_py ]] && echo ", then PyTorch DDP"), to $TARGET"
  export OMP_NUM_THREADS=1
  common=(--transport zmq --batch 64 --staleness 1 --epochs "$EPOCHS" --target-accuracy "$TARGET"
          --eval-every 117 --seed 1 --optimizer adam --lr 1e-3 --quiet)
  "$here/sluice-run" -n 4 --quiet -- "$fm" "${common[@]}" --codec block_top_k --ratio 0.01 --feedback residual \
    --json "$out/block_top_k-loopback.json"
  "$here/sluice-run" -n 4 --quiet -- "$fm" "${common[@]}" --codec identity --feedback none \
    --json "$out/ring_dense-loopback.json"
  configs="block_top_k ring_dense"
  if [[ -n $torch_py ]]; then
    "$here/sluice-run" -n 4 --quiet -- "$torch_py" "$here/ddp_fashion_mnist.py" --batch 64 --seed 1 --lr 1e-3 \
      --eval-every 117 --epochs "$EPOCHS" --target-accuracy "$TARGET" --quiet --json "$out/ddp-loopback.json"
    configs+=" ddp"
  fi
  rate_name=loopback
  python3 "$here/e2e_summary.py" "$out" "$out/summary.json" "$out/summary.md" "$plot" "$TARGET" "$EPOCHS" \
    "$(git rev-parse --short HEAD 2> /dev/null || echo unknown)" "$rate_name" "$configs"
  gnuplot "$out/plot.gp"
fi

# field FILE NAME: the first (top-level) value of NAME in a one-line JSON summary.
field() { grep -o "\"$2\":[^,}]*" "$1" | head -1 | cut -d: -f2 | tr -d '"'; }
row() {
  local f="$out/$1-$rate_name.json" name=$2
  [[ -f $f ]] || { printf '%-40s %s\n' "$name" "(no run)"; return; }
  local ttt
  ttt=$(awk -v t="$(field "$f" time_to_target)" 'BEGIN { if (t < 0) print "not reached"; else printf "%.1f s", t }')
  printf '%-40s %12s %9s %7s %10s %12s\n' "$name" "$ttt" "$(field "$f" accuracy)" "$(field "$f" steps)" \
    "$(awk -v t="$(field "$f" train_seconds)" 'BEGIN { printf "%.1f s", t }')" \
    "$(awk -v b="$(field "$f" sent_bytes)" 'BEGIN { printf "%.1f MB", b / 1e6 }')"
}
echo
echo "4 workers, $where, target $TARGET test accuracy:"
printf '%-40s %12s %9s %7s %10s %12s\n' run "to $TARGET" accuracy steps training "sent/worker"
row block_top_k "block_top_k 1 % + residual + adam"
row ring_dense "dense fp32 ring allreduce + adam"
[[ $configs == *mpi_dense* ]] && row mpi_dense "dense fp32 MPI_Allreduce + adam"
[[ $configs == *ddp* ]] && row ddp "PyTorch DDP (gloo, fp32) + adam"
c=$(field "$out/block_top_k-$rate_name.json" time_to_target 2> /dev/null || echo -1)
d=$(field "$out/ring_dense-$rate_name.json" time_to_target 2> /dev/null || echo -1)
awk -v c="$c" -v d="$d" 'BEGIN { if (c > 0 && d > 0) printf "compressed reaches %s %.1fx sooner than dense\n", "'"$TARGET"'", d / c }'
if [[ $configs == *ddp* ]]; then
  p=$(field "$out/ddp-$rate_name.json" time_to_target 2> /dev/null || echo -1)
  awk -v c="$c" -v p="$p" 'BEGIN { if (c > 0 && p > 0) printf "compressed reaches %s %.1fx sooner than PyTorch DDP\n", "'"$TARGET"'", p / c }'
fi
echo "plot (test accuracy against training time): $plot"
echo "JSON of each run (with its accuracy curve): $out/"
if ((!shaped)); then
  echo "On loopback the link does not limit the step. To see the ${RATE} links sluice is for, run as root:"
  echo "  sudo scripts/demo.sh      # each worker in a network namespace behind a tc-tbf-shaped link"
fi
