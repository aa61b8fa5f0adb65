# shellcheck shell=bash
# Boot, enter and tear down a real systemd 252 as PID 1 of a private PID,
# mount, UTS and IPC namespace, with its own dockerd (DESIGN.md section 8).
#
# The namespace's root is private: an overlay of the machine's root
# filesystem whose upper layer is a tmpfs inside the namespace, with /etc
# and /var/lib/dpkg copied at boot (so a package operation on the machine
# meanwhile cannot leak in half-done). The package's install and purge, its
# users in /etc/passwd and their "-" backups, dpkg's and apt's logs and
# backups, /var/lib/systemd, /etc/docker: all land in that tmpfs and vanish
# with the namespace. PID 1 pivots into the overlay before it becomes
# systemd, so ns_exec (nsenter) lands there too. /tmp, /run, /var/tmp and
# Docker's and containerd's data roots are tmpfs of their own in it (Docker's
# overlay2 storage cannot sit on an overlayfs); /dev, /sys and the cgroup
# hierarchies are the machine's, bound in.
#
# Guarantee: ns_teardown leaves the machine as ns_boot found it: the
# namespace's PID 1 is SIGKILLed (so every process inside ends with it and
# its mounts go), the cgroups systemd and dockerd created are removed, and
# the checks at the end fail loudly when anything of the namespace remains:
# processes, cgroups, mounts, users or groups, a changed dpkg database,
# passwd/group file (or backup) or apt/dpkg log, and any new path in a
# listing of the places a booted system writes to (ns_watch_list), taken
# before boot and compared after teardown. On the machine itself a run
# makes only the e2e lock file (e2e_lock) and its work directory under
# /var/tmp, which teardown removes.
#
# Every path a command inside the namespace is given must be visible there:
# only the work directory (its top directory under /var/tmp, see
# ns_share_dir) is bound through from the machine; ns_visible tells whether
# another path is (callers copy what is not).
#
# The network namespace is shared on purpose (the fake model listens on
# loopback); the namespaced dockerd therefore runs with --bridge=none
# --iptables=false --ip6tables=false so it never touches host networking.
# It uses the default /run/docker.sock and /var/lib/docker, both private to
# the namespace, so it cannot collide with the development dockerd
# (/run/docker-dev.sock, /var/lib/docker-dev).

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

NS_PID=${NS_PID:-}
NS_UNSHARE_PID=${NS_UNSHARE_PID:-}
E2E_WORK=${E2E_WORK:-}
# Options of a namespace booted next to others (test/e2e/lib/fleet.sh),
# both off by default (one box: the machine's network, the caller's cgroup):
# NS_NET=1 gives the namespace a network namespace of its own (only
# loopback until the caller links it; ns_exec then enters it too), and
# NS_CGROUP=<name> boots its systemd in /<name> of the name=systemd and
# unified hierarchies, so that two namespaced systemds never manage the same
# cgroups (each takes the cgroup it starts in as its root).
NS_NET=${NS_NET:-0}
NS_CGROUP=${NS_CGROUP:-}

# Units that make no sense (or would change the real machine) in a namespace
# sharing the machine's root filesystem, kernel and network.
NS_MASKED_UNITS=(
  getty.target console-getty.service getty@tty1.service serial-getty@ttyS0.service
  systemd-udevd.service systemd-udevd-control.socket systemd-udevd-kernel.socket
  systemd-udev-trigger.service systemd-udev-settle.service systemd-hwdb-update.service
  systemd-modules-load.service kmod-static-nodes.service systemd-sysctl.service
  systemd-binfmt.service proc-sys-fs-binfmt_misc.automount proc-sys-fs-binfmt_misc.mount
  systemd-remount-fs.service systemd-fsck-root.service systemd-timesyncd.service
  systemd-tmpfiles-clean.timer systemd-update-utmp.service systemd-update-utmp-runlevel.service
  systemd-random-seed.service systemd-machine-id-commit.service systemd-firstboot.service
  systemd-sysusers.service systemd-pstore.service systemd-repart.service
  systemd-pcrphase.service systemd-pcrphase-sysinit.service systemd-ask-password-console.path
  systemd-ask-password-wall.path ldconfig.service systemd-journal-catalog-update.service
  sys-kernel-debug.mount sys-kernel-tracing.mount sys-kernel-config.mount sys-fs-fuse-connections.mount
  dev-hugepages.mount swap.target cryptsetup.target integritysetup.target veritysetup.target
  apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer
  e2scrub_reap.service fstrim.timer man-db.timer logrotate.timer
  postgresql.service systemd-networkd.service systemd-resolved.service
  networking.service ssh.service cron.service rsyslog.service
  packagekit.service packagekit-offline-update.service
)

# ns_child_of prints the first child pid of $1, or nothing (no procps needed).
ns_child_of() {
  local f stat rest ppid
  for f in /proc/[0-9]*/stat; do
    stat=$(cat "$f" 2>/dev/null) || continue
    rest=${stat##*) } # the fields after "pid (comm) ": state ppid ...
    ppid=${rest#* }
    ppid=${ppid%% *}
    if [[ $ppid == "$1" ]]; then
      f=${f#/proc/}
      echo "${f%/stat}"
      return 0
    fi
  done
  return 0
}

# ns_stage_run writes the namespace's private /run content into $1.
ns_stage_run() {
  local run=$1 u containerd
  mkdir -p "$run/systemd/system/docker.service.d" "$run/systemd/journald.conf.d" "$run/systemd/system/containerd.service.d" \
    "$run/tmpfiles.d" "$run/roundtable-e2e"
  for u in "${NS_MASKED_UNITS[@]}"; do ln -sf /dev/null "$run/systemd/system/$u"; done
  # provision.conf creates /root/.ssh on the shared root filesystem.
  ln -sf /dev/null "$run/tmpfiles.d/provision.conf"
  printf '%s\n' '[Unit]' 'Description=roundtable-sandbox end-to-end namespace' 'Requires=basic.target' \
    'Wants=dbus.service docker.service' 'After=basic.target' 'AllowIsolate=yes' >"$run/systemd/system/rt-e2e.target"
  # No bridge, no iptables: the network namespace is the machine's. Own
  # cgroup parent, so nothing mixes with the development dockerd's /docker.
  printf '%s\n' '[Service]' 'EnvironmentFile=' 'ExecStart=' \
    'ExecStart=/usr/sbin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock --bridge=none --iptables=false --ip6tables=false --ip-masq=false --cgroup-parent=/roundtable-e2e-docker' \
    >"$run/systemd/system/docker.service.d/e2e.conf"
  # containerd's own config, not the machine's: no CRI plugin (it creates
  # /etc/cni/net.d on the shared root), everything under /var/lib/containerd
  # (tmpfs here) and /run.
  containerd=$(command -v containerd || echo /usr/bin/containerd)
  printf '%s\n' 'version = 2' 'root = "/var/lib/containerd"' 'state = "/run/containerd"' \
    'disabled_plugins = ["io.containerd.grpc.v1.cri"]' '[plugins."io.containerd.internal.v1.opt"]' \
    '  path = "/var/lib/containerd/opt"' >"$run/roundtable-e2e/containerd.toml"
  printf '%s\n' '[Service]' 'ExecStartPre=' 'ExecStart=' "ExecStart=$containerd --config /run/roundtable-e2e/containerd.toml" \
    >"$run/systemd/system/containerd.service.d/e2e.conf"
  # journald's default rate limits stay in force: the journal scenario must
  # hold with them.
  printf '%s\n' '[Journal]' 'Storage=volatile' 'ForwardToConsole=no' 'ForwardToWall=no' \
    >"$run/systemd/journald.conf.d/e2e.conf"
}

# ns_share_dir prints the directory bound into the namespace: the work
# directory's top directory under /var/tmp (bench/run.sh keeps its own files
# next to E2E_WORK=$WORK/ns), or the work directory itself elsewhere.
ns_share_dir() {
  local rest=${E2E_WORK#/var/tmp/}
  if [[ $rest != "$E2E_WORK" ]]; then echo "/var/tmp/${rest%%/*}"; else echo "$E2E_WORK"; fi
}

# ns_visible PATH: true when PATH lies under the shared work directory, the
# only place the namespace sees the machine's files as they are now (the
# rest of its root is an overlay whose lower layer a later change on the
# machine reaches only in undefined ways, and /etc and /var/lib/dpkg are
# copies taken at boot).
ns_visible() {
  local p share
  p=$(realpath -m "$1") share=$(ns_share_dir)
  [[ $p == "$share" || $p == "$share"/* ]]
}

# ns_watch_list prints the paths (sorted) of the places a booted system and
# the package write to on the machine's root filesystem (dpkg's, apt's and
# man-db's bookkeeping included: the namespace's own lives in its overlay),
# without the harnesses' work directories under /var/tmp. /tmp is left out:
# the namespace has its own, and every process on this machine uses it.
# Nothing is allowed by name: what a harness keeps on the machine (the small
# toolbox's base cache, /var/cache/roundtable-sandbox-test) it makes before
# ns_boot (run.sh and demo.sh call toolbox_base first), so the listing taken
# before boot holds it. NS_WATCH_ROOT (empty: the machine's /) is for the
# check's own test (test/e2e/lib), which plants paths in a directory of its
# own; the paths printed are the same either way (without the root).
NS_WATCH_ROOT=${NS_WATCH_ROOT:-}
ns_watch_list() {
  local r=$NS_WATCH_ROOT d deep=() shallow=()
  for d in /etc /var/lib /var/cache /usr/local /opt /srv /lib/systemd/system /usr/lib/systemd /usr/share/polkit-1; do
    deep+=("$r$d")
  done
  for d in /root /home /var/tmp /var/log /var/spool /var/mail /usr/share/man /usr/share/bash-completion/completions \
    /run /run/lock /run/systemd; do
    shallow+=("$r$d")
  done
  # A place this machine lacks is listed as empty (find fails on it: under
  # pipefail that would end the caller's set -e shell without a word).
  {
    find "${deep[@]}" -xdev -maxdepth 3 2>/dev/null || true
    find "${shallow[@]}" -xdev -maxdepth 1 2>/dev/null || true
  } | awk -v n="${#r}" '{ print substr($0, n + 1) }' | grep -Ev '^/var/tmp/(roundtable-|rtsb-|sbx-)' | sort -u
}

# Files a package install, a purge or a booted system change in place (so a
# listing of names misses them): their checksums are compared too.
NS_WATCH_FILES=(
  /etc/passwd /etc/passwd- /etc/group /etc/group- /etc/shadow /etc/shadow- /etc/gshadow /etc/gshadow-
  /etc/subuid /etc/subgid /var/lib/dpkg/status /var/lib/dpkg/status-old /var/lib/dpkg/statoverride
  /var/lib/dpkg/statoverride-old /var/lib/dpkg/diversions /var/log/dpkg.log /var/log/apt/history.log
  /var/log/apt/term.log /var/log/alternatives.log
)

# ns_watch_sums prints "<sha256> <path>" (or "absent <path>") for NS_WATCH_FILES.
ns_watch_sums() {
  local f
  for f in "${NS_WATCH_FILES[@]}"; do
    if [[ -e $f ]]; then echo "$(sha256sum <"$f" | cut -d' ' -f1) $f"; else echo "absent $f"; fi
  done
}

# ns_snapshot records what the machine looks like before boot.
ns_snapshot() {
  local d=$E2E_WORK/before
  mkdir -p "$d"
  find /sys/fs/cgroup -mindepth 1 -type d 2>/dev/null | sort >"$d/cgroups"
  awk '{print $5}' /proc/self/mountinfo | sort >"$d/mounts"
  ns_watch_list >"$d/paths"
  ns_watch_sums >"$d/sums"
  getent passwd | cut -d: -f1 | sort >"$d/users"
  getent group | cut -d: -f1 | sort >"$d/groups"
}

# ns_boot boots the namespace and waits until systemd reports running or
# degraded and dockerd answers.
ns_boot() {
  [[ -n $E2E_WORK ]] || E2E_WORK=$(mktemp -d /var/tmp/roundtable-e2e.XXXXXX)
  export E2E_WORK
  chmod 0755 "$E2E_WORK"
  e2e_lock
  ns_snapshot
  ns_stage_run "$E2E_WORK/run"
  : >"$E2E_WORK/console"
  printf '#!/bin/sh\nexit 0\n' >"$E2E_WORK/policy-rc.d"
  chmod 0755 "$E2E_WORK/policy-rc.d"
  mkdir -p "$E2E_WORK/root"
  local share
  share=$(ns_share_dir)
  case $share in
  /tmp | /tmp/* | /run | /run/* | /var/tmp) e2e_die "E2E_WORK=$E2E_WORK: the namespace has its own /tmp and /run; use a directory under /var/tmp" ;;
  esac
  # The inner script runs as PID 1 of the new namespaces, then becomes systemd.
  cat >"$E2E_WORK/init.sh" <<INIT
#!/bin/bash
set -e
# libmount would make /run/mount on the machine's /run (mount runs before
# the namespace has a /run of its own).
export LIBMOUNT_UTAB="$E2E_WORK/mount-utab/utab"
w="$E2E_WORK/root"
mount -t tmpfs -o mode=0755 tmpfs "\$w"
mkdir -p "\$w/upper" "\$w/work" "\$w/merged"
mount -t overlay overlay -o "lowerdir=/,upperdir=\$w/upper,workdir=\$w/work" "\$w/merged"
r=\$w/merged
# /etc and the dpkg database as they are now: an install or a purge on the
# machine while the namespace runs cannot reach it half-done through the
# overlay's lower layer.
for d in etc var/lib/dpkg; do
  mkdir -p "\$w/snap/\$d"
  cp -a "/\$d/." "\$w/snap/\$d/"
  mount --bind "\$w/snap/\$d" "\$r/\$d"
done
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "\$r/tmp"
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs "\$r/run"
cp -a "$E2E_WORK/run/." "\$r/run/"
mount --rbind /dev "\$r/dev"
# systemd's console output goes to a file, not the machine's console.
mount --bind "$E2E_WORK/console" "\$r/dev/console"
mount --rbind /sys "\$r/sys"
# systemd remounts the cgroup tmpfs read-only and adds directories to it: give
# it a private tmpfs holding binds of the machine's hierarchies, so the
# machine's own /sys/fs/cgroup superblock is never touched.
mount -t tmpfs -o mode=0755,nosuid,nodev,noexec tmpfs "\$r/sys/fs/cgroup"
for cg in /sys/fs/cgroup/*; do
  name=\${cg##*/}
  if [[ -L \$cg ]]; then cp -a "\$cg" "\$r/sys/fs/cgroup/"; continue; fi
  mountpoint -q "\$cg" || continue
  mkdir -p "\$r/sys/fs/cgroup/\$name"
  mount --bind "\$cg" "\$r/sys/fs/cgroup/\$name"
done
# Docker's overlay2 storage cannot sit on an overlayfs: its data roots are
# tmpfs of their own.
for d in var/lib/docker var/lib/containerd; do
  mkdir -p "\$r/\$d"
  mount -t tmpfs -o mode=0711 tmpfs "\$r/\$d"
done
# runsc, when installed, is registered as doctor asks (DESIGN.md section 15)
# for the runsc scenarios; a machine's own daemon.json is left as it is.
if [[ -x /usr/bin/runsc && ! -e /etc/docker/daemon.json ]]; then
  mkdir -p "\$r/etc/docker"
  echo '{"runtimes":{"runsc":{"path":"/usr/bin/runsc","runtimeArgs":["--network=none","--host-uds=open"]}}}' >"\$r/etc/docker/daemon.json"
fi
# PrivateTmp= units make /var/tmp/systemd-private-*: /var/tmp is a tmpfs,
# with only the shared work directory bound through from the machine.
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "\$r/var/tmp"
mkdir -p "\$r$share"
mount --bind "$share" "\$r$share"
# A Docker-built machine ships /usr/sbin/policy-rc.d "exit 101" (never start
# services from maintainer scripts); inside the namespace the package must
# behave as on a real host, so that policy allows everything here.
if [[ -e /usr/sbin/policy-rc.d ]]; then cp "$E2E_WORK/policy-rc.d" "\$r/usr/sbin/policy-rc.d"; fi
# Into the overlay: the old root is detached, so nothing inside reaches the
# machine's root filesystem except through the shared work directory.
cd "\$r"
mkdir .e2e-oldroot
pivot_root . .e2e-oldroot
cd /
mount -t proc proc /proc
umount -l /.e2e-oldroot
rmdir /.e2e-oldroot
mount --make-rshared /
exec env -i container=other PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \\
  /lib/systemd/systemd --system --unit=rt-e2e.target --show-status=no --log-target=console
INIT
  chmod 0755 "$E2E_WORK/init.sh"
  local unshare_args=(--pid --mount --uts --ipc --fork --mount-proc --propagation private)
  [[ $NS_NET == 1 ]] && unshare_args+=(--net)
  if [[ -n $NS_CGROUP ]]; then
    # The subshell moves itself into the cgroup, then becomes setsid and
    # unshare (same pid): PID 1 and everything it starts begin there.
    local cg
    for cg in /sys/fs/cgroup/systemd /sys/fs/cgroup/unified; do
      [[ -d $cg ]] || e2e_die "NS_CGROUP: $cg not found (the hybrid layout is needed)"
      mkdir -p "$cg/$NS_CGROUP"
    done
    (
      for cg in /sys/fs/cgroup/systemd /sys/fs/cgroup/unified; do echo "$BASHPID" >"$cg/$NS_CGROUP/cgroup.procs"; done
      exec setsid unshare "${unshare_args[@]}" "$E2E_WORK/init.sh"
    ) </dev/null >"$E2E_WORK/init.out" 2>&1 &
  else
    setsid unshare "${unshare_args[@]}" \
      "$E2E_WORK/init.sh" </dev/null >"$E2E_WORK/init.out" 2>&1 &
  fi
  NS_UNSHARE_PID=$!
  echo "$NS_UNSHARE_PID" >"$E2E_WORK/unshare.pid"
  local i
  for i in $(seq 1 100); do
    NS_PID=$(ns_child_of "$NS_UNSHARE_PID")
    [[ -n $NS_PID ]] && break
    sleep 0.05
  done
  [[ -n $NS_PID ]] || { cat "$E2E_WORK/init.out" >&2; e2e_die "namespace PID 1 did not appear"; }
  echo "$NS_PID" >"$E2E_WORK/ns.pid"
  export NS_PID NS_UNSHARE_PID
  e2e_log "namespace PID 1 is $NS_PID (work $E2E_WORK; root: an overlay of / on a tmpfs)"
  local state=""
  for i in $(seq 1 240); do
    sleep 0.25
    kill -0 "$NS_PID" 2>/dev/null || { cat "$E2E_WORK/init.out" "$E2E_WORK/console" >&2; e2e_die "namespace PID 1 died during boot"; }
    [[ $(readlink "/proc/$NS_PID/exe" 2>/dev/null) == */systemd ]] || continue
    state=$(ns_exec systemctl is-system-running 2>/dev/null || true)
    case $state in running | degraded) break ;; esac
  done
  case $state in
  running | degraded) e2e_log "systemd is $state" ;;
  *)
    ns_exec systemctl list-jobs --no-pager >&2 || true
    e2e_die "systemd did not finish booting (state '$state')"
    ;;
  esac
  if [[ $state == degraded ]]; then ns_exec systemctl --failed --no-pager --no-legend >&2 || true; fi
  ns_wait_docker
}

# ns_exec runs a command inside the namespace (never with the caller's DOCKER_HOST).
ns_exec() {
  [[ -n $NS_PID ]] || e2e_die "ns_exec: namespace not booted"
  local net=()
  [[ $NS_NET == 1 ]] && net=(-n)
  nsenter -t "$NS_PID" -m -p -u -i "${net[@]}" -- env -u DOCKER_HOST -u NOTIFY_SOCKET -u LISTEN_FDS -u LISTEN_PID "$@"
}

ns_wait_docker() {
  local i
  for i in $(seq 1 120); do
    if ns_exec docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
      e2e_log "dockerd $(ns_exec docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}})') ready inside the namespace"
      return 0
    fi
    sleep 0.25
  done
  ns_exec systemctl status docker containerd --no-pager -l >&2 || true
  e2e_die "docker did not start inside the namespace"
}

# ns_teardown stops everything and verifies the machine is as it was. Safe to
# call more than once and after a partial boot.
ns_teardown() {
  local rc=0
  [[ -n ${E2E_WORK:-} && -d ${E2E_WORK:-/nonexistent} ]] || return 0
  ns_stop || rc=1
  ns_cleanup_machine || rc=1
  if ((rc == 0)); then
    rm -rf "$E2E_WORK"
    e2e_log "teardown complete: nothing of the namespace remains"
  else
    e2e_log "teardown found leftovers; work directory kept at $E2E_WORK"
  fi
  NS_PID=""
  return $rc
}

# ns_stop is ns_teardown's first half: the package purged, the namespace's
# PID 1 killed, every process of it gone (checked), a partial boot's
# unshare ended. It leaves the machine-wide checks (ns_cleanup_machine) to
# the caller: a fleet stops all its namespaces first, then checks once.
ns_stop() {
  local rc=0 pid nsid i left=()
  [[ -n ${E2E_WORK:-} && -d ${E2E_WORK:-/nonexistent} ]] || return 0
  [[ -z $NS_PID && -s $E2E_WORK/ns.pid ]] && NS_PID=$(cat "$E2E_WORK/ns.pid")
  [[ -z $NS_UNSHARE_PID && -s $E2E_WORK/unshare.pid ]] && NS_UNSHARE_PID=$(cat "$E2E_WORK/unshare.pid")
  if [[ -n $NS_PID ]] && kill -0 "$NS_PID" 2>/dev/null; then
    nsid=$(readlink "/proc/$NS_PID/ns/pid")
    if declare -F install_purge >/dev/null; then install_purge || rc=1; fi
    ns_exec systemctl stop 'sandbox-broker@*' docker.service docker.socket containerd.service >/dev/null 2>&1 || true
    kill -KILL "$NS_PID" 2>/dev/null || true
    for i in $(seq 1 100); do
      kill -0 "$NS_PID" 2>/dev/null || break
      sleep 0.05
    done
    # Every process of the namespace must be gone.
    for i in $(seq 1 100); do
      left=()
      for pid in /proc/[0-9]*; do
        [[ $(readlink "$pid/ns/pid" 2>/dev/null) == "$nsid" ]] && left+=("${pid#/proc/}")
      done
      ((${#left[@]} == 0)) && break
      sleep 0.05
    done
    if ((${#left[@]})); then
      e2e_log "LEFT: processes of the namespace still run: ${left[*]}"
      rc=1
    fi
  fi
  # A boot that failed before PID 1 was known: end unshare and its child.
  if [[ -n $NS_UNSHARE_PID ]] && kill -0 "$NS_UNSHARE_PID" 2>/dev/null; then
    pid=$(ns_child_of "$NS_UNSHARE_PID")
    if [[ -n $pid ]]; then kill -KILL "$pid" 2>/dev/null || true; fi
    for i in $(seq 1 100); do
      kill -0 "$NS_UNSHARE_PID" 2>/dev/null || break
      sleep 0.05
    done
    kill -KILL "$NS_UNSHARE_PID" 2>/dev/null || true
  fi
  if [[ -n $NS_UNSHARE_PID ]]; then wait "$NS_UNSHARE_PID" 2>/dev/null || true; fi
  return $rc
}

# ns_foreign_cgroups_re prints an extended regexp matching the siblings of this
# process's own cgroups (for example /sys/fs/cgroup/memory/<manager>/<job>).
ns_foreign_cgroups_re() {
  awk -F: '$3 != "/" && $3 != "" {
    n = split($3, a, "/"); p = ""
    for (i = 2; i < n; i++) p = p "/" a[i]
    if (p != "") print "^/sys/fs/cgroup/[^/]+" p "/[^/]+(/|$)"
  }' /proc/self/cgroup | sort -u | paste -sd'|'
}

# ns_cleanup_machine removes what the namespace left on the machine (cgroup
# directories: the cgroup hierarchies are the machine's) and checks that
# nothing else remains: mounts, containers, users, changed files, new paths.
ns_cleanup_machine() {
  local rc=0 d before=$E2E_WORK/before
  [[ -d $before ]] || return 0
  # cgroups: remove new, empty directories deepest first. Siblings of this
  # shell's own cgroups belong to whatever starts processes next to us (a
  # process manager running other jobs), not to the namespace: leave them be.
  local foreign
  foreign=$(ns_foreign_cgroups_re)
  ns_new_cgroups() {
    find /sys/fs/cgroup -mindepth 1 -type d 2>/dev/null | sort >"$E2E_WORK/cgroups.after"
    comm -13 "$before/cgroups" "$E2E_WORK/cgroups.after" | { if [[ -n $foreign ]]; then grep -Ev "$foreign" || true; else cat; fi; }
  }
  ns_new_cgroups | awk '{print length, $0}' | sort -rn | cut -d' ' -f2- |
    while read -r d; do rmdir "$d" 2>/dev/null || true; done
  if [[ -n $(ns_new_cgroups) ]]; then
    e2e_log "LEFT: cgroups still in use:"
    ns_new_cgroups | head -20 >&2
    rc=1
  fi
  awk '{print $5}' /proc/self/mountinfo | sort >"$E2E_WORK/mounts.after"
  if [[ -n $(comm -13 "$before/mounts" "$E2E_WORK/mounts.after") ]]; then
    e2e_log "LEFT: mounts appeared on the machine:"
    comm -13 "$before/mounts" "$E2E_WORK/mounts.after" >&2
    rc=1
  fi
  # Containers: the namespace's dockerd kept its state on tmpfs and every
  # shim of it was a process of the namespace (checked above); a container
  # cgroup left under our parent would mean a container outlived it.
  if compgen -G '/sys/fs/cgroup/*/roundtable-e2e-docker/*' >/dev/null; then
    e2e_log "LEFT: container cgroups under /roundtable-e2e-docker"
    rc=1
  fi
  # Users and groups: the package's live in the namespace's /etc only; a
  # new one on the machine is a leak (or another process's doing), never
  # removed here.
  getent passwd | cut -d: -f1 | sort >"$E2E_WORK/users.after"
  getent group | cut -d: -f1 | sort >"$E2E_WORK/groups.after"
  local newug
  newug=$(comm -13 "$before/users" "$E2E_WORK/users.after" | sed 's/^/user /'; comm -13 "$before/groups" "$E2E_WORK/groups.after" | sed 's/^/group /')
  if [[ -n $newug ]]; then
    e2e_log "LEFT: new users or groups on the machine since the namespace booted:"
    echo "$newug" >&2
    rc=1
  fi
  # Files changed in place: the dpkg database, passwd/group and their
  # backups, apt's and dpkg's logs.
  if [[ -f $before/sums ]]; then
    ns_watch_sums >"$E2E_WORK/sums.after"
    local changed
    changed=$(diff "$before/sums" "$E2E_WORK/sums.after" | sed -n 's/^> [^ ]* //p')
    if [[ -n $changed ]]; then
      e2e_log "LEFT: files changed on the machine since the namespace booted (by the namespace, or by another process on this machine meanwhile):"
      echo "$changed" >&2
      rc=1
      [[ -z ${TEST_SUMMARY_FILE:-} ]] || echo "e2e: FAILED: the leftover check found $(wc -l <<<"$changed") changed files on the machine (first: $(head -1 <<<"$changed"))" >>"$TEST_SUMMARY_FILE"
    fi
  fi
  ns_check_paths || rc=1
  return $rc
}

# ns_check_paths is the check of files and directories: it fails, naming
# them, when ns_watch_list holds paths the listing ns_snapshot took before
# boot ($E2E_WORK/before/paths) did not.
ns_check_paths() {
  local before=$E2E_WORK/before new
  [[ -f $before/paths ]] || return 0
  ns_watch_list >"$E2E_WORK/paths.after"
  new=$(comm -13 "$before/paths" "$E2E_WORK/paths.after")
  [[ -n $new ]] || return 0
  e2e_log "LEFT: new paths on the machine since the namespace booted (ns_watch_list; made by the namespace, or by another process on this machine meanwhile):"
  head -40 <<<"$new" >&2
  [[ -z ${TEST_SUMMARY_FILE:-} ]] || echo "e2e: FAILED: the leftover check found $(wc -l <<<"$new") new paths on the machine (first: $(head -1 <<<"$new"))" >>"$TEST_SUMMARY_FILE"
  return 1
}
