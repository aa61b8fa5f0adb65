#!/usr/bin/env bash
# polkit-check.sh: checks units/polkit/60-roundtable-sandbox.rules against a
# real polkitd (the one Debian ships), with pkcheck, for a matrix of users,
# units, verbs and actions.
#
# How: a private PID + mount namespace gets its own system bus (dbus-daemon
# --system on a tmpfs /run/dbus), its own /etc/passwd and /etc/group (copies
# with the test users added: the machine's files are never written), the
# machine's /usr/share/polkit-1/rules.d plus our rule, and a polkitd. Subject
# processes run as each test user; pkcheck asks polkitd about them with the
# details systemd passes for org.freedesktop.systemd1.manage-units ("unit",
# "verb"). The namespace's PID 1 is this script's inner half: when it exits,
# the kernel kills every process it started.
#
# pkcheck exit codes: 0 authorized, 1 not authorized (our rule's NO),
# 2 authentication required (the action's default: the rule left it alone).
#
# Usage: packaging/polkit-check.sh   (as root; prints SKIP and exits 0 when
# polkitd, dbus-daemon or pkcheck is missing: apt-get install polkitd dbus)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
rule=${RULE:-$here/../units/polkit/60-roundtable-sandbox.rules}
polkitd=/usr/lib/polkit-1/polkitd

if [[ ${1:-} != --inner ]]; then
  if [[ $(id -u) != 0 ]]; then echo "SKIP: polkit-check needs root"; exit 0; fi
  for t in "$polkitd" "$(command -v dbus-daemon || true)" "$(command -v pkcheck || true)" \
    "$(command -v unshare || true)" "$(command -v setpriv || true)"; do
    [[ -n $t && -x $t ]] || { echo "SKIP: polkit-check needs polkitd, dbus-daemon, pkcheck, unshare, setpriv (apt-get install polkitd dbus util-linux)"; exit 0; }
  done
  [[ -f $rule ]] || { echo "FAIL: rule $rule not found"; exit 1; }
  work=$(mktemp -d /tmp/rtsb-polkit.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  # Three free uids for the test users, from the system range.
  mapfile -t free < <(comm -13 <(getent passwd | cut -d: -f3 | sort -u) \
    <(getent group | cut -d: -f3 | sort -u | comm -13 - <(seq 900 989 | sort -u)) | sort -n | head -3)
  ((${#free[@]} == 3)) || { echo "FAIL: no free uids in 900..989"; exit 1; }
  cp /etc/passwd "$work/passwd"
  cp /etc/group "$work/group"
  names=(_sandbox _sandbox-broker rtsb-guest)
  for i in 0 1 2; do
    # An installed package's users are reused as they are; others are added
    # to the private copies only.
    getent passwd "${names[$i]}" >/dev/null && continue
    echo "${names[$i]}:x:${free[$i]}:${free[$i]}::/nonexistent:/usr/sbin/nologin" >>"$work/passwd"
    getent group "${names[$i]}" >/dev/null || echo "${names[$i]}:x:${free[$i]}:" >>"$work/group"
  done
  mkdir -p "$work/rules"
  cp -a /usr/share/polkit-1/rules.d/. "$work/rules/"
  cp "$rule" "$work/rules/60-roundtable-sandbox.rules"
  chmod 0644 "$work/rules/60-roundtable-sandbox.rules"
  chmod 0755 "$work" "$work/rules"
  # PID 1 of the namespace is the inner half; its exit ends every process.
  timeout --signal=KILL 120 unshare --pid --mount --fork --mount-proc --propagation private \
    env WORK="$work" RULE="$rule" "$0" --inner
  exit $?
fi

# ---- inner half: PID 1 of a private PID and mount namespace ----
work=$WORK
# A /run of its own (dbus-daemon's socket; libmount's utab, which would be
# /run/mount on the machine, goes to the work directory).
export LIBMOUNT_UTAB=$work/utab
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/dbus
mount --bind "$work/passwd" /etc/passwd
mount --bind "$work/group" /etc/group
mount --bind "$work/rules" /usr/share/polkit-1/rules.d
# Only our rule and the distribution's: no machine-local /etc rules.
mount -t tmpfs -o mode=0755 tmpfs /etc/polkit-1/rules.d
export DBUS_SYSTEM_BUS_ADDRESS=unix:path=/run/dbus/system_bus_socket

dbus-daemon --system --fork --nopidfile
"$polkitd" --no-debug >"$work/polkitd.log" 2>&1 &
ok=
for _ in $(seq 1 100); do
  if dbus-send --system --print-reply --dest=org.freedesktop.DBus /org/freedesktop/DBus \
    org.freedesktop.DBus.NameHasOwner string:org.freedesktop.PolicyKit1 2>/dev/null | grep -q 'boolean true'; then
    ok=1; break
  fi
  sleep 0.1
done
[[ -n $ok ]] || { echo "FAIL: polkitd did not come up"; cat "$work/polkitd.log"; exit 1; }

declare -A pid
for u in _sandbox _sandbox-broker rtsb-guest; do
  setpriv --reuid="$u" --regid="$(id -g "$u")" --clear-groups sleep 300 &
  pid[$u]=$!
done
sleep 0.2

pass=0 fail=0
# check WANT USER ACTION [unit] [verb]: run pkcheck and compare its exit code.
check() {
  local want=$1 user=$2 action=$3 unit=${4-} verb=${5-} got args=()
  [[ -n $unit ]] && args+=(--detail unit "$unit")
  [[ -n $verb ]] && args+=(--detail verb "$verb")
  set +e
  pkcheck --action-id "$action" --process "${pid[$user]}" "${args[@]}" >/dev/null 2>&1
  got=$?
  set -e
  local what
  what=$(printf '%-15s %-40s unit=%-46q verb=%q' "$user" "${action#org.freedesktop.}" "$unit" "$verb")
  if [[ $got == "$want" ]]; then
    pass=$((pass + 1)); printf 'ok   %s -> %s\n' "$what" "$(name "$got")"
  else
    fail=$((fail + 1)); printf 'FAIL %s -> %s, want %s\n' "$what" "$(name "$got")" "$(name "$want")"
  fi
}
name() { case $1 in 0) echo yes ;; 1) echo no ;; 2) echo auth-required ;; *) echo "error($1)" ;; esac; }

MU=org.freedesktop.systemd1.manage-units
hex=0123456789abcdef0123456789abcdef
hex2=fedcba9876543210fedcba9876543210
id64=$(printf 'a%.0s' $(seq 64))
id65=$(printf 'a%.0s' $(seq 65))

# Allowed: exactly start/stop/reset-failed of sandbox-broker@<32 hex>.socket|service.
for unit in "sandbox-broker@$hex.socket" "sandbox-broker@$hex.service" "sandbox-broker@$hex2.socket"; do
  for verb in start stop reset-failed; do check 0 _sandbox "$MU" "$unit" "$verb"; done
done
# Refused: other verbs on broker units.
for verb in restart try-restart reload reload-or-restart reload-or-try-restart kill freeze thaw \
  set-property clean enqueue-marked-jobs Start START "start " ""; do
  check 1 _sandbox "$MU" "sandbox-broker@$hex.socket" "$verb"
done
# Refused: other units and malformed instance names.
for unit in sandbox-host.service sandbox-host.socket sandbox-reaper.service sandbox-reaper.timer \
  docker.service docker.socket polkit.service dbus.service ssh.service multi-user.target \
  "sandbox-broker@.service" "sandbox-broker@.socket" "sandbox-broker@$hex.timer" "sandbox-broker@$hex.path" \
  "sandbox-broker@$hex.mount" "sandbox-broker@$hex.service.d" "sandbox-broker@$hex" \
  "sandbox-broker@a.b.service" "sandbox-broker@a/b.service" "sandbox-broker@../x.service" \
  "sandbox-broker@a b.service" "sandbox-broker@a:b.service" "sandbox-broker@a\\x2fb.service" \
  "sandbox-broker@$id65.service" "xsandbox-broker@$hex.service" "Sandbox-broker@$hex.service" \
  "sandbox-broker@$hex.service " " sandbox-broker@$hex.service" $'sandbox-broker@abc.service\n' \
  $'sandbox-broker@abc\n.service' "sandbox-broker@ábc.service" "sandbox-broker@$hex.servicex" \
  "sandbox-brokerX$hex.service" "sandbox-broker@@$hex.service" \
  sandbox-broker@abc.socket "sandbox-broker@A_b-9.service" "sandbox-broker@$id64.socket" \
  "sandbox-broker@${hex^^}.service" "sandbox-broker@${hex:1}.service" "sandbox-broker@${hex}0.service" \
  "sandbox-broker@b$hex.socket" "sandbox-credset@$hex.service"; do
  check 1 _sandbox "$MU" "$unit" start
done
# Refused: no unit detail at all (transient units, manager-wide calls).
check 1 _sandbox "$MU" "" start
check 1 _sandbox "$MU" "" ""
# Refused: every other action for _sandbox.
for action in org.freedesktop.systemd1.manage-unit-files org.freedesktop.systemd1.reload-daemon \
  org.freedesktop.systemd1.set-environment org.freedesktop.login1.reboot \
  org.freedesktop.login1.power-off org.freedesktop.hostname1.set-hostname; do
  check 1 _sandbox "$action" "sandbox-broker@$hex.socket" start
done
# Other users: the rule does not decide; the action's default (authentication) stands.
for user in _sandbox-broker rtsb-guest; do
  check 2 "$user" "$MU" "sandbox-broker@$hex.socket" start
  check 2 "$user" "$MU" "sandbox-broker@$hex.service" stop
  check 2 "$user" "$MU" docker.service restart
  check 2 "$user" org.freedesktop.systemd1.manage-unit-files sandbox-host.service ""
done

echo "polkit rule: $pass passed, $fail failed"
if ((fail > 0)); then
  # A rule that stops deciding midway (seen once on a box at load 12: every
  # refusal after the 18th answered auth-required) is polkitd's to explain.
  echo "polkitd's log (the last 30 lines):"
  tail -n 30 "$work/polkitd.log"
fi
((fail == 0))
