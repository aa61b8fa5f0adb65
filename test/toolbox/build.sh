#!/usr/bin/env bash
# test/toolbox/build.sh: the small test toolbox's base tar (bash, coreutils,
# python3, git, curl, pip, requests, nodejs, npm; `sandbox-host toolbox build
# --small`), built once and cached;
# prints the tar's path on stdout, its progress on stderr.
#
# The cache file is keyed by the mmdebstrap command line (packages, suite,
# this machine's apt sources, hooks: `toolbox build --small --dry-run`) and
# mmdebstrap's version: a change builds a new file and removes the older
# ones. A second run prints the cached path after a cached `go build`
# (about 2 s). Concurrent runs wait for each other (flock).
#
# Import it into a dockerd with
#   sandbox-host toolbox build --small --base-tar "$(test/toolbox/build.sh)" [--tag T] [--worker bin/sandbox-worker]
# or from Go: toolbox.Import(ctx, cli, toolbox.ImportOptions{BaseTar: path, Worker: w, Tag: tag}).
#
# Exits 2, printing why on stderr and nothing on stdout, when it cannot
# build here (not root, no mmdebstrap). Usage: test/toolbox/build.sh [cache dir]
set -euo pipefail
cd "$(dirname "$0")/../.."
cache_dir=${1:-${SANDBOX_TOOLBOX_CACHE:-/var/cache/roundtable-sandbox-test}}
[[ "$(id -u)" == 0 ]] || { echo "toolbox: not root (mmdebstrap runs as root here)" >&2; exit 2; }
command -v mmdebstrap >/dev/null || { echo "toolbox: mmdebstrap not found (apt-get install mmdebstrap; packaging/prerequisites.txt lists it)" >&2; exit 2; }
GO="${GO:-go}"

tmp=$(mktemp -d /tmp/sbx-toolbox.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
CGO_ENABLED=0 "$GO" build -o "$tmp/sandbox-host" ./cmd/sandbox-host
recipe=$("$tmp/sandbox-host" toolbox build --small --dry-run)
key=$({ echo "$recipe"; mmdebstrap --version; } | sha256sum | cut -c1-16)
out="$cache_dir/toolbox-small-$key.tar"

mkdir -p "$cache_dir"
exec {lock}>"$cache_dir/.lock"
flock -w 900 "$lock" || { echo "toolbox: $cache_dir/.lock held for 15 min" >&2; exit 1; }
if [[ -s $out ]]; then
	echo "toolbox: cached $out" >&2
	echo "$out"
	exit 0
fi
start=$SECONDS
"$tmp/sandbox-host" toolbox build --small --no-import --keep-base "$out" >&2
find "$cache_dir" -maxdepth 1 -name 'toolbox-small-*.tar' ! -name "${out##*/}" -delete
echo "toolbox: built $out in $((SECONDS - start)) s" >&2
echo "$out"
