# shellcheck shell=bash
# Common helpers for the end-to-end harness: logging, skip decisions, paths.
# Sourced by run.sh and demo.sh; never executed on its own.

E2E_DIR=${E2E_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
REPO_ROOT=${REPO_ROOT:-$(cd "$E2E_DIR/../.." && pwd)}

e2e_log() { printf '[e2e %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
e2e_die() { e2e_log "FATAL: $*"; exit 1; }

# e2e_install_hint prints the apt-get line for every missing prerequisite
# (packaging/prerequisites.txt, the list README's Quick start shows).
e2e_install_hint() {
  local m
  m=$("$REPO_ROOT/packaging/prerequisites.sh" missing 2>/dev/null || true)
  if [[ -n $m ]]; then echo "apt-get install -y --no-install-recommends $m"; else echo "apt-get install $1"; fi
}

# e2e_skip_reason prints why this machine cannot run the namespaced systemd,
# or nothing when it can. A missing program names the one apt-get line that
# installs everything still missing.
e2e_skip_reason() {
  if [[ $(id -u) != 0 ]]; then echo "not root"; return; fi
  if [[ $(uname -s) != Linux ]]; then echo "not Linux"; return; fi
  local t
  for t in unshare nsenter mount; do
    command -v "$t" >/dev/null 2>&1 || { echo "$t not found ($(e2e_install_hint util-linux))"; return; }
  done
  [[ -x /lib/systemd/systemd ]] || { echo "/lib/systemd/systemd not found ($(e2e_install_hint systemd))"; return; }
  command -v dockerd >/dev/null 2>&1 || { echo "dockerd not found ($(e2e_install_hint docker.io))"; return; }
  command -v docker >/dev/null 2>&1 || { echo "docker CLI not found ($(e2e_install_hint docker.io))"; return; }
  [[ -x /usr/lib/polkit-1/polkitd ]] || { echo "polkitd not found ($(e2e_install_hint polkitd))"; return; }
  command -v go >/dev/null 2>&1 || { echo "go not found (Go 1.26 from go.dev/dl, on PATH)"; return; }
  unshare --pid --mount --fork --propagation private true 2>/dev/null || { echo "unshare of pid+mount namespaces refused"; return; }
  # The harness boots its own systemd next to no other: a machine whose PID 1
  # is systemd already manages the cgroup tree the second one would take.
  if [[ $(readlink /proc/1/exe 2>/dev/null) == */systemd ]]; then
    echo "systemd is PID 1 here; the harness needs a machine without one (a VM or container like .ci/run's); make demo works here"
    return
  fi
  # Checked layout: a tmpfs /sys/fs/cgroup with v1 hierarchies (+ unified);
  # a pure cgroup2 root would be handed to the namespaced systemd whole.
  [[ $(stat -f -c %T /sys/fs/cgroup 2>/dev/null) == tmpfs ]] || { echo "/sys/fs/cgroup is not the hybrid tmpfs layout the harness supports"; return; }
}

# e2e_lock serialises namespaced runs on one machine: each namespace's root is
# its own overlay, but they share the machine's cgroup hierarchies (a
# teardown would find the other run's cgroups new and in use), its network
# (loopback ports, the integration dockerd) and its cores. Held until the
# calling shell exits; the empty lock file stays (docs/development.md names it).
e2e_lock() {
  [[ -n ${E2E_LOCK_FD:-} ]] && return 0
  mkdir -p /run/lock
  exec {E2E_LOCK_FD}>/run/lock/roundtable-sandbox-e2e.lock
  if ! flock -n "$E2E_LOCK_FD"; then
    e2e_log "another end-to-end run holds /run/lock/roundtable-sandbox-e2e.lock; waiting (up to 30 min)"
    flock -w 1800 "$E2E_LOCK_FD" || e2e_die "could not take the e2e lock"
  fi
  export E2E_LOCK_FD
}
