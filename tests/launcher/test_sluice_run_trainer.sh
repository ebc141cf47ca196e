#!/usr/bin/env bash
# The Fashion-MNIST example as 3 ZeroMQ processes started by scripts/sluice-run, which is all the
# rendezvous they get: one epoch of a small MLP must train (test accuracy >= 0.75) with 3 workers.
# Usage: test_sluice_run_trainer.sh SLUICE_RUN FASHION_MNIST CODEC FEEDBACK
set -uo pipefail
run=$1 fm=$2 codec=$3 feedback=$4
out=$("$run" -n 3 --timeout 240 -- "$fm" --transport zmq --sizes 784 32 10 --epochs 1 --codec "$codec" \
  --feedback "$feedback" --quiet --json - 2>&1)
rc=$?
echo "$out"
((rc == 0)) || { echo "FAILED: sluice-run exited with $rc"; exit 1; }
json=$(grep -o '^\[0\] {.*}$' <<< "$out" | cut -c5-)
[[ -n $json ]] || { echo "FAILED: rank 0 printed no JSON summary"; exit 1; }
grep -q '"transport":"zmq","workers":3,' <<< "$json" || { echo "FAILED: not 3 ZeroMQ workers"; exit 1; }
acc=$(grep -o '"accuracy":[0-9.]*' <<< "$json" | head -1 | cut -d: -f2)
awk -v a="$acc" 'BEGIN { exit !(a >= 0.75) }' || { echo "FAILED: test accuracy $acc < 0.75 after one epoch"; exit 1; }
echo "ok: 3 ZeroMQ ranks through sluice-run, test accuracy $acc"
