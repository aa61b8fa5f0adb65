# shellcheck shell=bash
# Full mode: the installed .deb under the end-to-end harness's namespaced
# systemd (test/e2e/lib/ns.sh, reused unchanged) with its own dockerd and
# journald. Every series of the fixed-cost comparison runs on that dockerd.
# Sourced by run.sh.

# shellcheck source=../../test/e2e/lib/ns.sh
source "$REPO/test/e2e/lib/ns.sh"
for f in "$REPO"/test/e2e/lib/install.sh; do
  # shellcheck source=/dev/null
  [[ -f $f ]] && source "$f"
done

HOST_SOCK=/run/roundtable-sandbox/host.sock
CHANNEL_FIXED=bench-fixed
CHANNEL_STANDBY=bench-standby
CHANNEL_LOAD_PREFIX=bench-load-
CHANNEL_B2B=bench-b2b
CHANNEL_B2B_PAUSED=bench-b2b-paused
BENCH_PKG=${PKG_NAME:-roundtable-sandbox}
# Code runs (bench_code_runs): the shipped runs.* defaults
# (packaging/sandbox.yaml) and the toolbox tag the host uses by default.
RUN_IMAGE=roundtable-sandbox-toolbox:latest
RUN_MEM=2048 RUN_CPUS=1 RUN_PIDS=256 RUN_TMPFS=512 RUN_OUTPUT=256
# A guest uid (the last of guests.uidBase/uidCount) for the docker run and
# Engine API run series: non-root, no real user's.
RUN_UID=2147065535

bench_env() { ns_exec "$BIN/sandbox-bench" env "$@"; }
DOCKERD_TEXT="the namespace's own dockerd (/run/docker.sock, data on tmpfs, --bridge=none)"

if ! declare -F install_purge >/dev/null; then
  # ns_teardown calls this before it kills the namespace.
  install_purge() {
    ns_exec systemctl stop sandbox-host.service sandbox-host.socket 'sandbox-broker@*' >/dev/null 2>&1 || true
    ns_exec env DEBIAN_FRONTEND=noninteractive dpkg --purge "$BENCH_PKG" >"$WORK/purge.log" 2>&1 ||
      { bench_log "dpkg --purge failed: $(tail -5 "$WORK/purge.log")"; return 1; }
    rm -rf /etc/roundtable-sandbox /var/lib/roundtable-sandbox
  }
fi

# bench_ns_down tears the namespace down. Leftovers it reports are printed
# by ns_teardown; they do not void measurements already written (another
# engineer's namespace booted meanwhile shows up as new cgroups, too).
bench_ns_down() {
  [[ -n ${NS_PID:-} ]] || return 0
  # BENCH_KEEP=1 keeps the namespace's journal too (a tail's causes are
  # read there), beside the kept work directory.
  if [[ ${BENCH_KEEP:-0} == 1 ]]; then
    ns_exec journalctl --no-pager -o short-precise >"$WORK/journal.txt" 2>&1 || true
  fi
  ns_teardown || bench_log "WARNING: namespace teardown reported leftovers (see above)"
}

# shipped_queue KEY: queue.KEY as packaging/sandbox.yaml ships it (empty
# when the shipped file has no such key: the host's own default applies).
shipped_queue() {
  awk -v k="$1" '/^[^ #]/{q=($1=="queue:")} q && $1==k":"{print $2; exit}' "$SRC/packaging/sandbox.yaml"
}

install_bench_config() {
  local d=/etc/roundtable-sandbox gc
  # The shipped admission (issue 25: the burst series measures it as
  # shipped): queue.globalConcurrency only when the shipped file sets it.
  gc=$(shipped_queue globalConcurrency)
  QUEUE_GC_LINE=""
  [[ -n $gc ]] && QUEUE_GC_LINE="  globalConcurrency: $gc"

  # As docs/operating.md says: the copier's group reads the credentials.
  printf 'sk-bench-host-%s\n' "$RANDOM$RANDOM$RANDOM" |
    ns_exec install -m 0640 -o root -g _sandbox-credset /dev/stdin "$d/credentials/model"
  cat >"$WORK/sandbox.yaml" <<YAML
# written by bench/run.sh: the shipped defaults, the fake model, root as client
model:
  url: $MODEL_URL
  name: $BENCH_MODEL
  maxTokens: 1024
  allowInsecureLoopbackHTTP: true
credentials:
  default: model
  rules: []
initialChannels: []
api:
  clients:
    uids: [0]
    groups: [sandbox-clients]
  admins:
    uids: [0]
    groups: []
turnDeadlineSeconds: 120
limits:
  memoryMb: $LIM_MEM
  cpus: $LIM_CPUS
  pids: $LIM_PIDS
  tmpfsMb: $LIM_TMPFS
queue:
  depth: 8
$QUEUE_GC_LINE
timeZone: UTC
tools: []
mcp: []
image: $BENCH_IMAGE
installation: bench
runs:
  enabled: true
  image: $RUN_IMAGE
  memoryMb: $RUN_MEM
  cpus: $RUN_CPUS
  pids: $RUN_PIDS
  tmpfsMb: $RUN_TMPFS
  outputMb: $RUN_OUTPUT
logLevel: ${BENCH_HOST_LOGLEVEL:-debug}
YAML
  ns_exec install -m 0640 -o root -g _sandbox "$WORK/sandbox.yaml" "$d/sandbox.yaml"
}

host_wait_active() {
  local i
  for i in $(seq 1 100); do
    [[ $(ns_exec systemctl is-active sandbox-host.service 2>/dev/null) == active ]] && return 0
    sleep 0.1
  done
  ns_exec journalctl -u sandbox-host --no-pager | tail -40 >&2
  bench_die "sandbox-host did not become active"
}

# bench_setup builds and installs the package in a freshly booted namespace.
bench_setup() {
  # ns_boot takes the e2e lock (test/e2e/lib/common.sh e2e_lock): no other
  # namespaced run installs the package while this one holds it.
  bench_log "building the package (make deb)"
  make -C "$SRC" --no-print-directory deb >"$WORK/make-deb.log" 2>&1 || { tail -40 "$WORK/make-deb.log" >&2; bench_die "make deb failed"; }
  DEB=$(ls -t "$SRC"/dist/"${BENCH_PKG}"_*_amd64.deb 2>/dev/null | head -1)
  [[ -n $DEB ]] || bench_die "make deb produced no dist/${BENCH_PKG}_*_amd64.deb"
  export DEB
  note "- Package: \`${DEB#"$SRC"/}\` built from commit $(git -C "$SRC" rev-parse --short HEAD), installed with test/e2e/lib/install.sh (install_package), purged at the end (install_purge)."

  export E2E_WORK=$WORK/ns
  mkdir -p "$E2E_WORK"
  # The small toolbox's base is built (or found cached) before ns_boot, as
  # test/e2e/demo.sh does: its cache in /var/cache/roundtable-sandbox-test is
  # then in the listing the teardown's leftover check took before boot.
  if ((${BENCH_RUN_ROUNDS:-20} > 0)) && declare -F toolbox_base >/dev/null; then
    toolbox_base || true
  fi
  ns_boot
  # PID 1 logs its job messages (unit Starting/Started/Stopping) to the
  # journal instead of the console file: the broker units' activation times.
  ns_exec systemd-analyze set-log-target journal
  if declare -F install_package >/dev/null; then
    install_package
  else
    ns_exec env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$DEB" >"$WORK/install.log" 2>&1 ||
      { tail -30 "$WORK/install.log" >&2; bench_die "installing the package failed"; }
  fi
  if ! ns_exec docker image inspect "$BENCH_IMAGE" >/dev/null 2>&1; then
    # (on stdin: the namespace may not see $SRC, for example a clone under /tmp)
    [[ -f $SRC/dist/worker-image.tar ]] && ns_exec docker load <"$SRC/dist/worker-image.tar" >/dev/null
  fi
}

bench_run_mode() {

  start_fakemodel
  install_bench_config
  ns_exec systemctl restart sandbox-host.socket sandbox-host.service
  host_wait_active
  local ch
  for ch in "$CHANNEL_FIXED" "$CHANNEL_STANDBY" "$CHANNEL_B2B" "$CHANNEL_B2B_PAUSED" $(seq -f "$CHANNEL_LOAD_PREFIX%02g" 0 $((BENCH_LOAD_CHANNELS - 1))); do
    ns_exec /usr/bin/sandbox-host channel on "$ch" >/dev/null || bench_die "sandbox-host channel on $ch failed"
  done

  local uid gid
  uid=$(ns_exec id -u _sandbox) gid=$(ns_exec id -g _sandbox) # the package's user exists only in the namespace's root
  start_baseline_broker "$uid" "$gid"
  note "- Baseline broker (docker run and runc worker series): the real \`sandbox-broker serve --listen\`, one long-lived process as _sandbox ($uid:$gid) outside the unit sandbox, policy with maxCalls 1000, its own credential dir, forwarding to the same $FAKEMODEL_KIND as the host; its socket directory is bind-mounted read-only at /run/broker."
  note "- Every series used the namespace's dockerd ($(ns_exec docker version --format '{{.Server.Version}}, API {{.Server.APIVersion}}')) and its journald; docker run used \`--log-driver journald --log-opt tag=sandbox/bench\` like the host."
  make_floor_bundle "$uid" "$gid"
  local cid entry
  cid=$(ns_exec docker create "$BENCH_IMAGE")
  ns_exec docker export "$cid" >"$WORK/worker-rootfs.tar"
  ns_exec docker rm "$cid" >/dev/null
  entry=$(ns_exec docker image inspect -f '{{index .Config.Entrypoint 0}}' "$BENCH_IMAGE")
  WORKER_COMM=$(basename "$entry")
  make_worker_bundle "$uid" "$gid" "$WORK/worker-rootfs.tar" "$entry"

  bench_toolbox
  note "- Host configuration: the shipped defaults (limits ${LIM_MEM} MiB, $LIM_CPUS CPU, $LIM_PIDS pids, ${LIM_TMPFS} MiB /tmp; queue depth 8) with the fake model and logLevel ${BENCH_HOST_LOGLEVEL:-debug} (for the per-turn \`turn phases\` line)."
  # Let the package build and the boot settle before timing anything.
  sleep "${BENCH_SETTLE:-30}"
  # The standby series needs the channel's first (cold) turn to have run.
  ns_exec /usr/bin/sandbox-host turn "$CHANNEL_STANDBY" --speaker-id bench-user --text "prime the standby" >/dev/null ||
    bench_die "priming turn on $CHANNEL_STANDBY failed"
  bench_log "fixed cost: $BENCH_ROUNDS rounds x (host turn cold, host turn on a standby, docker run, Engine API, Engine API pre-started, runc worker, runc floor)"
  ns_exec "$BIN/sandbox-bench" fixedcost --out "$BENCH_RESULTS/fixedcost.json" --rounds "$BENCH_ROUNDS" --warmup "$BENCH_WARMUP" \
    --host-socket "$HOST_SOCK" --channel "$CHANNEL_FIXED" --standby-channel "$CHANNEL_STANDBY" \
    --model "$BENCH_MODEL" --image "$BENCH_IMAGE" --uid "$uid" --gid "$gid" --workspace "$BASE_WS" --turn-dir "$BASE_TURN" \
    --memory-mb $LIM_MEM --cpus $LIM_CPUS --pids $LIM_PIDS --tmpfs-mb $LIM_TMPFS --log-driver journald --log-tag sandbox/bench \
    --engine unix:///run/docker.sock --engine-prestart --runc-worker "$WORKER_BUNDLE" --runc-floor "$FLOOR_BUNDLE"

  ns_exec "$BIN/sandbox-bench" phases --fixedcost "$BENCH_RESULTS/fixedcost.json" --out "$BENCH_RESULTS/phases.json" ||
    note "- The journal phase extraction failed; only the host's histograms are shown."

  bench_code_runs
  bench_sessions
  bench_run_standby
  bench_units

  if [[ ${BENCH_VARIANTS:-1} == 1 ]]; then
    bench_log "docker run flag variants: ${BENCH_VARIANT_ROUNDS:-20} rounds"
    tar -C "$FLOOR_BUNDLE/rootfs" -cf "$WORK/floor.tar" floor
    ns_exec docker import --change 'ENTRYPOINT ["/floor"]' "$WORK/floor.tar" roundtable-bench-floor:latest >/dev/null
    ns_exec "$BIN/sandbox-bench" variants --out "$BENCH_RESULTS/variants.json" --rounds "${BENCH_VARIANT_ROUNDS:-20}" \
      --image roundtable-bench-floor:latest --uid "$uid" --gid "$gid" --workspace "$BASE_WS" --turn-dir "$BASE_TURN"
  fi

  bench_log "load: $BENCH_LOAD_CHANNELS channels x $BENCH_LOAD_TURNS turns"
  ns_exec "$BIN/sandbox-bench" load --out "$BENCH_RESULTS/load.json" --host-socket "$HOST_SOCK" \
    --channels "$BENCH_LOAD_CHANNELS" --turns "$BENCH_LOAD_TURNS" --channel-prefix "$CHANNEL_LOAD_PREFIX"
  bench_load_starts

  bench_backtoback
  bench_burst

  write_sizes ns_exec docker

  bench_log "start to READY: $BENCH_READY_N restarts"
  ns_exec "$BIN/sandbox-bench" ready --out "$BENCH_RESULTS/ready.json" --n "$BENCH_READY_N"

  bench_runtimes
  bench_standby_mem
}

# bench_load_starts: the start bound's factor under load (issue 35): the
# same channels x turns load once per queue.startConcurrency in
# BENCH_LOAD_STARTS (comma-separated; empty, the default, skips),
# interleaved by BENCH_LOAD_START_ROUNDS (1), the host restarted on each
# (off the clock; its startup reap leaves no standby, so each variant starts
# cold as the shipped series did); load-starts-S-R.json per run. The config
# is restored at the end. The report does not render these yet.
bench_load_starts() {
  local starts=${BENCH_LOAD_STARTS:-} rounds=${BENCH_LOAD_START_ROUNDS:-1} cfg=/etc/roundtable-sandbox/sandbox.yaml s r
  [[ -n $starts ]] || return 0
  ns_exec cp -a "$cfg" "$WORK/sandbox.yaml.before-starts"
  for r in $(seq 1 "$rounds"); do
    for s in ${starts//,/ }; do
      awk -v add="  startConcurrency: $s" '{print} /^queue:/{print add}' "$WORK/sandbox.yaml.before-starts" >"$WORK/sandbox.yaml.starts"
      chmod 0644 "$WORK/sandbox.yaml.starts"
      ns_exec install -m 0640 -o root -g _sandbox "$WORK/sandbox.yaml.starts" "$cfg"
      ns_exec systemctl restart sandbox-host.service
      host_wait_active
      bench_log "load with queue.startConcurrency $s (round $r of $rounds)"
      ns_exec "$BIN/sandbox-bench" load --out "$BENCH_RESULTS/load-starts-$s-$r.json" --host-socket "$HOST_SOCK" \
        --channels "$BENCH_LOAD_CHANNELS" --turns "$BENCH_LOAD_TURNS" --channel-prefix "$CHANNEL_LOAD_PREFIX" ||
        note "- The load with queue.startConcurrency $s failed (see the log of make bench)."
    done
  done
  ns_exec install -m 0640 -o root -g _sandbox "$WORK/sandbox.yaml.before-starts" "$cfg"
  ns_exec systemctl restart sandbox-host.service
  host_wait_active
}

# bench_runtimes: runsc beside runc, cold and standby turns, interleaved by
# rounds; sandbox-bench rewrites the config's runtime and restarts the host
# between runtimes (off the clock), and leaves it on runc.
bench_runtimes() {
  local rounds=${BENCH_RUNSC_ROUNDS:-7} out=$BENCH_RESULTS/runtimes.json
  ((rounds > 0)) || return 0
  if ! ns_exec docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; then
    bench_log "runsc is not registered with the namespace's dockerd: runtime comparison skipped"
    printf '%s\n' '{"skipped":"runsc is not registered with the namespace'"'"'s dockerd (test/e2e/lib/ns.sh registers it when /usr/bin/runsc exists and the machine has no /etc/docker/daemon.json)."}' >"$out"
    return 0
  fi
  bench_log "runsc beside runc: $rounds rounds of a cold and a standby turn per runtime, host restarted between runtimes"
  ns_exec "$BIN/sandbox-bench" runtimes --out "$out" --host-socket "$HOST_SOCK" --rounds "$rounds" \
    --runtimes runc,runsc --channel bench-runtime ||
    note "- The runsc beside runc series failed (see the log of make bench)."
  ns_exec /usr/bin/sandbox-host channel off bench-runtime >/dev/null 2>&1 || true
}

# bench_standby_mem: the idle cost of BENCH_IDLE_CHANNELS channels' ready
# standbys. Only those channels may hold one: every other channel is
# switched off first (discarding its standby), standby.max is raised to
# their number, and they are switched off again at the end.
bench_standby_mem() {
  local n=${BENCH_IDLE_CHANNELS:-64} ch
  ((n > 0)) || return 0
  bench_log "idle cost of $n channels' standbys (standby.max: $n)"
  for ch in "$CHANNEL_FIXED" "$CHANNEL_STANDBY" "$CHANNEL_B2B" "$CHANNEL_B2B_PAUSED" $(seq -f "$CHANNEL_LOAD_PREFIX%02g" 0 $((BENCH_LOAD_CHANNELS - 1))); do
    ns_exec /usr/bin/sandbox-host channel off "$ch" >/dev/null || note "- sandbox-host channel off $ch failed before the idle-cost series."
  done
  printf 'standby:\n  max: %d\n' "$n" | ns_exec tee -a /etc/roundtable-sandbox/sandbox.yaml >/dev/null
  ns_exec systemctl restart sandbox-host.service
  host_wait_active
  sleep 3 # the discards of the channels switched off end
  ns_exec "$BIN/sandbox-bench" standbymem --out "$BENCH_RESULTS/standbymem.json" --host-socket "$HOST_SOCK" \
    --channels "$n" --standby-max "$n" --channel-prefix bench-idle- --comm sandbox-host --comm "${WORKER_COMM:-sandbox-worker}" \
    --comm containerd-shim --comm sandbox-broker --comm dockerd --comm containerd ||
    note "- The standby idle-cost series failed (see the log of make bench)."
  for ch in $(seq -f "bench-idle-%02g" 0 $((n - 1))); do
    ns_exec /usr/bin/sandbox-host channel off "$ch" >/dev/null 2>&1 || true
  done
}

# bench_toolbox imports the small test toolbox as runs.image, as the e2e
# harness does (test/e2e/lib/install.sh toolbox_base and install_toolbox:
# test/toolbox/build.sh's cached base, imported in the namespace with the
# installed `sandbox-host toolbox build --small --base-tar`). TOOLBOX_TAR
# stays empty when this machine cannot build it (bench_code_runs skips).
bench_toolbox() {
  TOOLBOX_TAR=""
  ((${BENCH_RUN_ROUNDS:-20} > 0)) || return 0
  if ! declare -F toolbox_base >/dev/null || ! declare -F install_toolbox >/dev/null; then
    TOOLBOX_SKIP="this tree's test/e2e/lib/install.sh has no toolbox_base/install_toolbox"
    return 0
  fi
  bench_log "small toolbox: base (test/toolbox/build.sh, cached) and import in the namespace"
  toolbox_base
  if [[ -z $TOOLBOX_TAR ]]; then
    TOOLBOX_SKIP="the small toolbox could not be built here: $(tail -2 "$E2E_WORK/toolbox-build.log" | tr '\n' ' ')"
    return 0
  fi
  install_toolbox
}

# bench_code_runs: `echo ready` as a code run through the host API beside
# docker run --rm of the same image and command with the run container's
# flags and the run's container through pkg/container, interleaved.
# BENCH_RUN_ROUNDS=0 skips.
bench_code_runs() {
  local rounds=${BENCH_RUN_ROUNDS:-20} out=$BENCH_RESULTS/runs.json text
  ((rounds > 0)) || return 0
  if [[ -z ${TOOLBOX_TAR:-} ]]; then
    bench_log "code runs skipped: ${TOOLBOX_SKIP:-no toolbox}"
    text=${TOOLBOX_SKIP:-no toolbox}
    text=${text//\\/} text=${text//\"/\'}
    printf '{"skipped":"%s"}\n' "$text" >"$out"
    return 0
  fi
  text="the small test toolbox: bash, coreutils and python3 by mmdebstrap from this machine's apt sources (test/toolbox/build.sh's cached base) imported with the installed \`sandbox-host toolbox build --small --base-tar\`, $(ns_exec docker image inspect -f '{{.Size}}' "$RUN_IMAGE" | awk '{printf "%.0f MB", $1/1e6}'), $(ns_exec docker image inspect -f '{{.Id}}' "$RUN_IMAGE" | cut -c1-19)"
  # The host binds its own empty directory (workspaceRoot/.run-empty) for a
  # run without a project; the baselines bind one like it.
  mkdir -p -m 0555 "$WORK/run-empty"
  bench_log "code runs: $rounds rounds x (host API run, docker run --rm, Engine API) of echo ready"
  ns_exec "$BIN/sandbox-bench" runs --out "$out" --rounds "$rounds" --warmup "$BENCH_WARMUP" \
    --host-socket "$HOST_SOCK" --image "$RUN_IMAGE" --image-text "$text" --uid "$RUN_UID" --workspace "$WORK/run-empty" \
    --memory-mb $RUN_MEM --cpus $RUN_CPUS --pids $RUN_PIDS --tmpfs-mb $RUN_TMPFS --output-mb $RUN_OUTPUT \
    --log-driver journald --log-tag sandbox/bench-run --engine unix:///run/docker.sock ||
    note "- The code-run series failed (see the log of make bench)."
}

# bench_sessions: one session of the installed host (sandbox-bench
# sessions): exec of true beside docker exec of the same container, a file
# put and get, resume from pause, create, a paused session's cost.
bench_sessions() {
  local rounds=${BENCH_SESSION_ROUNDS:-40} out=$BENCH_RESULTS/sessions.json text
  ((rounds > 0)) || return 0
  if [[ -z ${TOOLBOX_TAR:-} ]]; then
    text=${TOOLBOX_SKIP:-no toolbox}
    text=${text//\\/} text=${text//\"/\'}
    printf '{"skipped":"%s"}\n' "$text" >"$out"
    return 0
  fi
  bench_log "sessions: $rounds rounds x (exec of true, docker exec, 1 MiB put and get), resumes, creates"
  ns_exec "$BIN/sandbox-bench" sessions --out "$out" --rounds "$rounds" --warmup "$BENCH_WARMUP" --host-socket "$HOST_SOCK" ||
    note "- The session series failed (see the log of make bench)."
  bench_sessions_standby "$out"
}

# bench_sessions_standby: session creates on a ready standby (the host
# restarted with sessions.standby: 1, then restored), added to the
# session results beside the cold creates (BENCH_SESSION_STANDBY_CREATES,
# 5; 0 skips).
bench_sessions_standby() {
  local out=$1 n=${BENCH_SESSION_STANDBY_CREATES:-5} cfg=/etc/roundtable-sandbox/sandbox.yaml why
  ((n > 0)) && [[ -s $out ]] || return 0
  ns_exec cp -a "$cfg" "$WORK/sandbox.yaml.before-session-standby"
  # The bench's own sandbox.yaml may have no sessions: block (then the
  # shipped defaults apply): add one rather than change nothing.
  if grep -q '^sessions:' "$WORK/sandbox.yaml.before-session-standby"; then
    awk '{print} /^sessions:/{print "  standby: 1"}' "$WORK/sandbox.yaml.before-session-standby" |
      awk '!(/^  standby: 0/)' >"$WORK/sandbox.yaml.session-standby"
  else
    { cat "$WORK/sandbox.yaml.before-session-standby"; printf 'sessions:\n  standby: 1\n'; } >"$WORK/sandbox.yaml.session-standby"
  fi
  chmod 0644 "$WORK/sandbox.yaml.session-standby"
  why=$(config_refusal "$WORK/sandbox.yaml.session-standby")
  if [[ -n $why ]]; then
    jq --arg s "not measured: the installed host refuses sessions.standby (doctor: $why)" '.standbyNote=$s' "$out" >"$out.tmp" && mv "$out.tmp" "$out"
    return 0
  fi
  ns_exec install -m 0640 -o root -g _sandbox "$WORK/sandbox.yaml.session-standby" "$cfg"
  ns_exec systemctl reset-failed sandbox-host.service >/dev/null 2>&1 || true
  ns_exec systemctl restart sandbox-host.service
  host_wait_active
  bench_log "sessions: $n creates on a ready standby"
  ns_exec "$BIN/sandbox-bench" sessions --out "$out" --standby-creates "$n" --host-socket "$HOST_SOCK" ||
    note "- The session standby series failed (see the log of make bench)."
  ns_exec install -m 0640 -o root -g _sandbox "$WORK/sandbox.yaml.before-session-standby" "$cfg"
  ns_exec systemctl restart sandbox-host.service
  host_wait_active
}

# bench_backtoback: 20 turns on one channel with the 1.5 s model, each posted
# as the previous reply arrives, beside the same on another channel with a
# 2 s pause between turns (the baseline: the replacement standby has time).
# Each channel gets a first turn and its standby first, off the clock.
bench_backtoback() {
  local n=${BENCH_B2B_TURNS:-20} ch
  # The load channels' standbys fill standby.max (16, shipped): switched off
  # first, so these two channels can hold one each.
  for ch in $(seq -f "$CHANNEL_LOAD_PREFIX%02g" 0 $((BENCH_LOAD_CHANNELS - 1))); do
    ns_exec /usr/bin/sandbox-host channel off "$ch" >/dev/null || note "- sandbox-host channel off $ch failed."
  done
  for ch in "$CHANNEL_B2B" "$CHANNEL_B2B_PAUSED"; do
    ns_exec /usr/bin/sandbox-host turn "$ch" --speaker-id bench-user --text "prime the conversation" >/dev/null ||
      note "- The priming turn on $ch failed."
  done
  bench_log "back to back: $n turns on one channel (model answers in ${BENCH_B2B_MODEL_MS:-1500} ms), then with a 2 s pause"
  ns_exec "$BIN/sandbox-bench" backtoback --out "$BENCH_RESULTS/backtoback.json" --host-socket "$HOST_SOCK" \
    --channel "$CHANNEL_B2B" --turns "$n" --text "hello from the back-to-back benchmark [$BENCH_SLOW_MARK]" \
    --model-delay "${BENCH_B2B_MODEL_MS:-1500}ms" ||
    note "- The back-to-back series failed (see the log of make bench)."
  ns_exec "$BIN/sandbox-bench" backtoback --out "$BENCH_RESULTS/backtoback-paused.json" --host-socket "$HOST_SOCK" \
    --channel "$CHANNEL_B2B_PAUSED" --turns "$n" --text "hello from the back-to-back benchmark [$BENCH_SLOW_MARK]" \
    --model-delay "${BENCH_B2B_MODEL_MS:-1500}ms" --pause 2s ||
    note "- The paused back-to-back baseline failed (see the log of make bench)."
}

# bench_burst: 64 first turns at once on fresh channels, on the shipped
# admission and on fixed globalConcurrency caps 4 and 16, interleaved by
# rounds (BENCH_BURST_ROUNDS, 2; 0 skips). The host is restarted per
# variant; sandbox-bench restores the config at the end.
bench_burst() {
  local rounds=${BENCH_BURST_ROUNDS:-2} n=${BENCH_BURST_CHANNELS:-64} fixed=()
  ((rounds > 0)) || return 0
  # A host whose starts have a bound of their own (queue.startConcurrency
  # shipped): the fixed caps set it to the cap, so they stay the baseline
  # they were before (no start bound below the cap).
  [[ -n $(shipped_queue startConcurrency) ]] && fixed=(--fixed-starts)
  bench_log "burst: $n first turns at once, shipped admission beside globalConcurrency 4 and 16, $rounds rounds"
  ns_exec "$BIN/sandbox-bench" burst --out "$BENCH_RESULTS/burst.json" --host-socket "$HOST_SOCK" \
    --channels "$n" --rounds "$rounds" --caps "${BENCH_BURST_CAPS:-4,16}" "${fixed[@]}" ||
    note "- The burst series failed (see the log of make bench)."
  host_wait_active
}

# config_refusal FILE: empty when the installed host accepts FILE, else
# doctor's words on why not.
config_refusal() {
  local v
  v=$(ns_exec /usr/bin/sandbox-host --config "$1" --json doctor 2>/dev/null |
    jq -r '.checks[]? | select(.name=="config") | .status + " " + .detail' 2>/dev/null || true)
  case $v in
  "ok "*) ;;
  "") echo "sandbox-host doctor gave no verdict on the config" ;;
  *) echo "${v#* }" ;;
  esac
}

# bench_run_standby: the code-run series again with runs.standby declaring
# the shape echo ready has (no project, no setup), beside docker run --rm;
# "not measured" in the report when the installed host refuses the key.
bench_run_standby() {
  local rounds=${BENCH_RUN_ROUNDS:-20} out=$BENCH_RESULTS/runs-standby.json cfg=/etc/roundtable-sandbox/sandbox.yaml why
  ((rounds > 0)) || return 0
  if [[ -z ${TOOLBOX_TAR:-} ]]; then
    printf '{"skipped":"no toolbox image: %s"}\n' "$(printf '%s' "${TOOLBOX_SKIP:-}" | tr -d '"\\')" >"$out"
    return 0
  fi
  ns_exec cp -a "$cfg" "$WORK/sandbox.yaml.before-run-standby"
  # The shape (BENCH_RUN_STANDBY_YAML): lines added under runs:.
  local shape=${BENCH_RUN_STANDBY_YAML:-'  standby:
    shapes:
      - project: ""
        setup: false'}
  awk -v add="$shape" '{print} /^runs:/{print add}' "$WORK/sandbox.yaml.before-run-standby" >"$WORK/sandbox.yaml.run-standby"
  chmod 0644 "$WORK/sandbox.yaml.run-standby"
  why=$(config_refusal "$WORK/sandbox.yaml.run-standby")
  if [[ -n $why ]]; then
    bench_log "run standby series not measured: the host refuses runs.standby"
    jq -n --arg s "the installed host refuses runs.standby (doctor: $why)" '{skipped:$s}' >"$out"
    return 0
  fi
  ns_exec install -m 0640 -o root -g _sandbox "$WORK/sandbox.yaml.run-standby" "$cfg"
  ns_exec systemctl reset-failed sandbox-host.service >/dev/null 2>&1 || true
  ns_exec systemctl restart sandbox-host.service
  host_wait_active
  bench_log "code runs on a run standby: $rounds rounds x (host API run, docker run --rm)"
  ns_exec "$BIN/sandbox-bench" runs --out "$out" --rounds "$rounds" --warmup "$BENCH_WARMUP" \
    --host-socket "$HOST_SOCK" --host-label "sandbox-host run on a run standby (API: POST /v1/runs, events)" --settle 2s \
    --image "$RUN_IMAGE" --uid "$RUN_UID" --workspace "$WORK/run-empty" \
    --memory-mb $RUN_MEM --cpus $RUN_CPUS --pids $RUN_PIDS --tmpfs-mb $RUN_TMPFS --output-mb $RUN_OUTPUT \
    --log-driver journald --log-tag sandbox/bench-run ||
    note "- The run standby series failed (see the log of make bench)."
  ns_exec install -m 0640 -o root -g _sandbox "$WORK/sandbox.yaml.before-run-standby" "$cfg"
  ns_exec systemctl restart sandbox-host.service
  host_wait_active
}

# bench_units: the broker units' start over D-Bus, the host's flow before
# issue 25 (socket start waited, service start queued; a standby: and then
# the service start waited) beside the one it has now (one service start
# waited), as the host's user, so polkit checks every call; then systemd's
# job times from the journal over that window. BENCH_UNIT_ROUNDS (30; 0 skips).
bench_units() {
  local rounds=${BENCH_UNIT_ROUNDS:-30} uid gid d=$WORK/units
  ((rounds > 0)) || return 0
  uid=$(ns_exec id -u _sandbox) gid=$(ns_exec id -g _sandbox)
  mkdir -p "$d" && chown "$uid:$gid" "$d"
  bench_log "broker unit starts over D-Bus: $rounds rounds x (before: 2 calls, now: 1 call, standby before: 3 calls)"
  ns_exec setpriv --reuid "$uid" --regid "$gid" --clear-groups \
    "$BIN/sandbox-bench" units --out "$d/units.json" --rounds "$rounds" ||
    { note "- The unit-start series failed (see the log of make bench)."; return 0; }
  cp "$d/units.json" "$BENCH_RESULTS/units.json"
  ns_exec "$BIN/sandbox-bench" phases --fixedcost "$BENCH_RESULTS/units.json" --out "$BENCH_RESULTS/units-phases.json" ||
    note "- The journal extraction over the unit-start series failed."
  # What the units' own sandbox costs: one drop-in at a time (as root,
  # removed at the end). BENCH_UNIT_VARIANT_ROUNDS (8; 0 skips).
  if ((${BENCH_UNIT_VARIANT_ROUNDS:-8} > 0)); then
    bench_log "broker unit starts with one drop-in at a time: ${BENCH_UNIT_VARIANT_ROUNDS:-8} rounds"
    ns_exec "$BIN/sandbox-bench" unitvariants --out "$BENCH_RESULTS/unit-variants.json" --rounds "${BENCH_UNIT_VARIANT_ROUNDS:-8}" ||
      note "- The unit drop-in variants failed (see the log of make bench)."
  fi
}
