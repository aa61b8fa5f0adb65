# shellcheck shell=bash
# Dev mode: no host daemon. Baselines (docker run --rm -i, runc run of the
# worker and of the floor) against $DOCKER_HOST, image size. Sourced by run.sh.

if [[ -z ${DOCKER_HOST:-} && -S /run/docker-dev.sock ]]; then export DOCKER_HOST=unix:///run/docker-dev.sock; fi

bench_env() { "$BIN/sandbox-bench" env "$@"; }
DOCKERD_TEXT="development dockerd at ${DOCKER_HOST:-default socket}"

bench_setup() { :; }

bench_run_mode() {
  local uid=${BENCH_UID:-65534} gid=${BENCH_GID:-65534}
  if ! command -v runc >/dev/null || ! docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
    note "- No dockerd at ${DOCKER_HOST:-the default socket} or no runc: the container baselines were skipped."
    bench_log "no dockerd or runc: skipping the container baselines"
    return 0
  fi

  if ! docker image inspect "$BENCH_IMAGE" >/dev/null 2>&1; then
    if [[ -x $REPO/image/build.sh ]]; then
      bench_log "building the worker image (make image)"
      make -s image
    fi
  fi
  if ! docker image inspect "$BENCH_IMAGE" >/dev/null 2>&1; then
    # Stand-in until image/ lands: the worker binary alone in a scratch image.
    BENCH_IMAGE=roundtable-sandbox-worker:bench-standin
    local ctx=$WORK/standin
    mkdir -p "$ctx"
    cp "$BIN/sandbox-worker" "$ctx/"
    printf '%s\n' 'FROM scratch' 'COPY sandbox-worker /sandbox-worker' 'USER 65534:65534' 'ENTRYPOINT ["/sandbox-worker"]' >"$ctx/Dockerfile"
    docker build -q -t "$BENCH_IMAGE" "$ctx" >/dev/null
    note "- The worker image was not buildable from image/ yet: a stand-in \`FROM scratch\` image holding only bin/sandbox-worker was used (tag $BENCH_IMAGE)."
  fi

  start_fakemodel
  start_baseline_broker "$uid" "$gid"
  local log_driver=none
  if [[ -S /run/systemd/journal/socket ]]; then log_driver=journald; fi
  [[ $log_driver == journald ]] || note "- No journald on this machine: the docker run baseline used \`--log-driver none\` instead of journald."
  note "- Baseline broker: the real \`sandbox-broker serve --listen\` (one long-lived process as uid $uid, policy with maxCalls 1000, credential dir) forwarding to $FAKEMODEL_KIND; its socket directory is bind-mounted read-only at /run/broker."

  make_floor_bundle "$uid" "$gid"
  local cid entry
  cid=$(docker create "$BENCH_IMAGE")
  docker export "$cid" >"$WORK/worker-rootfs.tar"
  docker rm "$cid" >/dev/null
  entry=$(docker image inspect -f '{{index .Config.Entrypoint 0}}' "$BENCH_IMAGE")
  make_worker_bundle "$uid" "$gid" "$WORK/worker-rootfs.tar" "$entry"

  bench_log "fixed cost: $BENCH_ROUNDS rounds x (docker run, runc worker, runc floor)"
  "$BIN/sandbox-bench" fixedcost --out "$BENCH_RESULTS/fixedcost.json" --rounds "$BENCH_ROUNDS" --warmup "$BENCH_WARMUP" \
    --model "$BENCH_MODEL" --image "$BENCH_IMAGE" --uid "$uid" --gid "$gid" --workspace "$BASE_WS" --turn-dir "$BASE_TURN" \
    --memory-mb $LIM_MEM --cpus $LIM_CPUS --pids $LIM_PIDS --tmpfs-mb $LIM_TMPFS --log-driver "$log_driver" \
    --runc-worker "$WORKER_BUNDLE" --runc-floor "$FLOOR_BUNDLE"
  write_sizes docker
}
