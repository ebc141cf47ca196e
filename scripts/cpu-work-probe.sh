#!/usr/bin/env bash
# The pipeline's CPU work per step and rank (W) on ResNet-50's layout, measured with
# bench/pipeline/cpu_work_probe.cpp built against each given commit's headers, interleaved round by
# round so that the commits share the host's state. Prints every run, then the medians.
#
#   scripts/cpu-work-probe.sh [-r ROUNDS] [-c CODEC] COMMIT...    (COMMIT "." is the working tree)
#
# e.g. scripts/cpu-work-probe.sh 0c0ace1 .   Needs g++, libfmt-dev, libzmq3-dev, nlohmann-json3-dev,
# libeigen3-dev and librandom123-dev (older trees include them); run on a quiet host.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=5 codec=block_top_k
while getopts "r:c:" opt; do
  case $opt in
    r) rounds=$OPTARG ;;
    c) codec=$OPTARG ;;
    *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: $0 [-r ROUNDS] [-c CODEC] COMMIT..." >&2; exit 2; }
work=$(mktemp -d)
trap 'for d in "$work"/tree-*; do [ -d "$d" ] && git -C "$root" worktree remove --force "$d"; done; rm -rf "$work"' EXIT
bins=()
for c in "$@"; do
  inc=$root/include
  if [ "$c" != "." ]; then
    git -C "$root" worktree add --detach "$work/tree-$c" "$c" > /dev/null 2>&1
    inc=$work/tree-$c/include
  fi
  bin=$work/probe-$c
  g++ -std=c++20 -O3 -DNDEBUG -fopenmp -I"$inc" -I/usr/include/eigen3 "$root/bench/pipeline/cpu_work_probe.cpp" \
    -o "$bin" -lfmt -lzmq -lpthread
  bins+=("$c:$bin")
done
layout=$root/bench/pipeline/layouts/resnet50.json
log=$work/runs.txt
for ((i = 1; i <= rounds; i++)); do
  for ranks in 1 2; do
    for cb in "${bins[@]}"; do
      c=${cb%%:*} bin=${cb#*:}
      for homes in 0 1 2; do  # an older tree runs what it offers: skip the repeats
        out=$("$bin" "$layout" "$codec" "$ranks" "$homes")
        [[ $out == *"homes=$homes "* ]] && echo "$c $out" | tee -a "$log"
      done
    done
  done
done
echo "medians of $rounds (ms):"
python3 - "$log" <<'PY'
import re, statistics, sys, collections
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) (\S+) ranks=(\d) homes=(\d) cpu_work_ms=([\d.]+)", line)
    d[(m[1], m[3], m[4])].append(float(m[5]))
for (c, r, h), v in sorted(d.items()):
    print(f"  {c:>10}  ranks {r}  homes {h}  {statistics.median(v):7.2f}")
PY
