# Shared by scripts/*.sh: repository root, package installation from scripts/packages.txt.
# shellcheck shell=bash
SLUICE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export SLUICE_ROOT

# sluice_packages GROUP... : prints the packages of the given groups from scripts/packages.txt.
sluice_packages() {
  local groups=" $* "
  awk -v groups="$groups" '!/^#/ && NF == 2 && index(groups, " " $1 " ") { print $2 }' "$SLUICE_ROOT/scripts/packages.txt" | sort -u
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
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

sluice_jobs() { nproc 2>/dev/null || echo 2; }
