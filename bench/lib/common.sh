# shellcheck shell=bash
# Helpers shared by bench/run.sh and its mode files. Sourced, never executed.

BENCH_SLOW_MARK=bench-slow-model
bench_log() { printf '[bench %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
bench_die() { bench_log "FATAL: $*"; exit 1; }
# note appends a line to the report's "Notes from this run".
note() { printf '%s\n' "$*" >>"$NOTES"; }

bench_mode_text() {
  case $1 in
  full) echo "installed .deb under a namespaced systemd 252 with its own dockerd and journald, via test/e2e/lib/ns.sh" ;;
  dev) echo "no host daemon: baselines against the development dockerd \$DOCKER_HOST, broker overhead, sizes" ;;
  esac
}

# bench_pick_mode prints full when the namespaced systemd can run and the
# package can be built, else dev (and says why on stderr).
bench_pick_mode() {
  local why=""
  if [[ ! -f $REPO/test/e2e/lib/ns.sh ]]; then
    why="test/e2e/lib/ns.sh missing"
  elif [[ ! -x $REPO/packaging/deb/build.sh ]]; then
    why="packaging/deb/build.sh missing"
  else
    # shellcheck source=/dev/null
    why=$(source "$REPO/test/e2e/lib/common.sh" && e2e_skip_reason)
  fi
  if [[ -n $why ]]; then
    bench_log "full mode unavailable: $why; using dev mode"
    note "- Full mode was unavailable: $why."
    echo dev
  else
    echo full
  fi
}

# start_fakemodel starts the model stand-in on loopback and sets MODEL_URL.
# It prefers the end-to-end fake (test/e2e/fakemodel) with a one-rule script
# that answers every request at once; else the bench's own.
start_fakemodel() {
  local port_file=$WORK/fakemodel.port
  rm -f "$port_file"
  if [[ -x $BIN/fakemodel ]]; then
    # A turn whose text carries BENCH_SLOW_MARK is answered after
    # BENCH_B2B_MODEL_MS (the back-to-back series' 1.5 s model); every
    # other at once.
    printf '{"rules":[{"match":"%s","replies":[{"text":"bench reply","delayMs":%d}]},{"match":"","replies":[{"text":"bench reply"}]}]}\n' \
      "$BENCH_SLOW_MARK" "${BENCH_B2B_MODEL_MS:-1500}" >"$WORK/model-script.json"
    "$BIN/fakemodel" -listen 127.0.0.1:0 -port-file "$port_file" -script "$WORK/model-script.json" \
      >"$WORK/fakemodel.log" 2>&1 &
    PIDS+=($!)
    FAKEMODEL_KIND="test/e2e/fakemodel (script: an immediate text answer; ${BENCH_B2B_MODEL_MS:-1500} ms for turns marked $BENCH_SLOW_MARK)"
  else
    "$BIN/sandbox-bench" fakemodel --listen 127.0.0.1:0 --addr-file "$port_file" >"$WORK/fakemodel.log" 2>&1 &
    PIDS+=($!)
    FAKEMODEL_KIND="bench/internal/fakeupstream (immediate fixed answer)"
  fi
  local i
  for i in $(seq 1 100); do [[ -s $port_file ]] && break; sleep 0.05; done
  [[ -s $port_file ]] || bench_die "fake model did not start: $(cat "$WORK/fakemodel.log")"
  local port
  port=$(sed 's/.*://' "$port_file")
  MODEL_URL="http://127.0.0.1:$port/v1/chat/completions"
  bench_log "fake model at $MODEL_URL ($FAKEMODEL_KIND)"
}

# start_baseline_broker UID GID: a real `sandbox-broker serve --listen` for
# the docker run / runc worker baselines, running as the container's uid so
# the socket (0600) is the container's, with a policy and a credential
# directory pointing at the fake model. Sets BASE_WS and BASE_TURN.
start_baseline_broker() {
  local uid=$1 gid=$2 d=$WORK/baseline
  mkdir -p "$d/ws" "$d/turn" "$d/policies" "$d/credentials"
  local turn
  turn=$("$BIN/sandbox-bench" policy --dir "$d/policies" --model-url "$MODEL_URL" --model "$BENCH_MODEL" --credential model \
    --credentials-dir "$d/credentials")
  chown -R "$uid:$gid" "$d"
  chmod 0700 "$d/ws" "$d/turn" "$d/policies" "$d/credentials"
  setpriv --reuid "$uid" --regid "$gid" --clear-groups --no-new-privs \
    "$BIN/sandbox-broker" serve --turn "$turn" --policy-dir "$d/policies" \
    --credentials-dir "$d/credentials" --listen "$d/turn/broker.sock" >"$WORK/baseline-broker.log" 2>&1 &
  PIDS+=($!)
  local i
  for i in $(seq 1 100); do [[ -S $d/turn/broker.sock ]] && break; sleep 0.05; done
  [[ -S $d/turn/broker.sock ]] || bench_die "baseline broker did not listen: $(cat "$WORK/baseline-broker.log")"
  BASE_WS=$d/ws BASE_TURN=$d/turn
}

# make_floor_bundle UID GID: a runc bundle whose rootfs holds only the
# trivial static payload (bench/floor); same confinement, no binds.
make_floor_bundle() {
  local b=$WORK/bundles/floor
  mkdir -p "$b/rootfs"
  cp "$BIN/floor" "$b/rootfs/floor"
  "$BIN/sandbox-bench" bundle --dir "$b" --arg /floor --uid "$1" --gid "$2" \
    --memory-mb $LIM_MEM --cpus $LIM_CPUS --pids $LIM_PIDS --tmpfs-mb $LIM_TMPFS
  FLOOR_BUNDLE=$b
}

# make_worker_bundle UID GID ROOTFS_TAR ENTRYPOINT: the worker image's files as
# a runc bundle with the same binds, env and confinement as a turn container.
make_worker_bundle() {
  local b=$WORK/bundles/worker
  mkdir -p "$b/rootfs"
  tar -x -C "$b/rootfs" -f "$3"
  "$BIN/sandbox-bench" bundle --dir "$b" --arg "$4" --uid "$1" --gid "$2" \
    --memory-mb $LIM_MEM --cpus $LIM_CPUS --pids $LIM_PIDS --tmpfs-mb $LIM_TMPFS \
    --env SANDBOX_BROKER_SOCKET=/run/broker/broker.sock --env SANDBOX_API_KEY=sandbox-dummy-key \
    --bind "$BASE_WS:/workspace" --bind "$BASE_TURN:/run/broker:ro"
  WORKER_BUNDLE=$b
}

# write_sizes DOCKER...: image size as the given docker CLI reports it, the
# archive and binary sizes.
write_sizes() {
  local size archive=0
  size=$("$@" image inspect -f '{{.Size}}' "$BENCH_IMAGE" 2>/dev/null || echo 0)
  [[ -f $SRC/dist/worker-image.tar ]] && archive=$(stat -c %s "$SRC/dist/worker-image.tar")
  cat >"$BENCH_RESULTS/sizes.json" <<JSON
{"image":"$BENCH_IMAGE","imageBytes":$size,"archiveBytes":$archive,
 "workerBytes":$(stat -c %s "$SRC/bin/sandbox-worker"),"hostBytes":$(stat -c %s "$SRC/bin/sandbox-host" 2>/dev/null || echo 0),
 "brokerBytes":$(stat -c %s "$SRC/bin/sandbox-broker")}
JSON
}
