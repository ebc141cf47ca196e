#!/usr/bin/env bash
# scripts/sluice-run: the variables each rank gets, exit-status propagation (first failure wins, the
# other ranks are stopped), signal forwarding, --timeout, and, as root where network namespaces can
# be made, --shape. Usage: test_sluice_run.sh PATH/TO/sluice-run. Exit 77 (ctest SKIP) never: the
# --shape part is skipped on its own, with a message, where it cannot run.
set -uo pipefail
run=$1
fails=0
check() {  # check DESCRIPTION COMMAND...: COMMAND must succeed
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; fails=$((fails + 1)); fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1. Three ranks: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, prefixes.
"$run" -n 3 --quiet -- sh -c 'echo "vars $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT"; echo "err $RANK" >&2' \
  > "$tmp/out" 2> "$tmp/err"
rc=$?
check "all ranks succeed: status 0 (got $rc)" test "$rc" = 0
for r in 0 1 2; do
  check "rank $r's line is prefixed and carries its variables" grep -Eq "^\[$r\] vars $r 3 $r 3 127\.0\.0\.1 [0-9]+$" "$tmp/out"
  check "rank $r's stderr is prefixed and stays on stderr" grep -q "^\[$r\] err $r$" "$tmp/err"
done
check "exactly three ranks ran" test "$(grep -c ' vars ' "$tmp/out")" = 3
check "one MASTER_PORT for all ranks" test "$(awk '{print $NF}' "$tmp/out" | sort -u | wc -l)" = 1
port=$(awk '{print $NF}' "$tmp/out" | head -1)
check "MASTER_PORT $port is a port" test "$port" -gt 0 -a "$port" -lt 65536

# 2. One rank fails: its status comes back and the others, which would run for a minute, are stopped.
"$run" -n 3 --quiet -- sh -c 'if [ "$RANK" = 2 ]; then exit 5; fi; sleep 60; echo survived' > "$tmp/out" 2>&1
rc=$?
check "the failing rank's status 5 is the launcher's (got $rc)" test "$rc" = 5
check "the other ranks were stopped before finishing" bash -c "! grep -q survived '$tmp/out'"

# 3. The first failure wins: rank 1 fails at once with 3; rank 0 answers SIGTERM with status 4.
"$run" -n 2 --quiet -- sh -c 'if [ "$RANK" = 1 ]; then exit 3; fi; trap "exit 4" TERM; sleep 60 & wait' \
  > "$tmp/out" 2>&1
rc=$?
check "the first failure's status (3), not the later one (4) (got $rc)" test "$rc" = 3

# 4. A rank killed by a signal: 128 + the signal.
"$run" -n 2 --quiet -- sh -c 'if [ "$RANK" = 0 ]; then kill -9 $$; fi; sleep 60' > "$tmp/out" 2>&1
rc=$?
check "a rank killed by SIGKILL gives 137 (got $rc)" test "$rc" = 137

# 5. SIGTERM to the launcher reaches every rank; the launcher exits with 143.
"$run" -n 2 --quiet -- sh -c 'trap "echo got-term-$RANK; exit 0" TERM; echo up; sleep 60 & wait' > "$tmp/out" 2>&1 &
launcher=$!
for _ in $(seq 100); do [[ $(grep -c up "$tmp/out") == 2 ]] && break; sleep 0.1; done
kill -TERM "$launcher"
wait "$launcher"
rc=$?
check "SIGTERM: the launcher exits with 143 (got $rc)" test "$rc" = 143
check "SIGTERM reached rank 0" grep -q "got-term-0" "$tmp/out"
check "SIGTERM reached rank 1" grep -q "got-term-1" "$tmp/out"

# 6. --timeout stops ranks that run too long: 124.
"$run" -n 2 --quiet --timeout 1 -- sleep 60 > "$tmp/out" 2>&1
rc=$?
check "--timeout 1 gives 124 (got $rc)" test "$rc" = 124

# 7. Misuse is refused with status 2 and a message naming the fix.
"$run" -n 0 -- true > "$tmp/out" 2>&1
rc=$?
check "-n 0 is refused with 2 (got $rc)" test "$rc" = 2
check "the message names -n" grep -q -- "-n must be" "$tmp/out"
"$run" -n 2 > "$tmp/out" 2>&1
check "a missing command is refused" grep -q "no command to run" "$tmp/out"

# 8. --shape: each rank in its own namespace and address behind a shaped link, removed afterwards.
if [[ $(id -u) == 0 ]] && command -v tc > /dev/null && ip netns add "slrtest$$" 2> /dev/null; then
  ip netns del "slrtest$$"
  "$run" -n 2 --quiet --shape 100mbit -- sh -c \
    'echo "net $RANK $MASTER_ADDR $SLUICE_ZMQ_HOST $SLUICE_LINK_BPS $(ip -o -4 addr show scope global | wc -l)"; tc qdisc show | grep -c "tbf.*rate 100Mbit"' \
    > "$tmp/out" 2>&1 &
  launcher=$!
  wait "$launcher"
  rc=$?
  left=$(ip netns list | grep -cE "^sr${launcher}(br|r[0-9]+)( |$)" || true)
  check "--shape: status 0 (got $rc)" test "$rc" = 0
  check "--shape: rank 0 at 10.231.0.1, one address" grep -q "^\[0\] net 0 10.231.0.1 10.231.0.1 100000000 1$" "$tmp/out"
  check "--shape: rank 1 at 10.231.0.2, rendezvous at rank 0" grep -q "^\[1\] net 1 10.231.0.1 10.231.0.2 100000000 1$" "$tmp/out"
  check "--shape: each rank's link is shaped by tbf" grep -q "^\[1\] 1$" "$tmp/out"
  check "--shape: the namespaces are gone ($left left)" test "$left" = 0
else
  echo "skipped: --shape (needs root and ip netns)"
fi

echo "$fails check(s) failed"
((fails == 0))
