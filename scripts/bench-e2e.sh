#!/usr/bin/env bash
# scripts/bench-e2e.sh [BUILD_DIR] (run by `scripts/bench.sh e2e`; default build/release). Needs root.
# Time to a target test accuracy on Fashion-MNIST (examples/fashion_mnist, 4 workers): dense fp32
# through the ring allreduce (ZeroMQ) and through Open MPI's MPI_Allreduce (mpirun), against
# block_top_k 1 %, top_k 1 % and maxmin_quantize 4 bit, each with residual error feedback. Every
# rank runs in its own network namespace behind a tbf-shaped veth link (scripts/netns.sh), at
# each rate of RATES.
#
#   1. No link: each configuration once on `local` threads (all EPOCHS: the final accuracies, the
#      steps to the target, and the floor compute sets), MPI_Allreduce under mpirun on loopback.
#   2. Shaped: each configuration to the target. Pairs named in PROJECT (rate:config) would take
#      too long: they run PROJECT_EPOCHS epochs to measure the shaped step time, and their time to
#      the target is projected as that step time x the steps to the target without a link.
#   3. Summary: BUILD_DIR/bench/e2e.json and e2e.md, plot ${PLOT:-BUILD_DIR/bench/e2e.png}.
#
# PyTorch DDP on the same job (scripts/ddp_fashion_mnist.py: gloo, one process per worker) runs
# as configurations ddp (DDP as it comes), ddp_fp16 (fp16_compress_hook) and ddp_powersgd
# (powerSGD_hook, rank 1 from step 351), in the same phases: no link, 4 processes on loopback
# through scripts/sluice-run; shaped, one process per rank namespace as the ZeroMQ runs. They are
# in the default CONFIGS when python3-torch is importable (scripts/packages.txt group ddp).
#
# Knobs: RATES ("100mbit 500mbit 1gbit"), CONFIGS ("block_top_k mpi_dense ring_dense top_k
# maxmin4", then "ddp ddp_fp16 ddp_powersgd" with torch; any of them + _sgd, e.g. top_k_sgd or
# ddp_sgd, runs SGD momentum 0.9 at SGD_LR (0.05) instead of Adam at LR), TARGET (0.88), EPOCHS (15), LR (1e-3), PROJECT ("100mbit:ring_dense
# 100mbit:mpi_dense"; PROJECT= measures every pair), PROJECT_EPOCHS (1), PHASES ("local shaped
# summary"), SKIP_BUILD=1. Where a pair has both a measured run and a step-time run, the summary
# reports the measured time and the projection beside it.
# One JSON per run (the example's --json) under BUILD_DIR/bench/e2e/, logs beside them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
cd "$SLUICE_ROOT"
build=${1:-build/release}
[[ $(id -u) == 0 ]] || { echo "bench-e2e.sh: needs root (ip netns, tc)" >&2; exit 2; }
command -v gnuplot >/dev/null || sluice_install plot
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  sluice_install build core engines examples bench
  cmake --preset release -DSLUICE_BUILD_EXAMPLES=ON >/dev/null
  cmake --build "$build" -j "$(sluice_jobs)" --target fashion_mnist
fi
fm=$(realpath "$build/examples/fashion_mnist/fashion_mnist")
[[ -x $fm ]] || { echo "bench-e2e.sh: $fm not built" >&2; exit 2; }

RATES=${RATES:-"100mbit 500mbit 1gbit"}
torch_py=$(sluice_torch_python || true)
default_configs="block_top_k mpi_dense ring_dense top_k maxmin4"
[[ -n $torch_py ]] && default_configs+=" ddp ddp_fp16 ddp_powersgd"
CONFIGS=${CONFIGS:-$default_configs}
if [[ " $CONFIGS " == *" ddp"* && -z $torch_py ]]; then
  echo "bench-e2e.sh: CONFIGS names a DDP configuration but no python3 imports torch; install the ddp group" \
    "of scripts/packages.txt (apt-get install python3-torch python3-numpy libopenblas0-pthread)" >&2
  exit 2
fi
ddp=(--batch 64 --seed 1 --eval-every 117)
TARGET=${TARGET:-0.88}
EPOCHS=${EPOCHS:-15}
LR=${LR:-1e-3}
PROJECT=${PROJECT-"100mbit:ring_dense 100mbit:mpi_dense"}
PROJECT_EPOCHS=${PROJECT_EPOCHS:-1}
PHASES=${PHASES:-"local shaped summary"}
out=$(realpath -m "$build/bench/e2e")
mkdir -p "$out"
common=(--batch 64 --staleness 1 --seed 1 --eval-every 117)
# One OpenMP thread per stage thread: 4 workers share the machine's cores.
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# A configuration's arguments: its codec or hook, then its optimizer. The _sgd ones run SGD with
# momentum 0.9 at SGD_LR (0.05) instead of Adam at LR (docs/performance/e2e.md: top_k 1 % + residual
# reaches the target in fewer steps with it).
config_args() {
  local opt="--optimizer adam --lr $LR"
  [[ $1 == *_sgd ]] && opt="--optimizer sgd --lr ${SGD_LR:-0.05} --momentum 0.9"
  case ${1%_sgd} in
    block_top_k) echo "--codec block_top_k --ratio 0.01 --feedback residual $opt" ;;
    top_k) echo "--codec top_k --ratio 0.01 --feedback residual $opt" ;;
    maxmin4) echo "--codec maxmin_quantize --bits 4 --feedback residual $opt" ;;
    ring_dense) echo "--codec identity --feedback none $opt" ;;
    mpi_dense) echo "--codec identity --feedback none --exchange mpi_allreduce $opt" ;;
    ddp) echo "--hook none $opt" ;;
    ddp_fp16) echo "--hook fp16 $opt" ;;
    ddp_powersgd) echo "--hook powersgd --powersgd-rank 1 --powersgd-start-iter 351 $opt" ;;
    *) echo "bench-e2e.sh: unknown configuration '$1'" >&2; exit 2 ;;
  esac
}
is_ddp() { [[ $1 == ddp* ]]; }
has_phase() { [[ " $PHASES " == *" $1 "* ]]; }
projected() { [[ " $PROJECT " == *" $1:$2 "* ]]; }

# ---- 1. no link --------------------------------------------------------------------------------
if has_phase local; then
  for c in $CONFIGS; do
    # shellcheck disable=SC2046
    if is_ddp "$c"; then
      echo "== no link: $c (PyTorch DDP, gloo: sluice-run -n 4, TCP on loopback), $EPOCHS epochs"
      "$here/sluice-run" -n 4 --quiet -- "$torch_py" "$here/ddp_fashion_mnist.py" "${ddp[@]}" --epochs "$EPOCHS" \
        $(config_args "$c") --json "$out/$c-nolink.json" > "$out/$c-nolink.log" 2>&1
    elif [[ $c == mpi_dense ]]; then
      echo "== no link: $c (mpirun -np 4, TCP on loopback), $EPOCHS epochs"
      mpirun -np 4 --oversubscribe --bind-to none --mca btl tcp,self -x OMP_NUM_THREADS -x OMP_WAIT_POLICY \
        "$fm" --transport mpi "${common[@]}" --epochs "$EPOCHS" $(config_args "$c") \
        --json "$out/$c-nolink.json" > "$out/$c-nolink.log" 2>&1
    else
      echo "== no link: $c (4 threads, local transport), $EPOCHS epochs"
      "$fm" --transport local --workers 4 "${common[@]}" --epochs "$EPOCHS" $(config_args "$c") \
        --json "$out/$c-nolink.json" > "$out/$c-nolink.log" 2>&1
    fi
    tail -1 "$out/$c-nolink.log"
  done
fi

# ---- 2. shaped links ---------------------------------------------------------------------------
if has_phase shaped; then
  export NETNS_RANKS=4 NETNS_PREFIX=${NETNS_PREFIX:-slce$$} NETNS_SOURCE_ONLY=1
  # shellcheck source=netns.sh
  source "$here/netns.sh"
  trap netns_down EXIT
  trap 'exit 130' INT TERM
  port=29600
  for rate in $RATES; do
    export NETNS_RATE=$rate
    netns_down
    netns_up
    # mpirun lives in the bridge namespace and reaches its ranks (PMIx, OOB) over br0.
    ip -n "${NETNS_PREFIX}br" addr add "${NETNS_SUBNET}.254/24" dev br0
    for c in $CONFIGS; do
      if projected "$rate" "$c"; then
        name=$c-$rate-steptime
        run=(--epochs "$PROJECT_EPOCHS")
        echo "== $rate: $c, $PROJECT_EPOCHS epoch(s) for the step time (projected)"
      else
        name=$c-$rate
        run=(--epochs "$EPOCHS" --target-accuracy "$TARGET")
        echo "== $rate: $c to $TARGET"
      fi
      # shellcheck disable=SC2046
      if [[ $c == mpi_dense ]]; then
        ip netns exec "${NETNS_PREFIX}br" env PMIX_MCA_ptl_tcp_remote_connections=1 \
          PMIX_MCA_ptl_tcp_if_include=br0 timeout 1800 mpirun -np 4 --oversubscribe --bind-to none \
          -x NETNS_PREFIX -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x PMIX_MCA_ptl_tcp_remote_connections \
          --mca oob_tcp_if_include br0 --mca btl tcp,self --mca btl_tcp_if_include "${NETNS_SUBNET}.0/24" \
          "$here/netns-exec-rank.sh" "$fm" --transport mpi "${common[@]}" "${run[@]}" $(config_args "$c") \
          --json "$out/$name.json" > "$out/$name.log" 2>&1
      else
        port=$((port + 1))
        pids=()
        # ZeroMQ ranks, or DDP's gloo ranks (the script binds gloo to the rank's veth, SLUICE_ZMQ_HOST).
        if is_ddp "$c"; then
          cmd=("$torch_py" "$here/ddp_fashion_mnist.py" "${ddp[@]}")
        else
          cmd=("$fm" --transport zmq "${common[@]}")
        fi
        for ((r = 0; r < NETNS_RANKS; r++)); do
          NETNS_MASTER_PORT=$port netns_exec "$r" timeout 1800 "${cmd[@]}" "${run[@]}" \
            $(config_args "$c") --json "$out/$name.json" > "$out/$name.rank$r.log" 2>&1 &
          pids+=($!)
        done
        status=0
        for p in "${pids[@]}"; do wait "$p" || status=$?; done
        mv "$out/$name.rank0.log" "$out/$name.log"
        rm -f "$out/$name".rank*.log
        ((status == 0)) || { echo "bench-e2e.sh: $name failed ($status)" >&2; exit 1; }
      fi
      tail -1 "$out/$name.log"
    done
    netns_down
  done
fi

# ---- 3. summary and plot -----------------------------------------------------------------------
if has_phase summary; then
  commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  python3 "$here/e2e_summary.py" "$out" "$build/bench/e2e.json" "$build/bench/e2e.md" \
    "${PLOT:-$build/bench/e2e.png}" "$TARGET" "$EPOCHS" "$commit" "$RATES" "$CONFIGS"
  gnuplot "$out/plot.gp"
  cat "$build/bench/e2e.md"
  echo "wrote $build/bench/e2e.json, $build/bench/e2e.md, ${PLOT:-$build/bench/e2e.png}; runs in $out"
fi
