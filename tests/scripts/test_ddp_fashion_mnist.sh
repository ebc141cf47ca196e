#!/usr/bin/env bash
# scripts/ddp_fashion_mnist.py, the PyTorch DDP baseline: 2 gloo processes on loopback (started by
# scripts/sluice-run) train 20 steps with each hook and write the example's JSON; the JSON must
# describe that run (workers, steps, evaluations, bytes) and the model must have learnt. Its
# splitmix64, weights and shards must be the C++ example's. Skipped (77) where no python3 imports
# torch (scripts/packages.txt group ddp; test.sh does not install it, a machine may have it).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=../../scripts/lib.sh
source "$root/scripts/lib.sh"
py=$(sluice_torch_python) || { echo "SKIP: no python3 imports torch (apt-get install python3-torch)"; exit 77; }
[[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]] ||
  { echo "SKIP: dataset-fashion-mnist is not installed"; exit 77; }
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# The example's random streams, value for value (examples/fashion_mnist/mlp.hpp, trainer.hpp).
"$py" - "$root/scripts" << 'PY' || fail "the script's seeds differ from the example's"
import sys
sys.path.insert(0, sys.argv[1])
import ddp_fashion_mnist as d
assert d.mix(0) == 0xE220A8397B1DCDAF, hex(d.mix(0))  # splitmix64's first output from state 0
w = d.init_weight(256, 784, 1)
bound = (6.0 / 784) ** 0.5
assert w.shape == (256, 784) and abs(w).max() <= bound and abs(w).max() > 0.99 * bound
f = d.np.float32
u = f(d.mix(d.mix(1) ^ 5) >> 40) * f(2.0**-24)  # uniform01(seed 1, element 5) in fp32, as mlp.hpp
assert w[0, 5] == (f(2) * u - f(1)) * d.np.sqrt(f(6) / f(784)), (w[0, 5], u)
shards = [d.shard(600, r, 4, 1) for r in range(4)]
assert sorted(sum(shards, [])) == list(range(600)) and shards[0] != list(range(150))
# Values printed by a program built from the example's headers (mlp(sizes, 1).parameters(),
# shard(60000, 1, 4, 1), then its epoch-0 reshuffle on rank 1), as %.9g: fp32 round-trips.
w1, w2 = w.ravel(), d.init_weight(128, 256, 2).ravel()
for got, want in ((w1[0], "-0.0230620299"), (w1[5], "0.0336709619"), (w1[200703], "-0.0140714999"),
                  (w2[1000], "-0.0939599127")):
    assert got == f(float(want)), (got, want)
m = d.shard(60000, 1, 4, 1)
assert (m[0], m[1], m[14999]) == (37501, 9443, 46714), (m[0], m[1], m[14999])
d.reshuffle(m, 1, 1, 0)
assert (m[0], m[1], m[14999]) == (14287, 25107, 32121), (m[0], m[1], m[14999])
PY

for hook in none fp16 powersgd; do
  "$root/scripts/sluice-run" -n 2 --quiet --timeout 240 -- "$py" "$root/scripts/ddp_fashion_mnist.py" --hook "$hook" \
    --powersgd-start-iter 10 --max-steps 20 --eval-every 10 --json "$dir/$hook.json" > "$dir/$hook.log" 2>&1 ||
    { cat "$dir/$hook.log"; fail "--hook $hook: the run failed"; }
  "$py" - "$dir/$hook.json" "$hook" << 'PY' || { cat "$dir/$hook.log"; fail "--hook $hook: wrong JSON"; }
import json, sys
r, hook = json.load(open(sys.argv[1])), sys.argv[2]
dense = 4 * 235146  # fp32 bytes of the MLP's gradient
assert r["trainer"] == "pytorch_ddp" and r["hook"] == hook and r["workers"] == 2 and r["steps"] == 20, r
assert [p["step"] for p in r["curve"]] == [10, 20], r["curve"]
assert r["dense_bytes"] == 20 * dense, r["dense_bytes"]
# A ring allreduce of 2 workers sends each tensor once per worker: fp32, half of it, or less.
want = {"none": 20 * dense, "fp16": 10 * dense}.get(hook)
assert (r["sent_bytes"] == want) if want else (0 < r["sent_bytes"] < 20 * dense), r["sent_bytes"]
assert r["curve"][-1]["sent_bytes"] == r["sent_bytes"] and r["accuracy"] == r["curve"][-1]["accuracy"]
assert r["accuracy"] > 0.5, f"test accuracy {r['accuracy']} after 20 steps: it did not learn"
assert 0 < r["train_seconds"] <= r["wall_seconds"] and r["time_to_target"] == -1
PY
done
# SGD with momentum (scripts/bench-e2e.sh's ddp_sgd): torch.optim.SGD, named in the JSON.
"$root/scripts/sluice-run" -n 2 --quiet --timeout 240 -- "$py" "$root/scripts/ddp_fashion_mnist.py" --optimizer sgd \
  --lr 0.05 --momentum 0.9 --max-steps 20 --eval-every 10 --json "$dir/sgd.json" > "$dir/sgd.log" 2>&1 ||
  { cat "$dir/sgd.log"; fail "--optimizer sgd: the run failed"; }
"$py" - "$dir/sgd.json" << 'PY' || { cat "$dir/sgd.log"; fail "--optimizer sgd: wrong JSON"; }
import json, sys
r = json.load(open(sys.argv[1]))
assert (r["optimizer"], r["lr"], r["momentum"], r["steps"]) == ("sgd", 0.05, 0.9, 20), r
assert r["accuracy"] > 0.5, f"test accuracy {r['accuracy']} after 20 steps of SGD: it did not learn"
PY
echo "ok: 3 hooks and SGD, 2 gloo processes"
