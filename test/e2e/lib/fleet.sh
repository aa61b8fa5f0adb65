# shellcheck shell=bash
# A fleet of namespaced boxes for the fleet's end-to-end scenario
# (test/e2e/fleet): each box is ns.sh's namespaced systemd 252 with its own
# dockerd and its own dpkg install of the .deb, booted with NS_NET=1 (a
# network namespace of its own) and NS_CGROUP (its systemd's own cgroup, so
# that two of them never manage the same cgroups). The boxes are joined by
# veth pairs to a bridge that lives in one more network namespace (the
# switch, held by a sleeping process): box N is FLEET_SUBNET.N/24 on its
# eth0.
#
# Guarantee: every address exists inside this run's namespaces only; the
# machine's own network namespace never gets an interface, an address or a
# route (each veth is made inside the switch with its peer created directly
# in the box, and fleet_teardown compares the machine's links, addresses and
# routes with those before boot). fleet_teardown stops every box (ns_stop:
# the package purged, every process gone), the switch, then runs ns.sh's
# machine-wide leftover checks once against the snapshot taken before the
# first box booted.
#
# Sourced after ns.sh and install.sh; the caller sets FLEET_TOP (a fresh
# directory under /var/tmp: every box's work directory lies below it, so it
# is the one directory bound into every box).

FLEET_SUBNET=${FLEET_SUBNET:-10.252.0}
FLEET_SWITCH_PID=${FLEET_SWITCH_PID:-}
FLEET_BOX_PIDS=()
FLEET_BOX_UNSHARE=()

# fleet_skip_reason: why this machine cannot run a fleet of boxes (on top of
# e2e_skip_reason), or nothing.
fleet_skip_reason() {
  command -v ip >/dev/null 2>&1 || { echo "ip not found ($(e2e_install_hint iproute2))"; return; }
  unshare --net true 2>/dev/null || { echo "unshare of a network namespace refused"; return; }
  [[ -d /sys/fs/cgroup/systemd && -d /sys/fs/cgroup/unified ]] || { echo "no name=systemd and unified cgroup hierarchies (the hybrid layout)"; return; }
}

# fleet_net_state prints the machine's own links, addresses and routes
# (counters and link state left out: they change by themselves).
fleet_net_state() {
  ip -o link show | awk '{print $2}'
  ip -o addr show | awk '{print $2, $3, $4}'
  ip route show table all
}

# fleet_snapshot records the machine before the first box boots (ns.sh's
# snapshot, in FLEET_TOP/before, and the network).
fleet_snapshot() {
  E2E_WORK=$FLEET_TOP ns_snapshot
  fleet_net_state | sort >"$FLEET_TOP/before/net"
}

# fleet_switch_up makes the switch: a network namespace holding bridge br0.
fleet_switch_up() {
  setsid unshare --net -- sleep infinity </dev/null >/dev/null 2>&1 &
  FLEET_SWITCH_PID=$!
  echo "$FLEET_SWITCH_PID" >"$FLEET_TOP/switch.pid"
  local i
  for i in $(seq 1 100); do
    [[ $(readlink "/proc/$FLEET_SWITCH_PID/ns/net" 2>/dev/null) != "$(readlink /proc/self/ns/net)" ]] && break
    sleep 0.05
  done
  [[ $(readlink "/proc/$FLEET_SWITCH_PID/ns/net" 2>/dev/null) != "$(readlink /proc/self/ns/net)" ]] || e2e_die "the switch's network namespace did not appear"
  nsenter -t "$FLEET_SWITCH_PID" -n ip link add br0 type bridge &&
    nsenter -t "$FLEET_SWITCH_PID" -n ip link set br0 up &&
    nsenter -t "$FLEET_SWITCH_PID" -n ip link set lo up || e2e_die "cannot make the switch's bridge"
}

# fleet_use N makes box N the namespace ns.sh's functions act on (ns_exec,
# install_package, ns_stop).
fleet_use() {
  E2E_WORK=$FLEET_TOP/box$1
  NS_PID=${FLEET_BOX_PIDS[$1]:-}
  NS_UNSHARE_PID=${FLEET_BOX_UNSHARE[$1]:-}
  NS_NET=1
  export E2E_WORK NS_PID NS_UNSHARE_PID NS_NET
}

# fleet_boot N boots box N and links it to the switch as FLEET_SUBNET.N.
fleet_boot() {
  local n=$1
  mkdir -p "$FLEET_TOP/box$n"
  E2E_WORK=$FLEET_TOP/box$n NS_PID="" NS_UNSHARE_PID=""
  NS_NET=1 NS_CGROUP=roundtable-e2e-box$n
  ns_boot
  FLEET_BOX_PIDS[n]=$NS_PID
  FLEET_BOX_UNSHARE[n]=$NS_UNSHARE_PID
  NS_CGROUP=""
  local sw=(nsenter -t "$FLEET_SWITCH_PID" -n ip) box=(nsenter -t "$NS_PID" -n ip)
  "${sw[@]}" link add "vb$n" type veth peer name eth0 netns "$NS_PID" &&
    "${sw[@]}" link set "vb$n" master br0 up &&
    "${box[@]}" link set lo up &&
    "${box[@]}" addr add "$FLEET_SUBNET.$n/24" dev eth0 &&
    "${box[@]}" link set eth0 up || e2e_die "cannot link box $n to the switch"
  e2e_log "box $n: namespace PID 1 $NS_PID, eth0 $FLEET_SUBNET.$n/24 on the switch"
}

# fleet_teardown stops every box and the switch, then checks the machine
# once. Safe after a partial boot.
fleet_teardown() {
  local rc=0 n
  [[ -n ${FLEET_TOP:-} && -d ${FLEET_TOP:-/nonexistent} ]] || return 0
  # Last box first; each from its recorded pids (also a box whose boot
  # failed before fleet_boot returned).
  for n in $(find "$FLEET_TOP" -maxdepth 1 -name 'box*' -printf '%f\n' | sed 's/^box//' | sort -rn); do
    E2E_WORK=$FLEET_TOP/box$n NS_PID="" NS_UNSHARE_PID="" NS_NET=1
    ns_stop || rc=1
  done
  [[ -z $FLEET_SWITCH_PID && -s $FLEET_TOP/switch.pid ]] && FLEET_SWITCH_PID=$(cat "$FLEET_TOP/switch.pid")
  if [[ -n $FLEET_SWITCH_PID ]]; then
    kill -KILL "$FLEET_SWITCH_PID" 2>/dev/null || true
    wait "$FLEET_SWITCH_PID" 2>/dev/null || true
  fi
  E2E_WORK=$FLEET_TOP
  ns_cleanup_machine || rc=1
  if [[ -f $FLEET_TOP/before/net ]]; then
    local changed
    changed=$(diff <(cat "$FLEET_TOP/before/net") <(fleet_net_state | sort) || true)
    if [[ -n $changed ]]; then
      e2e_log "LEFT: the machine's own links, addresses or routes changed since the fleet booted:"
      echo "$changed" >&2
      rc=1
      [[ -z ${TEST_SUMMARY_FILE:-} ]] || echo "e2e-fleet: FAILED: the machine's network changed (first: $(head -2 <<<"$changed" | tail -1))" >>"$TEST_SUMMARY_FILE"
    fi
  fi
  if ((rc == 0)); then
    rm -rf "$FLEET_TOP"
    e2e_log "fleet teardown complete: nothing of the boxes, the switch or their network remains"
  else
    e2e_log "fleet teardown found leftovers; work directory kept at $FLEET_TOP"
  fi
  FLEET_BOX_PIDS=() FLEET_SWITCH_PID="" NS_PID=""
  return $rc
}
