# shellcheck shell=bash
# nsroot: boot a throwaway systemd 252 as PID 1 of private PID, mount, network,
# UTS, IPC and cgroup namespaces, on an overlay of the machine's root whose
# upper layer is a tmpfs. Whatever runs inside (apt install, users, units,
# dockerd) changes only that tmpfs: the machine's files, dpkg database,
# /etc/passwd, network and cgroups stay as they were. /etc and /var/lib/dpkg
# are snapshots taken at boot (a package operation on the machine meanwhile
# does not leak in); callers that install packages should still hold
# nsroot_lock, which the end-to-end harness takes too.
#
# Used by packaging/deb-install-check.sh and for one-off unit experiments.
# nsroot_boot sets NSROOT_PID (the namespace's PID 1, as seen from outside);
# nsroot_exec runs a command inside; nsroot_teardown SIGKILLs that one pid
# (everything inside ends with it) and removes the cgroups and work dir.
# Requires root, util-linux (unshare, nsenter, pivot_root) and overlayfs.

NSROOT_PID=${NSROOT_PID:-}
NSROOT_WORK=${NSROOT_WORK:-}
NSROOT_CG=${NSROOT_CG:-}
NSROOT_LAUNCHER=${NSROOT_LAUNCHER:-}

# Units that make no sense in a namespace sharing the machine's kernel.
NSROOT_MASKED=(
  getty.target console-getty.service getty@tty1.service serial-getty@ttyS0.service
  systemd-udevd.service systemd-udevd-control.socket systemd-udevd-kernel.socket
  systemd-udev-trigger.service systemd-udev-settle.service systemd-hwdb-update.service
  systemd-modules-load.service kmod-static-nodes.service systemd-sysctl.service
  systemd-binfmt.service proc-sys-fs-binfmt_misc.automount proc-sys-fs-binfmt_misc.mount
  systemd-remount-fs.service systemd-fsck-root.service systemd-timesyncd.service
  systemd-random-seed.service systemd-machine-id-commit.service systemd-firstboot.service
  systemd-pstore.service systemd-repart.service systemd-journal-catalog-update.service
  systemd-pcrphase.service systemd-pcrphase-sysinit.service
  systemd-ask-password-console.path systemd-ask-password-wall.path
  sys-kernel-debug.mount sys-kernel-tracing.mount sys-kernel-config.mount
  sys-fs-fuse-connections.mount dev-hugepages.mount dev-mqueue.mount swap.target
  cryptsetup.target integritysetup.target veritysetup.target
  apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer
  e2scrub_reap.service fstrim.timer man-db.timer logrotate.timer
  systemd-networkd.service systemd-resolved.service networking.service
  ssh.service cron.service rsyslog.service
)

# nsroot_lock: take the machine-wide lock of namespaced package runs (the
# same file test/e2e uses), waiting up to 15 minutes.
nsroot_lock() {
  mkdir -p /run/lock
  exec {NSROOT_LOCK_FD}>/run/lock/roundtable-sandbox-e2e.lock
  if ! flock -n "$NSROOT_LOCK_FD"; then
    nsroot_log "waiting for /run/lock/roundtable-sandbox-e2e.lock (another namespaced run)"
    flock -w 900 "$NSROOT_LOCK_FD" || { nsroot_log "could not take the lock"; return 1; }
  fi
}

nsroot_log() { printf '[nsroot %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# nsroot_skip_reason prints why this machine cannot boot the namespace, or nothing.
nsroot_skip_reason() {
  [[ $(id -u) == 0 ]] || { echo "not root"; return; }
  local t
  for t in unshare nsenter pivot_root mount; do
    command -v "$t" >/dev/null 2>&1 || { echo "$t not found"; return; }
  done
  [[ -x /lib/systemd/systemd ]] || { echo "/lib/systemd/systemd not found"; return; }
  grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null || true
  grep -qw overlay /proc/filesystems || { echo "overlayfs not available"; return; }
}

# nsroot_cgroup_dirs prints, for every cgroup hierarchy this shell is in, the
# directory of a fresh child cgroup named $1 (not yet created).
nsroot_cgroup_dirs() {
  local name=$1 id ctl path mnt
  while IFS=: read -r id ctl path; do
    case $ctl in
      "") mnt=/sys/fs/cgroup/unified; [[ -d $mnt ]] || mnt=/sys/fs/cgroup ;;
      name=systemd) mnt=/sys/fs/cgroup/systemd ;;
      *) mnt=/sys/fs/cgroup/${ctl%%,*} ;;
    esac
    [[ -f $mnt/cgroup.procs ]] || continue
    echo "$mnt${path%/}/$name"
  done </proc/self/cgroup
}

# nsroot_boot [target-unit-lines]: boot and wait for systemd to be up.
nsroot_boot() {
  NSROOT_WORK=$(mktemp -d /var/tmp/rtsb-nsroot.XXXXXX)
  NSROOT_CG=rtsb-nsroot-$$-$RANDOM
  local w=$NSROOT_WORK u
  mkdir -p "$w/t" "$w/run/systemd/system" "$w/run/systemd/journald.conf.d"
  for u in "${NSROOT_MASKED[@]}"; do ln -sf /dev/null "$w/run/systemd/system/$u"; done
  cat >"$w/run/systemd/system/rtsb-nsroot.target" <<'UNIT'
[Unit]
Description=roundtable-sandbox packaging test namespace
Requires=basic.target
Wants=dbus.service
After=basic.target
AllowIsolate=yes
UNIT
  printf '[Journal]\nStorage=volatile\nRateLimitBurst=0\nForwardToConsole=no\n' \
    >"$w/run/systemd/journald.conf.d/nsroot.conf"
  : >"$w/console"
  nsroot_cgroup_dirs "$NSROOT_CG" >"$w/cgroups"
  cat >"$w/init.sh" <<EOF
#!/bin/bash
set -e
w=$w
# libmount would make /run/mount on the machine's /run.
export LIBMOUNT_UTAB=\$w/utab
mount --make-rprivate /
mount -t tmpfs -o mode=0755 tmpfs \$w/t
mkdir -p \$w/t/upper \$w/t/work \$w/t/root
mount -t overlay overlay -o lowerdir=/,upperdir=\$w/t/upper,workdir=\$w/t/work \$w/t/root
r=\$w/t/root
# /etc and the dpkg database are copied now, so a package operation on the
# machine itself while this namespace runs cannot leak into it half-done.
for d in etc var/lib/dpkg; do
  mkdir -p \$w/t/snap/\$d
  cp -a \$r/\$d/. \$w/t/snap/\$d/
  mount --bind \$w/t/snap/\$d \$r/\$d
done
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs \$r/run
cp -a \$w/run/. \$r/run/
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs \$r/tmp
for d in var/lib/docker var/lib/containerd; do mkdir -p \$r/\$d; mount -t tmpfs -o mode=0711 tmpfs \$r/\$d; done
mount --rbind /dev \$r/dev
mount --bind \$w/console \$r/dev/console
mkdir -p \$r/.nsroot-old
cd \$r
pivot_root . .nsroot-old
mount -t proc proc /proc
umount -l /.nsroot-old
rmdir /.nsroot-old
mount --make-rshared /
exec env -i container=other PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \\
  /lib/systemd/systemd --system --unit=rtsb-nsroot.target --show-status=no --log-target=console
EOF
  chmod 0755 "$w/init.sh"
  # The launcher moves itself into fresh cgroups, so the inner systemd's cgroup
  # namespace (and everything it creates) is a subtree we can remove later.
  (
    while read -r d; do
      mkdir -p "$d"
      # A v1 cpuset cgroup takes no task before it has cpus and mems.
      if [[ -f $d/cpuset.cpus ]]; then
        echo "$(<"${d%/*}/cpuset.cpus")" >"$d/cpuset.cpus"
        echo "$(<"${d%/*}/cpuset.mems")" >"$d/cpuset.mems"
      fi
      echo $BASHPID >"$d/cgroup.procs"
    done <"$w/cgroups"
    exec unshare --pid --mount --net --uts --ipc --cgroup --fork --propagation private "$w/init.sh"
  ) >"$w/launcher.log" 2>&1 &
  NSROOT_LAUNCHER=$!
  local i state=
  for ((i = 0; i < 100; i++)); do
    # Only once the launcher is unshare is its one child the namespace's PID 1.
    if [[ $(cat "/proc/$NSROOT_LAUNCHER/comm" 2>/dev/null) == unshare ]]; then
      NSROOT_PID=$(awk '{print $1}' "/proc/$NSROOT_LAUNCHER/task/$NSROOT_LAUNCHER/children" 2>/dev/null || true)
      [[ -n $NSROOT_PID ]] && break
    fi
    sleep 0.1
  done
  [[ -n $NSROOT_PID ]] || { nsroot_log "namespace did not start: $(cat "$w/launcher.log")"; return 1; }
  for ((i = 0; i < 300; i++)); do
    state=$(nsroot_exec systemctl is-system-running 2>/dev/null || true)
    case $state in running | degraded) break ;; esac
    sleep 0.2
  done
  case $state in
    running | degraded) nsroot_log "systemd up in namespace (pid $NSROOT_PID, $state)" ;;
    *) nsroot_log "systemd did not come up (state '$state'); console: $(tail -5 "$w/console")"; return 1 ;;
  esac
  export NSROOT_PID NSROOT_WORK NSROOT_CG NSROOT_LAUNCHER
}

# nsroot_exec CMD...: run CMD inside the namespace, as root, in its root.
nsroot_exec() {
  nsenter -t "$NSROOT_PID" -m -p -n -u -i -C -r -w -- env -i \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"
}

# nsroot_teardown: SIGKILL the namespace's PID 1 and remove what it left.
nsroot_teardown() {
  [[ -n $NSROOT_WORK ]] || return 0
  if [[ -n $NSROOT_PID ]] && kill -0 "$NSROOT_PID" 2>/dev/null; then
    kill -KILL "$NSROOT_PID"
  fi
  if [[ -n $NSROOT_LAUNCHER ]]; then wait "$NSROOT_LAUNCHER" 2>/dev/null || true; fi
  local d i
  if [[ -f $NSROOT_WORK/cgroups ]]; then
    while read -r d; do
      [[ -d $d ]] || continue
      for ((i = 0; i < 50; i++)); do
        find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
        [[ -d $d ]] || break
        sleep 0.1
      done
      if [[ -d $d ]]; then nsroot_log "WARNING: cgroup $d remains"; fi
    done <"$NSROOT_WORK/cgroups"
  fi
  case $NSROOT_WORK in /var/tmp/rtsb-nsroot.*) rm -rf "$NSROOT_WORK" ;; esac
  NSROOT_PID='' NSROOT_WORK='' NSROOT_LAUNCHER=''
}
