#!/usr/bin/env bash
# Checks that the Debian packages a make target needs are installed; installs the missing ones when run as
# root, otherwise prints the exact apt-get line and fails.
#   scripts/deps.sh build|test|bench|demo
set -euo pipefail
group=${1:-build}
build=(libncurses-dev libsqlite3-dev libssl-dev libqrencode-dev libmicrohttpd-dev libcurl4-openssl-dev libpq-dev libfido2-dev pkg-config)
case "$group" in
  build|demo) want=("${build[@]}") ;;
  test) want=("${build[@]}" tmux libfaketime python3-venv sqlite3 qrencode zbar-tools postgresql) ;;
  bench) want=("${build[@]}" python3-venv openssl libfaketime postgresql time) ;;
  *) echo "deps.sh: unknown group '$group'" >&2; exit 2 ;;
esac
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ]; then
  echo "deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 || { apt-get update -qq >/dev/null && apt-get install -y -qq "${missing[@]}" >/dev/null; }
else
  echo "deps: missing Debian packages; run:" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
