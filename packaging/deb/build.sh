#!/usr/bin/env bash
# build.sh (make deb): build the binaries and the worker image archive, stage
# the installed tree and produce dist/roundtable-sandbox_<version>_amd64.deb
# with dpkg-deb --root-owner-group (no debhelper, no extra Go dependency).
#
# The Debian version is the changelog's top entry (packaging/deb/changelog);
# its upstream part must equal VERSION.
# SANDBOX_DEB_PREBUILT=1 skips `make build image-archive` and packages what is
# in $SANDBOX_DEB_BIN (default bin/) and $SANDBOX_DEB_IMAGE (default
# dist/worker-image.tar) into $SANDBOX_DEB_OUT (default dist/), for packaging
# tests that must not touch the shared bin/ and dist/.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
pkg=roundtable-sandbox
deb=packaging/deb
die() { echo "build.sh: $*" >&2; exit 1; }

upstream=$(tr -d ' \n' <VERSION)
version=$(dpkg-parsechangelog -l "$deb/changelog" -S Version)
[[ ${version%-*} == "$upstream" ]] ||
  die "changelog version $version does not match VERSION $upstream: add a changelog entry"
changelog_date=$(dpkg-parsechangelog -l "$deb/changelog" -S Timestamp)
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$changelog_date}

bin=bin image=dist/worker-image.tar outdir=dist
if [[ ${SANDBOX_DEB_PREBUILT:-} == 1 ]]; then
  bin=${SANDBOX_DEB_BIN:-$bin} image=${SANDBOX_DEB_IMAGE:-$image} outdir=${SANDBOX_DEB_OUT:-$outdir}
else
  make build image-archive
fi
for b in sandbox-host sandbox-broker sandbox-reaper sandbox-worker sandbox-nats; do
  [[ -x $bin/$b ]] || die "$bin/$b missing: run make build"
done
[[ -f $image ]] || die "$image missing: run make image-archive"

mkdir -p "$outdir"
stage=$(mktemp -d "$outdir/.deb-stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
chmod 0755 "$stage"

# inst MODE SRC DEST: install one file into the staged tree.
inst() { install -D -m "$1" "$2" "$stage/$3"; }

for b in sandbox-host sandbox-broker sandbox-reaper; do
  inst 0755 "$bin/$b" "usr/bin/$b"
done
inst 0644 "$image" usr/lib/roundtable-sandbox/worker-image.tar
# The static worker `sandbox-host toolbox build` puts into the toolbox image
# (doctor compares the image's copy with this one after an upgrade).
inst 0755 "$bin/sandbox-worker" usr/lib/roundtable-sandbox/sandbox-worker
# The fleet's engine (nats-server from its Go module), run only by
# sandbox-nats.service: a daemon, not a command, so no man page of its own.
inst 0755 "$bin/sandbox-nats" usr/lib/roundtable-sandbox/sandbox-nats

for u in sandbox-host.socket sandbox-host.service sandbox-broker@.socket sandbox-broker@.service sandbox-credset@.service \
  sandbox-reaper.service sandbox-reaper.timer sandbox-nats.service; do
  inst 0644 "units/$u" "lib/systemd/system/$u"
done
# The host's drop-in for a fleet (docs/fleet.md): shipped, never installed
# as a drop-in by the package (one box keeps PrivateNetwork=yes).
inst 0644 units/sandbox-host-fleet.conf usr/share/roundtable-sandbox/sandbox-host-fleet.conf
# The host API's OpenAPI document, the bytes the host serves at
# GET /v1/openapi.json (pkg/api embeds it): for clients generated offline.
inst 0644 pkg/api/openapi.json usr/share/roundtable-sandbox/openapi.json
# A Grafana dashboard of the host's metrics (docs/operating.md, Operations);
# packaging/grafana's test keeps its queries true to the metrics.
inst 0644 packaging/grafana/roundtable-sandbox.json usr/share/roundtable-sandbox/grafana/roundtable-sandbox.json
inst 0644 units/sysusers.d/roundtable-sandbox.conf usr/lib/sysusers.d/roundtable-sandbox.conf
inst 0644 units/tmpfiles.d/roundtable-sandbox.conf usr/lib/tmpfiles.d/roundtable-sandbox.conf
inst 0644 units/polkit/60-roundtable-sandbox.rules usr/share/polkit-1/rules.d/60-roundtable-sandbox.rules

# The default configuration (owned by the host's engineer) as a conffile;
# postinst gives it group _sandbox with dpkg-statoverride.
if [[ -f packaging/sandbox.yaml ]]; then
  inst 0640 packaging/sandbox.yaml etc/roundtable-sandbox/sandbox.yaml
else
  echo "build.sh: WARNING: packaging/sandbox.yaml does not exist yet; shipping a placeholder" >&2
  printf '# roundtable-sandbox configuration: placeholder (packaging/sandbox.yaml missing at build time)\n' >"$stage/placeholder.yaml"
  inst 0640 "$stage/placeholder.yaml" etc/roundtable-sandbox/sandbox.yaml
  rm "$stage/placeholder.yaml"
fi
install -d -m 0700 "$stage/etc/roundtable-sandbox/credentials"
# The fleet's files (docs/fleet.md): CA, this box's certificate and key,
# its nkey seed, JetStream's encryption key; root's, the host's group may
# enter (it reads ca.pem and the seed).
install -d -m 0750 "$stage/etc/roundtable-sandbox/fleet"

# Man pages, compressed reproducibly.
for m in packaging/man/*.8; do
  inst 0644 "$m" "usr/share/man/man8/${m##*/}"
  gzip -9n "$stage/usr/share/man/man8/${m##*/}"
done

# Bash completion: cobra's own when the binary has it, else the fallback.
comp=$stage/usr/share/bash-completion/completions/sandbox-host
mkdir -p "${comp%/*}"
if "$bin/sandbox-host" completion bash >"$comp" 2>/dev/null && grep -q 'sandbox-host' "$comp"; then
  echo "build.sh: bash completion generated by sandbox-host completion bash"
else
  cp packaging/completion/sandbox-host.bash "$comp"
fi
chmod 0644 "$comp"

# Documentation: copyright (with the embedded Go modules) and changelog.
doc=$stage/usr/share/doc/$pkg
mkdir -p "$doc"
modules=$(for b in sandbox-host sandbox-broker sandbox-reaper sandbox-worker sandbox-nats; do go version -m "$bin/$b" 2>/dev/null; done |
  awk '$1 == "dep" {print " " $2 " " $3}' | sort -u)
[[ -n $modules ]] || modules=" (module list unavailable: binaries carry no build info)"
awk -v mods="$modules" '$0 == "@MODULES@" {print mods; next} {print}' "$deb/copyright.in" >"$doc/copyright"
chmod 0644 "$doc/copyright"
gzip -9n -c "$deb/changelog" >"$doc/changelog.Debian.gz"
chmod 0644 "$doc/changelog.Debian.gz"

inst 0644 "$deb/lintian-overrides" "usr/share/lintian/overrides/$pkg"

# Control area.
mkdir -p "$stage/DEBIAN"
chmod 0755 "$stage/DEBIAN"
for s in postinst prerm postrm; do install -m 0755 "$deb/$s" "$stage/DEBIAN/$s"; done
echo /etc/roundtable-sandbox/sandbox.yaml >"$stage/DEBIAN/conffiles"
chmod 0644 "$stage/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@SIZE@/$size/" "$deb/control.in" >"$stage/DEBIAN/control"
(cd "$stage" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z |
  xargs -0 md5sum >DEBIAN/md5sums)
chmod 0644 "$stage/DEBIAN/control" "$stage/DEBIAN/md5sums"

# Reproducible timestamps and a clean umask-independent tree.
find "$stage" -exec touch --no-dereference -d "@$SOURCE_DATE_EPOCH" {} +

out=$outdir/${pkg}_${version}_amd64.deb
dpkg-deb --root-owner-group -Zxz --build "$stage" "$out" >/dev/null
echo "build.sh: built $out ($(du -h "$out" | cut -f1))"
