#!/usr/bin/env bash
# prerequisites.sh: the machine packages of packaging/prerequisites.txt.
#   list      the package names, one line
#   missing   the packages whose command (or file) is absent, one line
#   line      the apt-get install line for what is missing here (make
#             prerequisites): it works as written on a box whose Node.js comes
#             from NodeSource (its nodejs ships npm) as on one with Debian's
#   install   apt-get install the missing ones (root; what .ci/run does)
#   ensure    what make test and make demo run first: as root, install the
#             missing packages (naming them first), the Go modules and the
#             pinned npm test peers (test/peers), each only when missing;
#             not root: say what is missing and go on (stages skip, naming it)
# A package counts as present when its command is on PATH or its file exists,
# whoever installed it: Node from NodeSource ships npm inside its nodejs
# package, and installing Debian's npm next to it would replace that Node;
# where apt's nodejs would be NodeSource's (its repository set up, no Node
# yet), npm is left out of the list for the same reason.
set -euo pipefail
list=$(dirname "$0")/prerequisites.txt

entries() { sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$list"; }
present() {
  if [[ $1 == /* ]]; then [[ -e $1 ]]; else command -v "$1" >/dev/null 2>&1; fi
}
names() { entries | awk '{print $1}' | paste -sd' '; }
# nodejs_provides_npm: the nodejs apt would install here (its candidate)
# ships npm itself, as NodeSource's does ("Provides: ... npm" and
# "Conflicts: ... npm"): asking for Debian's npm next to it fails with
# "nodejs : Conflicts: npm". Debian's own nodejs does not.
nodejs_provides_npm() {
  command -v apt-cache >/dev/null 2>&1 || return 1
  local show
  # Read whole first: with pipefail, "apt-cache | grep -q" fails whenever grep's
  # early exit breaks apt-cache's pipe.
  show=$(apt-cache show --no-all-versions nodejs 2>/dev/null) || return 1
  grep -qE '^Provides:(.*[ ,])?npm([ ,(]|$)' <<<"$show"
}
missing() {
  local pkg probe out=() node=0
  while read -r pkg probe; do
    present "${probe:?"$list: $pkg has no command or path"}" && continue
    [[ $pkg == nodejs ]] && node=1
    # With NodeSource's repository set up and no Node yet, its nodejs brings npm.
    if [[ $pkg == npm && $node == 1 ]] && nodejs_provides_npm; then continue; fi
    out+=("$pkg")
  done < <(entries)
  echo "${out[*]:-}"
}

case ${1:-} in
list) names ;;
missing) missing ;;
line)
  m=$(missing)
  if [[ -z $m ]]; then echo "# every prerequisite is present (packaging/prerequisites.txt)"; else echo "apt-get install -y --no-install-recommends $m"; fi
  ;;
ensure)
  root=$(dirname "$0")/..
  m=$(missing)
  if [[ -n $m && $(id -u) != 0 ]]; then
    echo "prerequisites: missing $m (not root, so not installing: the stages that need them skip, naming them)"
  elif [[ -n $m ]]; then
    "$0" install
  fi
  GO=${GO:-go}
  if command -v "$GO" >/dev/null && ! (cd "$root" && GOPROXY=off GOFLAGS=-mod=readonly "$GO" list -deps -test ./... >/dev/null 2>&1); then
    echo "prerequisites: downloading the Go modules (go mod download)"
    (cd "$root" && "$GO" mod download)
  fi
  peers=$root/test/peers
  if [[ -f $peers/package-lock.json ]] && command -v npm >/dev/null &&
    { [[ ! -f $peers/node_modules/.package-lock.json ]] || [[ $peers/package-lock.json -nt $peers/node_modules/.package-lock.json ]]; }; then
    echo "prerequisites: installing the pinned npm test peers (npm ci --prefix test/peers)"
    npm ci --prefix "$peers" --no-audit --no-fund --loglevel=error
  fi
  ;;
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
*) echo "usage: $0 list|missing|line|install|ensure" >&2; exit 2 ;;
esac
