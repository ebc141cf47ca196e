#!/usr/bin/env bash
# scripts/lib.sh waits for the package lock: a process holds an fcntl lock (as apt and dpkg do)
# on a stand-in lock file; sluice_wait_for_package_lock must name it, wait until it is released
# and succeed, and fail with a message when the limit passes first.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
export SLUICE_PACKAGE_LOCKS="$dir/absent $dir/lock-frontend"
touch "$dir/lock-frontend"
# shellcheck source=../../scripts/lib.sh
source "$root/scripts/lib.sh"

fail() { echo "FAIL: $*" >&2; exit 1; }

# hold SECONDS : locks the stand-in for SECONDS in the background; returns once the lock is held.
hold() {
  rm -f "$dir/ready"
  "${PYTHON:-python3}" -c 'import fcntl, sys, time
f = open(sys.argv[1], "w"); fcntl.lockf(f, fcntl.LOCK_EX); open(sys.argv[2], "w").close(); time.sleep(float(sys.argv[3]))' \
    "$dir/lock-frontend" "$dir/ready" "$1" &
  holder_pid=$!
  while [ ! -e "$dir/ready" ]; do sleep 0.1; done
}

[ -z "$(sluice_package_lock_holder)" ] || fail "a free lock is reported held"
sluice_wait_for_package_lock 5 || fail "waiting on a free lock failed"

hold 3
sluice_package_lock_holder | grep -q "^$holder_pid " || fail "the holder $holder_pid is not named"
sluice_wait_for_package_lock 60 2>"$dir/log" || fail "the wait did not outlast a 3 s holder: $(cat "$dir/log")"
grep -q "held by process $holder_pid" "$dir/log" || fail "the wait did not say who holds the lock"
wait "$holder_pid"

hold 30
if sluice_wait_for_package_lock 1 2>"$dir/log"; then fail "the wait succeeded while the lock was held"; fi
grep -q "still held by process $holder_pid .* after [0-9]* s (the limit)" "$dir/log" || fail "no message at the limit: $(cat "$dir/log")"
kill "$holder_pid"
wait "$holder_pid" || true
echo "ok"
