#!/usr/bin/env bash
# make bench: measure where a sealed turn's milliseconds go and write
# docs/BENCHMARKS.md with its SVG figures in docs/figures/ (plus the raw
# results in bench/results/latest/).
#
# Modes (BENCH_MODE):
#   full  the installed .deb under the end-to-end harness's namespaced systemd
#         (test/e2e/lib/ns.sh) with its own dockerd and journald: host API
#         turns, docker run and runc baselines on that same dockerd, per-phase
#         host metrics, 16x4 load, memory, READY. Needs root, systemd,
#         docker.io, polkitd and `make deb`.
#   dev   no host: broker overhead, the docker run --rm -i and runc baselines
#         against $DOCKER_HOST (the development dockerd), image size.
#   auto  (default) full when the machine and tree allow it, else dev.
#
# Knobs: BENCH_ROUNDS (40) BENCH_WARMUP (3) BENCH_BROKER_ITER (3000) BENCH_EGRESS (1)
# BENCH_LOAD_CHANNELS (16) BENCH_LOAD_TURNS (4) BENCH_READY_N (10)
# BENCH_LOAD_STARTS (empty: the load again per queue.startConcurrency listed) BENCH_LOAD_START_ROUNDS (1)
# BENCH_IDLE_CHANNELS (64: standbys' idle cost) BENCH_RUNSC_ROUNDS (7: runsc beside runc)
# BENCH_RUN_ROUNDS (20: code runs of echo ready beside docker run --rm; 0 skips)
# BENCH_SESSION_ROUNDS (40: session exec of true beside docker exec, 1 MiB put/get; 0 skips)
# BENCH_B2B_MODEL_MS (1500) BENCH_BURST_ROUNDS (2) BENCH_BURST_CHANNELS (64) BENCH_BURST_CAPS (4,16)
# BENCH_UNIT_ROUNDS (30) BENCH_UNIT_VARIANT_ROUNDS (8) BENCH_RUN_STANDBY_YAML (the runs.standby lines)
# BENCH_VARIANTS (1: docker run flag variants, full mode) BENCH_VARIANT_ROUNDS (20)
# BENCH_SOURCE (tree to build and measure; default this one)
# BENCH_RESULTS (bench/results/latest) BENCH_REPORT (docs/BENCHMARKS.md)
# BENCH_KEEP=1 keeps the work directory (full mode: with the namespace's journal, journal.txt).
#
# It measures; it asserts nothing. Every process it starts it stops by pid.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
# SRC is the tree whose binaries and package are measured (BENCH_SOURCE: a
# clone at another commit, for the comparison run); the bench itself always
# comes from REPO.
SRC=${BENCH_SOURCE:-$REPO}
export PATH=/usr/local/go/bin:$PATH

BENCH_MODE=${BENCH_MODE:-auto}
BENCH_ROUNDS=${BENCH_ROUNDS:-40}
BENCH_WARMUP=${BENCH_WARMUP:-3}
BENCH_BROKER_ITER=${BENCH_BROKER_ITER:-3000}
BENCH_LOAD_CHANNELS=${BENCH_LOAD_CHANNELS:-16}
BENCH_LOAD_TURNS=${BENCH_LOAD_TURNS:-4}
BENCH_READY_N=${BENCH_READY_N:-10}
BENCH_RESULTS=${BENCH_RESULTS:-$REPO/bench/results/latest}
BENCH_REPORT=${BENCH_REPORT:-$REPO/docs/BENCHMARKS.md}
BENCH_IMAGE=${BENCH_IMAGE:-roundtable-sandbox-worker:latest}
BENCH_MODEL=bench-model
# Container limits: the shipped defaults (packaging/sandbox.yaml).
LIM_MEM=512 LIM_CPUS=1 LIM_PIDS=64 LIM_TMPFS=64

source "$REPO/bench/lib/common.sh"

# /var/tmp, not /tmp: the namespaced systemd mounts its own /tmp.
WORK=$(mktemp -d /var/tmp/roundtable-bench.XXXXXX)
chmod 0755 "$WORK"
PIDS=()
# stop_pids ends what this script started (fake model, baseline broker) by
# pid: before a namespace teardown, which removes the users they run as.
stop_pids() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}
publish_results() {
  [[ -n ${FINAL_RESULTS:-} && -d ${BENCH_RESULTS:-} && $BENCH_RESULTS != "$FINAL_RESULTS" ]] || return 0
  mkdir -p "$FINAL_RESULTS" && cp -a "$BENCH_RESULTS/." "$FINAL_RESULTS/"
}
cleanup() {
  local rc=$?
  stop_pids
  if declare -F bench_ns_down >/dev/null; then bench_ns_down || rc=1; fi
  publish_results || { bench_log "could not copy the results to $FINAL_RESULTS"; rc=1; }
  if [[ ${BENCH_KEEP:-0} == 1 ]]; then bench_log "work directory kept: $WORK"; else rm -rf "$WORK"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Results are written under $WORK, which the namespace (full mode) sees
# wherever the clone is (it has its own /tmp), and copied to BENCH_RESULTS
# at the end, or when the run fails, as far as they got.
FINAL_RESULTS=$BENCH_RESULTS
BENCH_RESULTS=$WORK/results
rm -rf "$FINAL_RESULTS"
mkdir -p "$BENCH_RESULTS" "$WORK/bin"
NOTES=$BENCH_RESULTS/notes.md
: >"$NOTES"

bench_log "building binaries"
make -C "$SRC" -s bin/sandbox-broker bin/sandbox-worker
BIN=$WORK/bin
go build -o "$BIN/sandbox-bench" ./bench/cmd/sandbox-bench
CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$BIN/floor" ./bench/floor
if [[ -d test/e2e/fakemodel ]]; then
  go build -o "$BIN/fakemodel" ./test/e2e/fakemodel
fi
cp "$SRC/bin/sandbox-broker" "$SRC/bin/sandbox-worker" "$BIN/"

if [[ $BENCH_MODE == auto ]]; then
  BENCH_MODE=$(bench_pick_mode)
fi
bench_log "mode: $BENCH_MODE"
note "- Mode: \`$BENCH_MODE\` ($(bench_mode_text "$BENCH_MODE"))."

case $BENCH_MODE in
full) source "$REPO/bench/lib/full.sh" ;;
dev) source "$REPO/bench/lib/dev.sh" ;;
*) bench_die "unknown BENCH_MODE $BENCH_MODE" ;;
esac
bench_setup
# Machine facts (the mode's env runner sees the dockerd under test).
dirty=$(git -C "$SRC" status --porcelain 2>/dev/null | wc -l)
bench_env --out "$BENCH_RESULTS/env.json" --fact "bench mode=$BENCH_MODE" \
  --fact "commit=$(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
  --fact "working tree=$( ((dirty == 0)) && echo clean || echo "$dirty uncommitted paths (make deb builds the working tree)")" \
  --fact "dockerd under test=$DOCKERD_TEXT"

# 3. Broker overhead: needs no Docker and no systemd.
if ((BENCH_BROKER_ITER > 0)); then
  bench_log "broker overhead ($BENCH_BROKER_ITER pairs per mode)"
  mkdir -p "$WORK/brokerbench"
  "$BIN/sandbox-bench" broker --out "$BENCH_RESULTS/broker.json" --broker "$BIN/sandbox-broker" \
    --workdir "$WORK/brokerbench" --iterations "$BENCH_BROKER_ITER" --calls-per-broker 500
fi

# 3b. Egress (docs/DESIGN.md section 11): the vetted dialer against a plain
# dial, and a 64 MiB download through the proxy route (and the bridge in
# front of it) against a direct one, each side by side in one go test run.
# Loopback only, no Docker. BENCH_EGRESS=0 skips.
if [[ ${BENCH_EGRESS:-1} == 1 && -d $SRC/pkg/egress ]]; then
  bench_log "egress: vetted dial against a plain one, proxy download against a direct one"
  if (cd "$SRC" && go test -run '^$' -bench '^BenchmarkDial$' -benchtime 5000x -count 3 ./pkg/safefetch/ &&
    go test -run '^$' -bench '^BenchmarkDownload64MiB$' -benchtime 4x -count 3 ./pkg/egress/) >"$BENCH_RESULTS/egress.txt" 2>&1; then
    note "- Egress (\`go test -bench\` on loopback, raw output \`egress.txt\`): a vetted dial (\`safefetch.Dialer\`) against a plain \`net.Dialer\` one (ns/op), and a 64 MiB download direct, through the proxy route and through bridge and route (MB/s):"
    note ""
    note '```'
    grep -E '^Benchmark' "$BENCH_RESULTS/egress.txt" >>"$NOTES" || true
    note '```'
  else
    note "- Egress benchmarks failed: see \`egress.txt\` in the raw results."
  fi
fi

# 3c. Interception (issue 37, docs/credentialed-egress.md): an intercepted
# request against the same one through a plain CONNECT tunnel, small and
# 1 MiB answers, paired on a reused connection and side by side on a fresh
# one, and the reflection guard's throughput. Loopback only, no Docker;
# about two minutes. The report reads intercept.txt into the Targets table.
# BENCH_EGRESS=0 skips it too. By hand, one section at a time:
#   go test ./pkg/broker -run '^$' -bench '^BenchmarkInterceptPaired$' -count 5
if [[ ${BENCH_EGRESS:-1} == 1 && -d $SRC/pkg/broker ]]; then
  bench_log "interception: intercepted against a plain tunnel, the reflection guard"
  if ! (cd "$SRC" && go test -run '^$' -bench '^BenchmarkInterceptPaired$' -count 5 ./pkg/broker/ &&
    go test -run '^$' -bench '^BenchmarkIntercept$' -benchtime 50x -count 3 ./pkg/broker/ &&
    go test -run '^$' -bench '^BenchmarkGuard(Percent)?$' -count 5 ./pkg/credential/) >"$BENCH_RESULTS/intercept.txt" 2>&1; then
    note "- Interception benchmarks failed: see \`intercept.txt\` in the raw results."
  fi
fi

bench_run_mode

bench_env --out "$BENCH_RESULTS/env-end.json"

publish_results
BENCH_RESULTS=$FINAL_RESULTS
bench_log "writing $BENCH_REPORT"
"$BIN/sandbox-bench" report --results "$BENCH_RESULTS" --out "$BENCH_REPORT" --figures "$(dirname "$BENCH_REPORT")/figures" \
  --fleet "$REPO/bench/results/fleet.json"
sed -i "s#Raw results: \`$REPO/#Raw results: \`#" "$BENCH_REPORT"
bench_log "done: $BENCH_REPORT"
