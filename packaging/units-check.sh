#!/usr/bin/env bash
# units-check.sh (make units-check): packaging lint for the systemd side.
#  1. systemd-analyze verify on every unit (templates as an instance), with the
#     binaries and man pages present at their installed paths: any message at
#     all fails the check.
#  2. systemd-analyze security --offline=true: exposure of the broker <= 2.0,
#     the reaper <= 3.0, the host <= 4.0, sandbox-nats <= 2.0 (it has the
#     network: clients and routes); sandbox-nats off by default
#     ([Install] only, enabled by nothing) and run as _sandbox-nats.
#  2b. the broker's network rules: AF_NETLINK (its own-address watch) and
#     IPAddressDeny= link-local and multicast, never localhost or any (loopback
#     upstreams, egress.allow entries and resolvers are legitimate).
#  2d. the credential copier (sandbox-credset@, issue 35): runs as
#     _sandbox-credset without capabilities and with no setting that makes
#     systemd build a mount namespace (test/e2e TestCredsetCopierHasNoMountNamespace
#     checks the running unit's namespace against PID 1's).
#  3. sysusers.d and tmpfiles.d applied to a scratch root: users, groups,
#     directory owners and modes as DESIGN.md section 2 says.
#  4. lintian on dist/roundtable-sandbox_<VERSION>-*_amd64.deb when it exists
#     (make deb): no errors and no warnings. Without lintian: a skip line.
# Needs root (a private mount namespace puts the binaries at /usr/bin without
# touching the machine's /usr/bin). Uses bin/* when built, else placeholders.
set -euo pipefail

# systemd-analyze (verify and security --offline) writes
# /run/systemd/systemd-units-load, and mount makes /run/mount: as root the
# whole check runs in a private mount namespace whose /run is a tmpfs.
if [[ $(id -u) == 0 && -z ${RTSB_UNITS_CHECK_NS:-} ]] && command -v unshare >/dev/null; then
  RTSB_UNITS_CHECK_NS=$(mktemp -d /tmp/rtsb-units-ns.XXXXXX)
  export RTSB_UNITS_CHECK_NS
  set +e
  unshare --mount --propagation private "$0" "$@"
  rc=$?
  rm -rf "$RTSB_UNITS_CHECK_NS"
  exit $rc
fi
if [[ -n ${RTSB_UNITS_CHECK_NS:-} ]]; then
  export LIBMOUNT_UTAB=$RTSB_UNITS_CHECK_NS/utab
  mount -t tmpfs -o mode=0755 tmpfs /run
fi

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

work=$(mktemp -d /tmp/rtsb-units-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
units=(sandbox-host.socket sandbox-host.service sandbox-broker@.socket sandbox-broker@.service
  sandbox-credset@.service sandbox-reaper.service sandbox-reaper.timer sandbox-nats.service)
verify=(sandbox-host.socket sandbox-host.service sandbox-broker@0123456789abcdef0123456789abcdef.socket
  sandbox-broker@0123456789abcdef0123456789abcdef.service sandbox-credset@0123456789abcdef0123456789abcdef.service
  sandbox-reaper.service sandbox-reaper.timer sandbox-nats.service)
mkdir -p "$work/units" "$work/bin" "$work/ovl" "$work/man/man8"
for u in "${units[@]}"; do cp "units/$u" "$work/units/"; done
for b in sandbox-host sandbox-broker sandbox-reaper; do
  if [[ -x bin/$b ]]; then cp "bin/$b" "$work/bin/"; else printf '#!/bin/sh\nexit 0\n' >"$work/bin/$b"; fi
  chmod 0755 "$work/bin/$b"
done
# sandbox-nats lives in /usr/lib/roundtable-sandbox (a daemon, not a command).
mkdir -p "$work/lib"
if [[ -x bin/sandbox-nats ]]; then cp bin/sandbox-nats "$work/lib/"; else printf '#!/bin/sh\nexit 0\n' >"$work/lib/sandbox-nats"; fi
chmod 0755 "$work/lib/sandbox-nats"
cp packaging/man/*.8 "$work/man/man8/"

# 1. verify, inside a private mount namespace where /usr/bin is an overlay
#    with our binaries on top; man pages come from MANPATH.
echo "== systemd-analyze verify"
if [[ $(id -u) == 0 ]] && command -v unshare >/dev/null; then
  set +e
  out=$(cd "$work/units" && unshare --mount --propagation private env MANPATH="$work/man:" bash -c '
    set -e
    mkdir -p "$0/ovl/w" "$0/ovl/u"
    cp -a "$0/bin/." "$0/ovl/u/"
    mount -t overlay overlay -o lowerdir=/usr/bin,upperdir="$0/ovl/u",workdir="$0/ovl/w" /usr/bin
    # An overlay of /usr/lib, not a mkdir: /usr/lib/roundtable-sandbox made
    # for the mount point would stay on the machine.
    mkdir -p "$0/ovl/lw" "$0/ovl/lu/roundtable-sandbox"
    cp -a "$0/lib/." "$0/ovl/lu/roundtable-sandbox/"
    mount -t overlay overlay -o lowerdir=/usr/lib,upperdir="$0/ovl/lu",workdir="$0/ovl/lw" /usr/lib
    systemd-analyze verify "${@}"' "$work" "${verify[@]}" 2>&1)
  rc=$?
  set -e
  if [[ $rc != 0 || -n $out ]]; then
    fail "systemd-analyze verify (rc=$rc):"; echo "$out"
  else
    echo "ok: ${#verify[@]} units verified, no messages"
  fi
else
  echo "skip: systemd-analyze verify needs root and unshare (util-linux): the units were not verified"
fi

# 2. exposure scores.
echo "== systemd-analyze security --offline=true"
score() {
  (cd "$work/units" && systemd-analyze security --offline=true --no-pager "$1" 2>&1) |
    sed -n -E 's/.*Overall exposure level for [^:]+: ([0-9.]+).*/\1/p'
}
for pair in sandbox-broker@0123456789abcdef0123456789abcdef.service:2.0 sandbox-reaper.service:3.0 \
  sandbox-credset@0123456789abcdef0123456789abcdef.service:2.5 \
  sandbox-host.service:4.0 sandbox-nats.service:2.0; do
  unit=${pair%:*} max=${pair##*:}
  s=$(score "$unit")
  if [[ -z $s ]]; then
    fail "no exposure score for $unit"
  elif awk -v s="$s" -v m="$max" 'BEGIN {exit !(s <= m)}'; then
    echo "ok: ${unit/0123456789abcdef0123456789abcdef/<turn>} exposure $s (max $max)"
  else
    fail "${unit} exposure $s > $max"
  fi
done

# 2b. the broker's network rules (docs/threat-model.md, "Egress").
echo "== broker network rules"
bu=units/sandbox-broker@.service
if grep -Eq '^RestrictAddressFamilies=.*\bAF_NETLINK\b' "$bu"; then
  echo "ok: broker may open AF_NETLINK (the own-address watch)"
else
  fail "$bu: RestrictAddressFamilies= lacks AF_NETLINK: the broker could not watch its own addresses and would refuse every public destination"
fi
deny=$(sed -n 's/^IPAddressDeny=//p' "$bu" | tr '\n' ' ')
before=$fails
for w in link-local multicast; do
  [[ " $deny " == *" $w "* ]] || fail "$bu: IPAddressDeny= lacks $w"
done
for w in localhost any 127.0.0.0/8 ::1; do
  [[ " $deny " != *" $w "* ]] || fail "$bu: IPAddressDeny= has $w: loopback upstreams and resolvers (127.0.0.53) would fail"
done
((fails > before)) || echo "ok: broker IPAddressDeny=${deny% }"

# 2c. the fleet engine's unit: its own user, its store, root only for the
#     configuration step, off by default.
echo "== sandbox-nats.service"
nu=units/sandbox-nats.service
before=$fails
for want in '^User=_sandbox-nats$' '^Group=_sandbox-nats$' '^StateDirectory=sandbox-nats$' '^RuntimeDirectory=sandbox-nats$' \
  '^ExecStartPre=-\+/usr/bin/sandbox-host fleet config --runtime-dir /run/sandbox-nats --owner _sandbox-nats$' \
  '^CapabilityBoundingSet=$' '^NoNewPrivileges=yes$' '^RestartPreventExitStatus=78$'; do
  grep -Eq "$want" "$nu" || fail "$nu: no line matching $want"
done
# Only the configuration step runs as root: no other Exec line has a prefix.
if grep -E '^Exec[A-Za-z]*=[-+!@:]' "$nu" | grep -v '^ExecStartPre=-+/usr/bin/sandbox-host fleet config ' | grep -q .; then
  fail "$nu: another Exec line runs with a privilege prefix"
fi
# Off by default: postinst never enables or starts it (only keeps an
# operator's enablement across upgrades and try-restarts a running one).
pi=packaging/deb/postinst
if [[ $(grep -c 'enable sandbox-nats.service' "$pi") != 1 ]] ||
  ! grep -A1 'was-enabled sandbox-nats.service' "$pi" | grep -q 'deb-systemd-helper enable sandbox-nats.service'; then
  fail "$pi: sandbox-nats.service must be enabled only when it was enabled before (off by default)"
fi
if grep -E 'deb-systemd-invoke +(start|restart) .*sandbox-nats' "$pi" | grep -q .; then
  fail "$pi: starts sandbox-nats.service (it may only try-restart a running one)"
fi
# The host's fleet drop-in: verified on the host unit, which stays within
# its exposure bound with it, and opens loopback only.
fd=$work/fleetunits
mkdir -p "$fd/sandbox-host.service.d"
cp units/sandbox-host.service units/sandbox-host.socket "$fd/"
cp units/sandbox-host-fleet.conf "$fd/sandbox-host.service.d/fleet.conf"
if [[ $(id -u) == 0 ]] && command -v unshare >/dev/null; then
  out=$(cd "$fd" && unshare --mount --propagation private env MANPATH="$work/man:" bash -c '
    mkdir -p "$0/ovl/w2" "$0/ovl/u2"
    cp -a "$0/bin/." "$0/ovl/u2/"
    mount -t overlay overlay -o lowerdir=/usr/bin,upperdir="$0/ovl/u2",workdir="$0/ovl/w2" /usr/bin
    systemd-analyze verify sandbox-host.service' "$work" 2>&1) || out="rc=$? $out"
  [[ -z $out ]] || fail "sandbox-host.service with the fleet drop-in: $out"
fi
s=$( (cd "$fd" && systemd-analyze security --offline=true --no-pager sandbox-host.service 2>&1) |
  sed -n -E 's/.*Overall exposure level for [^:]+: ([0-9.]+).*/\1/p')
if [[ -z $s ]] || ! awk -v s="$s" 'BEGIN {exit !(s <= 4.0)}'; then
  fail "sandbox-host.service with the fleet drop-in: exposure '$s' (max 4.0)"
fi
grep -q '^IPAddressDeny=any$' units/sandbox-host-fleet.conf && grep -q '^IPAddressAllow=localhost$' units/sandbox-host-fleet.conf ||
  fail "units/sandbox-host-fleet.conf must deny every address but loopback"
((fails > before)) || echo "ok: sandbox-host.service with the fleet drop-in verifies, exposure ${s:-?} (max 4.0), loopback only"
((fails > before)) || echo "ok: sandbox-nats.service runs as _sandbox-nats with its StateDirectory, root only for fleet config, off by default"

# 2d. the credential copier: its own user, and no mount namespace (its cost
#     was 41% of the units' start chain, docs/BENCHMARKS.md section 4e). The
#     settings that make systemd 252 build one (exec_needs_mount_namespace):
#     any of these set to anything but its off value.
echo "== sandbox-credset@.service"
cu=units/sandbox-credset@.service
before=$fails
for want in '^User=_sandbox-credset$' '^Group=_sandbox-credset$' '^SupplementaryGroups=_sandbox-broker$' \
  '^CapabilityBoundingSet=$' '^NoNewPrivileges=yes$' '^RestrictAddressFamilies=AF_UNIX$' '^IPAddressDeny=any$' \
  '^SystemCallFilter=@system-service$' '^RuntimeDirectory=roundtable-sandbox/credsets/%i$' '^RuntimeDirectoryMode=0700$'; do
  grep -Eq "$want" "$cu" || fail "$cu: no line matching $want"
done
if grep -Eq '^(DynamicUser|AmbientCapabilities)=.+' "$cu"; then fail "$cu: DynamicUser= or AmbientCapabilities= set"; fi
for k in ProtectSystem ProtectHome PrivateTmp PrivateDevices PrivateMounts PrivateIPC IPCNamespacePath ProtectKernelTunables \
  ProtectKernelModules ProtectKernelLogs ProtectControlGroups ProtectProc ProcSubset ReadOnlyPaths ReadWritePaths \
  InaccessiblePaths ExecPaths NoExecPaths BindPaths BindReadOnlyPaths TemporaryFileSystem RootDirectory RootImage \
  MountImages ExtensionImages ExtensionDirectories MountFlags LogNamespace StateDirectory CacheDirectory LogsDirectory; do
  if v=$(grep -E "^$k=" "$cu"); then
    case $v in
    *=no | *=false | *=default | *=all | *=) ;;
    *) fail "$cu: $v makes a mount namespace (issue 35: the copier has none)" ;;
    esac
  fi
done
((fails > before)) || echo "ok: sandbox-credset@.service runs as _sandbox-credset, no capability, no setting that makes a mount namespace"

# 3. sysusers.d + tmpfiles.d on a scratch root.
echo "== sysusers.d and tmpfiles.d"
sr=$work/root
mkdir -p "$sr/etc" "$sr/usr/lib/sysusers.d" "$sr/usr/lib/tmpfiles.d"
cp units/sysusers.d/roundtable-sandbox.conf "$sr/usr/lib/sysusers.d/"
cp units/tmpfiles.d/roundtable-sandbox.conf "$sr/usr/lib/tmpfiles.d/"
printf 'root:x:0:0:root:/root:/bin/bash\n' >"$sr/etc/passwd"
printf 'root:x:0:\n' >"$sr/etc/group"
if out=$(systemd-sysusers --root="$sr" roundtable-sandbox.conf 2>&1) &&
  out2=$(systemd-tmpfiles --root="$sr" --create roundtable-sandbox.conf 2>&1); then
  [[ -z $out$out2 ]] || { echo "$out"; echo "$out2"; }
  for u in _sandbox _sandbox-broker _sandbox-credset _sandbox-nats; do
    grep -q "^$u:x:[0-9]*:[0-9]*:[^:]*:/nonexistent:/usr/sbin/nologin$" "$sr/etc/passwd" ||
      fail "sysusers: user $u missing or not a nologin system user"
  done
  grep -q '^sandbox-clients:' "$sr/etc/group" || fail "sysusers: group sandbox-clients missing"
  uname() { awk -F: -v id="$1" '$3 == id {print $1; exit}' "$2"; }
  for want in "run/roundtable-sandbox 755 _sandbox _sandbox" \
    "run/roundtable-sandbox/turns 700 _sandbox _sandbox" \
    "run/roundtable-sandbox/policies 2750 _sandbox _sandbox-broker" \
    "run/roundtable-sandbox/credsets 710 root _sandbox-credset" \
    "var/lib/roundtable-sandbox 700 _sandbox _sandbox" \
    "var/lib/roundtable-sandbox/workspaces 700 _sandbox _sandbox" \
    "var/lib/roundtable-sandbox/state 700 _sandbox _sandbox"; do
    read -r p mode user group <<<"$want"
    if [[ ! -d $sr/$p ]]; then fail "tmpfiles: /$p not created"; continue; fi
    read -r gm gu gg <<<"$(stat -c '%a %u %g' "$sr/$p")"
    got="$gm $(uname "$gu" "$sr/etc/passwd") $(uname "$gg" "$sr/etc/group")"
    if [[ $got == "$mode $user $group" ]]; then echo "ok: /$p $got"; else fail "tmpfiles: /$p is '$got', want '$mode $user $group'"; fi
  done
else
  fail "sysusers/tmpfiles failed: $out ${out2:-}"
fi

# 4. lintian on the built package.
echo "== lintian"
version=$(tr -d ' \n' <VERSION)
shopt -s nullglob
debs=(dist/roundtable-sandbox_"$version"-*_amd64.deb)
if ((${#debs[@]} == 0)); then
  echo "skip: no dist/roundtable-sandbox_${version}-*_amd64.deb (run make deb first)"
elif ! command -v lintian >/dev/null; then
  echo "skip: lintian not installed, the package was not linted (apt-get install lintian; README Quick start lists every prerequisite)"
else
  for d in "${debs[@]}"; do
    set +e
    # Its temporary files (/tmp/mldbm-elf-*, which it leaves) go to $work.
    TMPDIR=$work lintian --fail-on error,warning --pedantic "$d" >"$work/lintian.out" 2>&1
    rc=$?
    set -e
    grep -v 'running with root privileges' "$work/lintian.out" || true
    if [[ $rc == 0 ]]; then echo "ok: lintian $d: no errors, no warnings"; else fail "lintian $d"; fi
  done
fi

if ((fails)); then echo "units-check: $fails failed"; exit 1; fi
echo "units-check: all passed"
