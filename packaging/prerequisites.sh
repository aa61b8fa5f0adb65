#!/usr/bin/env bash
# prerequisites.sh: the machine packages of packaging/prerequisites.txt.
#   list      the package names, one line
#   missing   the packages whose command (or file) is absent, one line
#   line      the apt-get install line README's Quick start shows
#   install   apt-get install the missing ones (root; what .ci/run does)
# A package counts as present when its command is on PATH or its file exists,
# whoever installed it: Node from NodeSource ships npm inside its nodejs
# package, and installing Debian's npm next to it would replace that Node.
set -euo pipefail
list=$(dirname "$0")/prerequisites.txt

entries() { sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$list"; }
present() {
  if [[ $1 == /* ]]; then [[ -e $1 ]]; else command -v "$1" >/dev/null 2>&1; fi
}
names() { entries | awk '{print $1}' | paste -sd' '; }
missing() {
  local pkg probe out=()
  while read -r pkg probe; do
    present "${probe:?"$list: $pkg has no command or path"}" || out+=("$pkg")
  done < <(entries)
  echo "${out[*]:-}"
}

case ${1:-} in
list) names ;;
missing) missing ;;
line) echo "apt-get install -y --no-install-recommends $(names)" ;;
install)
  m=$(missing)
  if [[ -z $m ]]; then echo "prerequisites: all present"; exit 0; fi
  echo "prerequisites: installing $m"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086 # one word per package
  apt-get install -y -qq --no-install-recommends $m
  m=$(missing)
  [[ -z $m ]] || { echo "prerequisites: still missing after apt-get install: $m" >&2; exit 1; }
  ;;
*) echo "usage: $0 list|missing|line|install" >&2; exit 2 ;;
esac
