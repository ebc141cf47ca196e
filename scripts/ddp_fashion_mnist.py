#!/usr/bin/env python3
"""PyTorch DistributedDataParallel on the job of examples/fashion_mnist: the end-to-end baseline.

The MLP 784-256-128-10 (ReLU, softmax cross-entropy), the Debian package dataset-fashion-mnist read
and normalized as the example reads it, each worker a contiguous shard of one seeded permutation of
the training set reshuffled every epoch, batch 64 per worker, Adam (lr 1e-3), the whole test set
evaluated every --eval-every steps, stopping at --target-accuracy or after --epochs. One process
per worker, torch.distributed with the gloo backend from the torchrun-style variables RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT (what scripts/sluice-run and scripts/netns.sh set):

  scripts/sluice-run -n 4 -- python3 scripts/ddp_fashion_mnist.py --target-accuracy 0.88
  scripts/sluice-run -n 4 --shape 100mbit -- python3 scripts/ddp_fashion_mnist.py --hook powersgd

--hook none: DDP as it comes (its reducer allreduces fp32 buckets during backward); fp16: DDP's
default_hooks.fp16_compress_hook; powersgd: powerSGD_hook.powerSGD_hook with a PowerSGDState
(--powersgd-rank, --powersgd-start-iter; error feedback and warm start on, as PyTorch's defaults).

The same seeds as the C++ example, drawn the same way: the weights (He-uniform from splitmix64,
biases zero), the shard permutation and every epoch's order are the example's, value for value.
What differs is the arithmetic (torch's CPU kernels and optimizer against Eigen and sluice's Adam,
the order of the sums), and DDP is synchronous: staleness 0, where the example runs at staleness 1.

Rank 0 evaluates (the replicas are identical after every DDP step) and broadcasts the accuracy,
so every rank stops at the same step; evaluation time is excluded from the training time on every
rank. --json FILE writes the summary in the example's JSON form (scripts/e2e_summary.py reads
it). sent_bytes is counted, not measured on the wire: the payload a ring allreduce puts on the
link per worker, 2 (n - 1) / n of the bytes of every tensor the step allreduces (for --hook none
the fp32 gradients, for the hooks every tensor they hand to dist.all_reduce). Where rank 0 has an
interface of its own (a network namespace), wire_sent_bytes is what that interface transmitted
during training (TCP/IP headers and the evaluations' broadcasts included).
"""
import argparse
import fcntl
import gzip
import json
import os
import socket
import struct
import sys
import time

import numpy as np

M64 = (1 << 64) - 1


def mix(x):
    """splitmix64's finalizer on a Python int (examples/fashion_mnist/mlp.hpp: mix)."""
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def mix_np(x):
    """mix() over a numpy uint64 array (wrapping arithmetic)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def init_weight(out_features, in_features, seed):
    """He-uniform weights as the example draws them: (2 u - 1) sqrt(6 / fan_in), u = uniform01(seed, i)."""
    i = np.arange(in_features * out_features, dtype=np.uint64)
    with np.errstate(over="ignore"):
        u = (mix_np(np.uint64(mix(seed)) ^ i) >> np.uint64(40)).astype(np.float32) * np.float32(2.0**-24)
    bound = np.sqrt(np.float32(6.0) / np.float32(in_features))
    return ((np.float32(2) * u - np.float32(1)) * bound).reshape(out_features, in_features)


def shard(count, rank, workers, seed):
    """examples/fashion_mnist/trainer.hpp: shard()."""
    a = list(range(count))
    for i in range(count, 1, -1):
        j = mix((seed ^ 0x5EED ^ (i << 1)) & M64) % i
        a[i - 1], a[j] = a[j], a[i - 1]
    per = count // workers
    return a[per * rank : per * (rank + 1)]


def reshuffle(mine, seed, rank, epoch):
    """The example's fresh order of a shard every epoch, from (seed, rank, epoch)."""
    key = mix(seed ^ mix(((rank << 32) | epoch) & M64))
    for i in range(len(mine), 1, -1):
        j = mix((key + i) & M64) % i
        mine[i - 1], mine[j] = mine[j], mine[i - 1]


def read_idx(path, rank):
    """An IDX file of unsigned bytes (gzip or plain) with `rank` dimensions, checked as idx.hpp does."""
    hint = "install it with `apt-get install dataset-fashion-mnist` or pass --data DIR"
    if not os.path.exists(path):
        sys.exit(f"ddp_fashion_mnist: cannot open '{path}' (no such file); {hint}")
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 + 4 * rank or raw[:3] != b"\x00\x00\x08" or raw[3] != rank:
        sys.exit(f"ddp_fashion_mnist: '{path}' is not an IDX file of unsigned bytes with {rank} dimensions; {hint}")
    dims = struct.unpack(">" + "I" * rank, raw[4 : 4 + 4 * rank])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * rank)
    if data.size != int(np.prod(dims)):
        sys.exit(f"ddp_fashion_mnist: '{path}' holds {data.size} bytes of data, its header announces {np.prod(dims)}")
    return data.reshape(dims)


def load(data_dir, split):
    """Images normalized as idx.hpp does ((x / 255 - 0.2860) / 0.3530), labels as int64."""
    img = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"), 3)
    lab = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"), 1)
    if img.shape[0] != lab.shape[0] or lab.max() >= 10:
        sys.exit(f"ddp_fashion_mnist: {split}: {img.shape[0]} images, {lab.shape[0]} labels (max {lab.max()}); "
                 "reinstall dataset-fashion-mnist")
    x = (img.reshape(img.shape[0], -1).astype(np.float32) / np.float32(255) - np.float32(0.2860)) * (
        np.float32(1) / np.float32(0.3530))
    return x, lab.astype(np.int64)


def interface_of(address):
    """The name of the network interface holding IPv4 `address`, or None (SIOCGIFADDR on each)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            try:
                got = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            if socket.inet_ntoa(got[20:24]) == address:
                return name
    finally:
        s.close()
    return None


# Objects that must outlive main(): torch 1.13's DDP Reducer, when destroyed, joins a gloo worker
# thread that may still be freeing a tensor and so waits for the GIL the destroying thread holds;
# the process then never ends. Kept here, they are never destroyed: os._exit below ends the process.
_ALIVE = []


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hook", choices=["none", "fp16", "powersgd"], default="none",
                    help="DDP communication hook (none: DDP's own fp32 allreduce)")
    ap.add_argument("--powersgd-rank", type=int, default=1,
                    help="PowerSGDState.matrix_approximation_rank (PyTorch's default and recommended start: 1)")
    ap.add_argument("--powersgd-start-iter", type=int, default=351,
                    help="PowerSGDState.start_powerSGD_iter: plain allreduce before it (PyTorch's docs: about 10 %% "
                         "of the training steps; 351 = 10 %% of 15 epochs of 234 steps)")
    ap.add_argument("--batch", type=int, default=64, help="images per worker and step")
    ap.add_argument("--epochs", type=int, default=15, help="epochs at most")
    ap.add_argument("--optimizer", choices=["adam", "sgd"], default="adam",
                    help="torch.optim.Adam, or torch.optim.SGD (the example's sluice::adam and sluice::sgd)")
    ap.add_argument("--lr", type=float, default=1e-3, help="learning rate")
    ap.add_argument("--momentum", type=float, default=0.0, help="SGD's momentum (dampening 0, no Nesterov)")
    ap.add_argument("--seed", type=int, default=1, help="seed of initialization, shards and order")
    ap.add_argument("--eval-every", type=int, default=117, help="evaluate every this many steps (0: once per epoch)")
    ap.add_argument("--target-accuracy", type=float, default=0.0, help="stop when the test accuracy reaches it")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: no limit; tests)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[784, 256, 128, 10], help="layer widths, input first")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="directory of the four .gz files")
    ap.add_argument("--json", default="", help="write the summary as JSON to this file (- for stdout)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    o = ap.parse_args()

    for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        if v not in os.environ:
            sys.exit(f"ddp_fashion_mnist: {v} is not set; start the workers with scripts/sluice-run -n N -- "
                     "python3 scripts/ddp_fashion_mnist.py (or torchrun, or scripts/netns.sh)")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # gloo picks its interface from the host name unless told: in a network namespace, the one
    # holding this rank's address (SLUICE_ZMQ_HOST, set by netns.sh and sluice-run --shape); on
    # loopback, lo.
    if "GLOO_SOCKET_IFNAME" not in os.environ:
        host = os.environ.get("SLUICE_ZMQ_HOST") or (
            "127.0.0.1" if os.environ["MASTER_ADDR"] in ("127.0.0.1", "localhost") else None)
        name = interface_of(host) if host else None
        if name:
            os.environ["GLOO_SOCKET_IFNAME"] = name

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)

    train_x, train_y = load(o.data, "train")
    test_x, test_y = load(o.data, "t10k")
    if train_x.shape[1] != o.sizes[0]:
        sys.exit(f"ddp_fashion_mnist: images have {train_x.shape[1]} pixels but --sizes starts at {o.sizes[0]}")
    train_x, train_y = torch.from_numpy(train_x), torch.from_numpy(train_y)
    test_x, test_y = torch.from_numpy(test_x), torch.from_numpy(test_y)

    layers = []
    for k in range(len(o.sizes) - 1):
        lin = torch.nn.Linear(o.sizes[k], o.sizes[k + 1])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(init_weight(o.sizes[k + 1], o.sizes[k], o.seed + k)))
            lin.bias.zero_()
        layers.append(lin)
        if k + 2 < len(o.sizes):
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    numel = sum(p.numel() for p in model.parameters())
    net = DDP(model)
    _ALIVE.append(net)  # see _ALIVE: never destroyed before os._exit

    # Payload a ring allreduce sends per worker: 2 (n - 1) / n of the tensor.
    ring = 2.0 * (world - 1) / world
    sent = [0.0]
    if o.hook != "none":
        plain_all_reduce = dist.all_reduce

        def counting_all_reduce(tensor, *args, **kwargs):
            sent[0] += ring * tensor.numel() * tensor.element_size()
            return plain_all_reduce(tensor, *args, **kwargs)

        dist.all_reduce = counting_all_reduce  # the hooks call dist.all_reduce
    if o.hook == "fp16":
        net.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif o.hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=o.powersgd_rank,
                                            start_powerSGD_iter=o.powersgd_start_iter, random_seed=o.seed)
        net.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    if o.optimizer == "adam":
        opt = torch.optim.Adam(net.parameters(), lr=o.lr)
    else:
        opt = torch.optim.SGD(net.parameters(), lr=o.lr, momentum=o.momentum)

    mine = shard(train_x.shape[0], rank, world, o.seed)
    steps_per_epoch = len(mine) // o.batch
    if steps_per_epoch == 0:
        sys.exit(f"ddp_fashion_mnist: a shard of {len(mine)} images holds no batch of {o.batch}")
    eval_every = o.eval_every if o.eval_every > 0 else steps_per_epoch

    def accuracy():
        model.eval()
        with torch.no_grad():
            correct = sum(int((model(test_x[i:i + 500]).argmax(1) == test_y[i:i + 500]).sum())
                          for i in range(0, test_x.shape[0], 500))
        model.train()
        return correct / test_x.shape[0]

    # Bytes on the wire where the rank has an interface of its own (a network namespace): what its
    # interface transmitted during training, headers and evaluation broadcasts included.
    iface = os.environ.get("GLOO_SOCKET_IFNAME", "lo")
    tx_file = f"/sys/class/net/{iface}/statistics/tx_bytes"

    def tx_bytes():
        if iface == "lo" or not os.path.exists(tx_file):
            return None
        with open(tx_file) as f:
            return int(f.read())

    dist.barrier()
    tx0 = tx_bytes()
    start = time.perf_counter()
    eval_seconds, loss_sum, loss_count = 0.0, 0.0, 0
    curve, steps, epochs, time_to_target, done = [], 0, 0, -1.0, False
    for epoch in range(o.epochs):
        if done:
            break
        epochs = epoch + 1
        reshuffle(mine, o.seed, rank, epoch)
        order = torch.tensor(mine, dtype=torch.int64)
        for s in range(steps_per_epoch):
            idx = order[s * o.batch:(s + 1) * o.batch]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(net(train_x[idx]), train_y[idx])
            loss.backward()  # DDP allreduces the gradients (through the hook) here
            opt.step()
            if o.hook == "none":
                sent[0] += ring * 4 * numel
            steps += 1
            loss_sum += float(loss)
            loss_count += 1
            last = (epoch + 1 == o.epochs and s + 1 == steps_per_epoch) or steps == o.max_steps
            if steps % eval_every != 0 and not last:
                continue
            e0 = time.perf_counter()
            acc = torch.tensor([accuracy() if rank == 0 else 0.0], dtype=torch.float64)
            dist.broadcast(acc, 0)  # the same decision on every rank
            acc = float(acc)
            eval_seconds += time.perf_counter() - e0
            trained = time.perf_counter() - start - eval_seconds
            curve.append({"epoch": epoch + 1, "step": steps, "seconds": round(trained, 3),
                          "loss": round(loss_sum / loss_count, 5), "accuracy": round(acc, 4),
                          "sent_bytes": int(sent[0])})
            loss_sum, loss_count = 0.0, 0
            if o.target_accuracy > 0 and acc >= o.target_accuracy:
                time_to_target, done = trained, True
            if not o.quiet and rank == 0:
                print(f"epoch {epoch + 1:>2}  step {steps:>6}  loss {curve[-1]['loss']:.4f}  test accuracy {acc:.4f}  "
                      f"sent {sent[0] / 1e6:8.2f} MB  {sent[0] / 1e6 / max(trained, 1e-9):7.2f} MB/s  {trained:6.1f} s",
                      flush=True)
            if steps == o.max_steps:
                done = True
            if done:
                break
    wall = time.perf_counter() - start
    train_seconds = wall - eval_seconds
    tx1 = tx_bytes()
    dist.barrier()
    dist.destroy_process_group()
    if rank != 0:
        return 0

    hook = {"none": "identity", "fp16": "fp16", "powersgd": "power_sgd"}[o.hook]
    acc = curve[-1]["accuracy"] if curve else 0.0
    target = (f"target {o.target_accuracy:.4f} reached after {time_to_target:.1f} s" if time_to_target >= 0
              else f"target {o.target_accuracy:.4f} not reached") if o.target_accuracy > 0 else "no target"
    print(f"summary: PyTorch DDP (gloo, hook {o.hook}) + {o.optimizer}, {world} workers, staleness 0: test accuracy "
          f"{acc:.4f} after {epochs} epochs ({steps} steps), {wall:.1f} s ({train_seconds:.1f} s training), {target}, "
          f"sent {sent[0] / 1e6:.2f} MB per worker ({100 * sent[0] / (4 * numel * max(steps, 1)):.1f} % of the fp32 "
          "gradients' bytes)", flush=True)
    summary = {
        "trainer": "pytorch_ddp", "torch": torch.__version__, "hook": o.hook, "codec": hook,
        "exchange": "ddp_gloo", "ratio": 1, "bits": 16 if o.hook == "fp16" else 32, "feedback":
        "residual" if o.hook == "powersgd" else "none", "optimizer": o.optimizer, "lr": o.lr,
        "momentum": o.momentum if o.optimizer == "sgd" else 0.0, "transport": "gloo",
        "workers": world, "staleness": 0, "compensation": "none", "batch": o.batch, "seed": o.seed,
        "sizes": o.sizes, "target_accuracy": o.target_accuracy, "accuracy": acc, "epochs": epochs, "steps": steps,
        "wall_seconds": round(wall, 3), "train_seconds": round(train_seconds, 3),
        "time_to_target": round(time_to_target, 3), "sent_bytes": int(sent[0]),
        "dense_bytes": 4 * numel * steps, "sent_bytes_counted": "ring allreduce payload, 2(n-1)/n",
        "curve": curve,
    }
    if tx0 is not None and tx1 is not None:
        summary["wire_sent_bytes"] = tx1 - tx0
        summary["wire_interface"] = iface
    if o.hook == "powersgd":
        summary["powersgd"] = {"matrix_approximation_rank": o.powersgd_rank,
                               "start_powerSGD_iter": o.powersgd_start_iter}
    text = json.dumps(summary, separators=(",", ":")) + "\n"
    if o.json == "-":
        sys.stdout.write(text)
    elif o.json:
        with open(o.json, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skips the interpreter's teardown, which would destroy _ALIVE's DDP Reducer (see _ALIVE).
    os._exit(rc)
