# Shared by scripts/*.sh: repository root, package installation from scripts/packages.txt.
# shellcheck shell=bash
SLUICE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export SLUICE_ROOT

# sluice_packages GROUP... : prints the packages of the given groups from scripts/packages.txt.
sluice_packages() {
  local groups=" $* "
  awk -v groups="$groups" '!/^#/ && NF == 2 && index(groups, " " $1 " ") { print $2 }' "$SLUICE_ROOT/scripts/packages.txt" | sort -u
}

# The files apt and dpkg lock (fcntl) while they run; SLUICE_PACKAGE_LOCKS overrides the list.
SLUICE_PACKAGE_LOCKS="${SLUICE_PACKAGE_LOCKS:-/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock}"

# sluice_package_lock_holder : prints "PID (COMMAND) on FILE" for the first held package lock, or
# nothing. Reads /proc/locks (device major:minor:inode of each held lock), so it needs no root.
sluice_package_lock_holder() {
  local f dev ino key pid
  for f in $SLUICE_PACKAGE_LOCKS; do
    [ -e "$f" ] || continue
    read -r dev ino < <(stat -L -c '%d %i' "$f") || continue
    key=$(printf '%02x:%02x:%s' $(((dev >> 8) & 0xfff)) $(((dev & 0xff) | ((dev >> 12) & 0xfff00))) "$ino")
    pid=$(awk -v k="$key" '{ for (i = 1; i <= NF; ++i) if ($i == k) { print $(i - 1); exit } }' /proc/locks 2>/dev/null)
    if [ -n "$pid" ]; then
      echo "$pid ($(cat "/proc/$pid/comm" 2>/dev/null || echo '?')) on $f"
      return 0
    fi
  done
}

# sluice_wait_for_package_lock [SECONDS] : waits while another apt or dpkg process holds a package
# lock, up to SECONDS (default SLUICE_PACKAGE_LOCK_WAIT, else 600), saying who holds it; returns 1
# with a message saying what to do when the limit passes.
sluice_wait_for_package_lock() {
  local limit="${1:-${SLUICE_PACKAGE_LOCK_WAIT:-600}}" waited=0 holder
  holder=$(sluice_package_lock_holder)
  [ -z "$holder" ] && return 0
  echo "sluice: the package lock is held by process $holder; waiting up to ${limit} s for it" >&2
  while [ -n "$holder" ]; do
    if [ "$waited" -ge "$limit" ]; then
      echo "sluice: the package lock is still held by process $holder after ${waited} s (the limit); let that apt/dpkg run" \
        "finish (or end it) and run this script again, or set SLUICE_PACKAGE_LOCK_WAIT to wait longer" >&2
      return 1
    fi
    sleep 2
    waited=$((waited + 2))
    holder=$(sluice_package_lock_holder)
  done
  echo "sluice: the package lock was released after ${waited} s" >&2
}

# sluice_install GROUP... : installs whatever packages of those groups are missing.
sluice_install() {
  local missing=()
  local p
  for p in $(sluice_packages "$@"); do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  echo "sluice: installing missing Debian packages: ${missing[*]}"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  # Wait for another apt or dpkg run first; apt-get itself then waits out the rest of the limit
  # for a lock taken between the check and its start.
  sluice_wait_for_package_lock "${SLUICE_PACKAGE_LOCK_WAIT:-600}" || return 1
  local wait_opt=(-o "DPkg::Lock::Timeout=${SLUICE_PACKAGE_LOCK_WAIT:-600}")
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get "${wait_opt[@]}" update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get "${wait_opt[@]}" install -y -qq --no-install-recommends "${missing[@]}"
}

# sluice_torch_python : prints the Python interpreter that imports torch (Debian's python3-torch,
# scripts/packages.txt group ddp): python3 first, then /usr/bin/python3 (a python3 earlier on PATH,
# e.g. pyenv's, does not see Debian's packages); prints nothing and returns 1 when none does.
sluice_torch_python() {
  local py
  for py in python3 /usr/bin/python3; do
    command -v "$py" > /dev/null 2>&1 || continue
    "$py" -c "import torch, numpy" > /dev/null 2>&1 && { command -v "$py"; return 0; }
  done
  return 1
}

sluice_jobs() { nproc 2>/dev/null || echo 2; }
