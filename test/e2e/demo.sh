#!/usr/bin/env bash
# make demo: build and install the package, then show every kind working
# against local stand-ins, each step's command, its output and its journal
# lines, and one summary line per kind at the end:
#   sealed      three sealed turns (an echo, "remember ...", a recall), the
#               later ones on the channel's standby
#   rich        a rich channel's two turns on one session, the second
#               answered from the history the session kept
#   run         a code run with setup (as root), a project (read-only) and
#               an artifact, in the small test toolbox
#   network run a run asking for network: waits, denied; another approved,
#               reaching the allowed page and refused everything else
#   precheck    a precheck script that calls an MCP tool and wakes with it
#   delegation  a delegated research job whose report arrives on jobs follow
#   mcp         sandbox_run called by a real MCP client (the official
#               TypeScript SDK) through `sandbox-host mcp`
#   session     a session: created, a wheel installed into it, two execs
#               (the second sees what the first left), a file out, closed
# A kind that cannot run here says why in one line and the others go on;
# the exit status is 1 when a kind failed.
#
# The stand-ins, all local and NOT language models or real services:
# test/e2e/fakemodel -demo is the model (Chat Completions for sealed turns
# and delegated jobs: echo, memory_set/memory_get, host_fetch of a URL in a
# research task; the Anthropic Messages stream for rich channels); and
# test/e2e/fakemcp is the MCP server "tickets" (tool lookup) plus, on a
# second loopback port, a web page (the only address in egress.allow). The
# code-run kinds use the small test toolbox (test/toolbox/build.sh: built
# once with mmdebstrap, then cached in /var/cache/roundtable-sandbox-test)
# and the MCP kind the pinned npm peers (test/peers).
#
# With systemd as PID 1 (/run/systemd/system exists and PID 1 is systemd) the
# package is installed on this machine and stays installed; the demo config
# replaces /etc/roundtable-sandbox/sandbox.yaml only for the demo and the
# previous file is put back afterwards (a toolbox image already there is used
# as it is; otherwise the small one is imported and stays). Otherwise the
# demo boots the e2e harness's namespaced systemd, runs there and tears it
# down.
#   DEMO_KINDS="sealed rich ..."  run only these kinds (default: all)
#   DEMO_TEXT="..."               one sealed turn with this message instead
set -euo pipefail
source "$(dirname "$0")/lib/ns.sh"
source "$(dirname "$0")/lib/install.sh"

ALL_KINDS=(sealed rich run network-run precheck delegation mcp session)
read -r -a KINDS <<<"${DEMO_KINDS:-${ALL_KINDS[*]}}"
for k in "${KINDS[@]}"; do
  [[ " ${ALL_KINDS[*]} " == *" $k "* ]] || { echo "DEMO_KINDS: unknown kind $k (kinds: ${ALL_KINDS[*]})" >&2; exit 2; }
done

CHANNEL=demo
RICH_CHANNEL=demo-rich
PRECHECK_CHANNEL=demo-precheck
STARTED=$SECONDS
LOCK_WAIT=""

real_systemd() {
  [[ -d /run/systemd/system ]] && [[ $(readlink /proc/1/exe 2>/dev/null) == */systemd ]]
}

reason=$(e2e_skip_reason)
if [[ -n $reason ]] && ! { [[ $(id -u) == 0 ]] && real_systemd; }; then
  echo "demo not possible here: $reason"
  exit 1
fi

E2E_WORK=$(mktemp -d /var/tmp/roundtable-demo.XXXXXX)
export E2E_WORK
chmod 0755 "$E2E_WORK"
if real_systemd; then
  MODE=real
  X() { env -u DOCKER_HOST "$@"; }
else
  MODE=namespace
  X() { ns_exec "$@"; }
fi

CONF=/etc/roundtable-sandbox/sandbox.yaml
CREDS=/etc/roundtable-sandbox/credentials
CRED=$CREDS/model
PROJECT=/srv/roundtable-demo-project
RESULTS=$E2E_WORK/results

# summary prints one line per kind; it fails when a kind failed.
summary() {
  local k line failed=0
  for k in "${KINDS[@]}"; do
    line=$(cat "$RESULTS/$k" 2>/dev/null || echo "FAILED: did not run")
    [[ $line == FAILED* ]] && failed=1
    printf '  %-12s %s\n' "$k" "$line"
  done
  return $failed
}

cleanup() {
  local rc=$? sum="" src=0
  # Read before the teardown, which removes the work directory.
  if [[ -d $RESULTS ]]; then sum=$(summary) || src=1; fi
  if [[ $MODE == real ]]; then
    systemctl stop roundtable-demo-model.service roundtable-demo-mcp.service 2>/dev/null || true
    rm -rf /run/roundtable-demo "$PROJECT"
    if [[ -f $CONF.pre-demo ]]; then
      mv -f "$CONF.pre-demo" "$CONF"
      [[ -f $CRED.pre-demo ]] && mv -f "$CRED.pre-demo" "$CRED"
      [[ -f $CREDS/.mcp-demo-new ]] && rm -f "$CREDS/mcp-demo" "$CREDS/.mcp-demo-new"
      [[ -f $CREDS/.demo-api-new ]] && rm -f "$CREDS/demo-api" "$CREDS/.demo-api-new"
      rm -f "${CONF%/*}/demo-api-ca.pem"
      systemctl try-restart sandbox-host.service || true
      e2e_log "previous configuration restored"
    fi
  else
    ns_teardown || rc=1
  fi
  [[ $MODE == real ]] && rm -rf "$E2E_WORK"
  if [[ -n $sum ]]; then
    echo
    echo "=== demo summary ($MODE systemd; $((SECONDS - STARTED)) s from the build to the end of the teardown${LOCK_WAIT:+, $LOCK_WAIT s of it waiting for the e2e lock another run held}) ==="
    echo "$sum"
    ((src == 0)) || rc=1
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- how the demo shows what it does ------------------------------------

# shq prints its arguments as a shell would need them typed.
shq() {
  local a out=()
  for a in "$@"; do
    if [[ $a =~ ^[A-Za-z0-9_./:=@%+,-]+$ ]]; then out+=("$a"); else out+=("'${a//\'/\'\\\'\'}'"); fi
  done
  echo "${out[*]}"
}

# sh_ prints a command (on stderr, so that its output alone can be kept),
# then runs it where the installation is.
sh_() {
  echo "\$ $(shq "$@")" | sed "s|^\$ /usr/bin/sandbox-host |\$ sandbox-host |" >&2
  X "$@"
}

header() { printf '\n=== %s ===\n' "$*"; }
note() { printf '# %s\n' "$*"; }

# journal TITLE ARGS...: the journal lines matching ARGS (journalctl
# matches and options), under a line naming the command.
journal() {
  local title=$1
  shift
  echo "--- journalctl $(shq "$@") ($title) ---"
  X journalctl --utc --no-pager -o short-iso "$@" 2>/dev/null || true
}

# wait_journal PATTERN ARGS...: wait (at most 10 s) until a line matching
# ARGS holds PATTERN: worker lines reach the journal asynchronously.
wait_journal() {
  local pattern=$1 deadline=$((SECONDS + 10))
  shift
  until [[ $(X journalctl --no-pager -o cat "$@" 2>/dev/null) == *"$pattern"* ]]; do
    if ((SECONDS >= deadline)); then
      note "(the line with $pattern did not reach the journal within 10 s)"
      return 0
    fi
    sleep 0.2
  done
}

# Each kind runs in a subshell of its own: its result line goes to
# $RESULTS/<kind>; a failed command ends only that kind.
ok() { echo "ok: $*" >"$RESULTS/$KIND"; }
skip() {
  echo "skipped: $*" >"$RESULTS/$KIND"
  note "skipped: $*"
  exit 0
}
fail() {
  echo "FAILED: $*" >"$RESULTS/$KIND"
  note "FAILED: $*"
  exit 1
}
run_kind() {
  KIND=$1
  local t0=$SECONDS rc
  set +e
  (
    set -eE
    trap 'rc=$?; fail "${BASH_COMMAND:0:120} exited $rc (output above)"' ERR
    "kind_${KIND//-/_}"
  )
  rc=$?
  set -e
  [[ -s $RESULTS/$KIND ]] || echo "FAILED: exited $rc without a result (output above)" >"$RESULTS/$KIND"
  sed -i "1s/\$/ [$((SECONDS - t0)) s]/" "$RESULTS/$KIND"
}

# --- the kinds -----------------------------------------------------------

# Each sealed turn's worker lines are found by its container's name (the
# host forwards the worker's stderr to journald with CONTAINER_NAME, and
# names a turn's container roundtable-sandbox-<channel hash>-<turn>): the
# journal cursor taken before the turn only finds that name. (journalctl
# 252 with --after-cursor plus a match such as -t skips the first matching
# entry when the cursor's own entry does not match: that lost a line of
# every turn.) The demo waits for the worker's closing "turn finished" line.
CONTAINER_PREFIX=roundtable-sandbox-$(printf %s "$CHANNEL" | sha256sum | cut -c1-16)-
TURN_MS=()
# standby_ready waits (at most 30 s) until the channel's standby is ready,
# so the next turn shows the warm path; says so when it is not.
standby_ready() {
  local deadline=$((SECONDS + 30))
  until [[ $(X /usr/bin/sandbox-host channel status "$CHANNEL" 2>/dev/null) == *"standby ready"* ]]; do
    if ((SECONDS >= deadline)); then
      note "(the channel's standby was not ready within 30 s: the next turn takes the cold path)"
      WARM=""
      return 0
    fi
    sleep 0.1
  done
  echo
  note "the channel's standby is ready (a fresh container, prepared after the previous turn, its worker waiting for this turn):"
  sh_ /usr/bin/sandbox-host channel status "$CHANNEL"
  WARM=1
}
WARM=""
turn() {
  local text=$1 cursor name="" deadline t0 t1 ms how="cold: a fresh container created for it"
  cursor=$(X journalctl -n 0 --show-cursor --no-pager 2>/dev/null | sed -n 's/^-- cursor: //p')
  [[ -n $cursor ]] || fail "journalctl printed no cursor"
  echo
  t0=$(date +%s%N)
  sh_ /usr/bin/sandbox-host turn "$CHANNEL" --speaker-id guest-1 --speaker-name "Demo Guest" --text "$text" >"$E2E_WORK/reply" 2>&1 ||
    { cat "$E2E_WORK/reply"; fail "the turn failed; journal: journalctl -u sandbox-host -u 'sandbox-broker@*'"; }
  t1=$(date +%s%N)
  ms=$(((t1 - t0) / 1000000))
  [[ -z $WARM ]] || how="on the standby"
  WARM=""
  TURN_MS+=("$ms ms ${how%%:*}")
  echo "$(cat "$E2E_WORK/reply")"
  note "($ms ms, $how)"
  deadline=$((SECONDS + 10))
  while :; do
    if [[ -z $name ]]; then
      name=$(X journalctl --no-pager --after-cursor "$cursor" -o json --output-fields=CONTAINER_NAME 2>/dev/null |
        grep -o "\"CONTAINER_NAME\":\"$CONTAINER_PREFIX[0-9a-f]*\"" | head -1 | cut -d'"' -f4 || true)
    fi
    if [[ -n $name && $(X journalctl --no-pager -o cat CONTAINER_NAME="$name" 2>/dev/null) == *'"turn finished"'* ]]; then
      break
    fi
    if ((SECONDS >= deadline)); then
      note "WARNING: this turn's worker lines did not all reach the journal within 10 s${name:+ (container $name)}"
      break
    fi
    sleep 0.2
  done
  [[ -z $name ]] || journal "this turn's worker log lines" -t "sandbox/$CHANNEL" CONTAINER_NAME="$name"
  # The container name ends in the turn id's first 8 hex digits.
  [[ -z $name ]] || journal "the host's and the turn's broker's lines" -u sandbox-host -u 'sandbox-broker@*' --grep "turn=${name##*-}"
}

kind_sealed() {
  header "sealed turns: each in a brand-new container with its own broker; the channel's standby makes the next one warm"
  note "the demo model is a local scripted stand-in (test/e2e/fakemodel -demo), not a language model"
  if [[ -n ${DEMO_TEXT:-} ]]; then
    turn "$DEMO_TEXT"
  else
    turn "hello, sandbox"
    standby_ready
    turn "remember the meeting moved to Thursday 10:00"
    standby_ready
    turn "what do you remember?"
    grep -q "Thursday 10:00" "$E2E_WORK/reply" || fail "the recall did not return the stored note: $(cat "$E2E_WORK/reply")"
  fi
  echo
  sh_ /usr/bin/sandbox-host channel status "$CHANNEL"
  local joined
  joined=$(printf '%s, ' "${TURN_MS[@]}")
  ok "${#TURN_MS[@]} turns (${joined%, }); the recall read the note back from channel memory"
}

kind_rich() {
  header "rich channel: the turns of $RICH_CHANNEL run on one long-lived session (Anthropic Messages stream)"
  note "the upstream is the same stand-in speaking the Anthropic Messages stream (POST /v1/messages)"
  local since first second
  since=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
  sh_ /usr/bin/sandbox-host channel on "$RICH_CHANNEL" --rich --profile demo
  echo
  sh_ /usr/bin/sandbox-host turn "$RICH_CHANNEL" --speaker-id guest-1 --speaker-name "Demo Guest" --text "my name is Ada and I like tea" | tee "$E2E_WORK/rich1"
  first=$(X /usr/bin/sandbox-host --json channel status "$RICH_CHANNEL" | sed -n 's/.*"session": *"\([0-9a-f]*\)".*/\1/p' | head -1)
  echo
  sh_ /usr/bin/sandbox-host turn "$RICH_CHANNEL" --speaker-id guest-1 --speaker-name "Demo Guest" --text "what did I tell you before?" | tee "$E2E_WORK/rich2"
  echo
  sh_ /usr/bin/sandbox-host channel status "$RICH_CHANNEL" | tee "$E2E_WORK/rich-status"
  second=$(X /usr/bin/sandbox-host --json channel status "$RICH_CHANNEL" | sed -n 's/.*"session": *"\([0-9a-f]*\)".*/\1/p' | head -1)
  wait_journal '"turn finished"' -t "sandbox/$RICH_CHANNEL" --since "$since"
  journal "the session's worker lines" -t "sandbox/$RICH_CHANNEL" --since "$since"
  journal "the host's lines of the session" -u sandbox-host --since "$since" --grep "${first:-no session}"
  [[ -n $first ]] || fail "channel status showed no rich session after the first turn"
  [[ $first == "$second" ]] || fail "the second turn ran on another session ($first, then $second)"
  grep -q 'the first was: "my name is Ada and I like tea"' "$E2E_WORK/rich2" ||
    fail "the second turn's request did not carry the first turn (the session kept no history)"
  sh_ /usr/bin/sandbox-host channel off "$RICH_CHANNEL" >/dev/null
  ok "2 turns on session $first; the second answered from the history the session kept"
}

# toolbox: the small test toolbox in the installation's dockerd (imported
# with the package's own command), or a line saying why there is none.
TOOLBOX_WHY=""
toolbox() {
  local tar
  header "the toolbox image for the code-run kinds (runs.image)"
  if X docker image inspect roundtable-sandbox-toolbox:latest >/dev/null 2>&1; then
    note "the toolbox image roundtable-sandbox-toolbox:latest is there: used as it is"
    return 0
  fi
  if [[ $MODE == namespace ]]; then
    # Built (or found cached) before the namespace booted: see the set-up.
    tar=${TOOLBOX_TAR:-}
  else
    e2e_log "the small test toolbox's base (test/toolbox/build.sh: mmdebstrap once, about a minute; then cached)"
    tar=$(cd "$REPO_ROOT" && test/toolbox/build.sh 2>"$E2E_WORK/toolbox-build.log") || tar=""
  fi
  if [[ -z $tar ]]; then
    TOOLBOX_WHY="no toolbox: test/toolbox/build.sh could not build the small one: $(tail -1 "$E2E_WORK/toolbox-build.log")"
    return 1
  fi
  echo "\$ sandbox-host toolbox build --small --base-tar $tar"
  X /usr/bin/sandbox-host toolbox build --small --base-tar "$tar" >"$E2E_WORK/toolbox-import.log" 2>&1 || {
    tail -5 "$E2E_WORK/toolbox-import.log"
    TOOLBOX_WHY="no toolbox: sandbox-host toolbox build --small --base-tar failed (output above)"
    return 1
  }
  tail -2 "$E2E_WORK/toolbox-import.log"
}

kind_run() {
  header "code run: setup as root, then the command unprivileged, the project read-only at /workspace, an artifact out of /output"
  [[ -z $TOOLBOX_WHY ]] || skip "$TOOLBOX_WHY"
  local out=$E2E_WORK/artifacts id
  mkdir -p "$out"
  note "project demo is $PROJECT (runs.projects): $(X ls "$PROJECT" | tr '\n' ' ')"
  echo
  sh_ /usr/bin/sandbox-host run --project demo \
    --setup 'mkdir -p /opt/demo && echo "written by setup as $(id -un), uid $(id -u)" > /opt/demo/setup-note' \
    --artifact report.json --out "$out" -- python3 /workspace/summarize.py 2>&1 | tee "$E2E_WORK/run-out"
  echo
  sh_ cat "$out/report.json"
  echo
  grep -q '"total": 60' "$out/report.json" || fail "the artifact report.json does not hold the project's total"
  grep -q "setup left: written by setup as root" "$E2E_WORK/run-out" || fail "the command did not see what setup wrote"
  if grep -q "main command runs as uid 0" "$E2E_WORK/run-out"; then fail "the main command ran as root"; fi
  grep -q "the project is read-only" "$E2E_WORK/run-out" || fail "the command could write the project"
  id=$(X /usr/bin/sandbox-host --json run list | grep -o '"id": *"[0-9a-f]*"' | tail -1 | grep -o '[0-9a-f]\{32\}')
  wait_journal "wrote /output/report.json" -t "sandbox/run-$id"
  journal "the run's output" -t "sandbox/run-$id"
  journal "the host's lines of the run" -u sandbox-host --grep "$id"
  ok "run $id: setup as root, then the command as uid $(sed -n 's/.*main command runs as uid \([0-9]*\).*/\1/p' "$E2E_WORK/run-out"), the project read-only, artifact report.json $(cat "$out/report.json")"
}

# netrun ARGS...: starts `sandbox-host run --network --project demo --
# ARGS` in the background, as in a terminal of its own, and sets NETRUN_ID
# from its "awaits an admin's approval" line.
NETRUN_PID=""
NETRUN_OPTS=() # more run options (--credential NAME)
netrun() {
  local id="" deadline=$((SECONDS + 30))
  echo "\$ $(shq sandbox-host run --network --project demo "${NETRUN_OPTS[@]}" -- "$@") &"
  (
    trap - ERR # its exit status is the caller's to judge
    X /usr/bin/sandbox-host run --network --project demo "${NETRUN_OPTS[@]}" -- "$@"
  ) >"$E2E_WORK/netrun.out" 2>"$E2E_WORK/netrun.err" &
  NETRUN_PID=$!
  until [[ -n $id ]]; do
    id=$(grep -o 'run [0-9a-f]\{32\} awaits' "$E2E_WORK/netrun.err" 2>/dev/null | cut -d' ' -f2 || true)
    kill -0 "$NETRUN_PID" 2>/dev/null || break
    ((SECONDS < deadline)) || break
    sleep 0.1
  done
  [[ -n $id ]] || { cat "$E2E_WORK/netrun.err"; fail "sandbox-host run --network printed no run id"; }
  cat "$E2E_WORK/netrun.err"
  NETRUN_ID=$id
}

kind_network_run() {
  header "network run: no network without a human's approval of that one run; approved, only what egress.allow names"
  [[ -z $TOOLBOX_WHY ]] || skip "$TOOLBOX_WHY"
  local rc denied approved
  note "a run asking for network waits (no container exists yet) until an admin approves or denies it"
  netrun echo "this never runs"
  denied=$NETRUN_ID
  sh_ /usr/bin/sandbox-host run show "$denied" | tee "$E2E_WORK/netrun-show"
  grep -q awaiting_approval "$E2E_WORK/netrun-show" || fail "the network run is not awaiting approval"
  sh_ /usr/bin/sandbox-host run deny "$denied"
  rc=0
  wait "$NETRUN_PID" || rc=$?
  cat "$E2E_WORK/netrun.out"
  grep -v awaits "$E2E_WORK/netrun.err" || true
  note "(the first command exited $rc: 125 is a denied run)"
  ((rc == 125)) || fail "the denied run's command exited $rc, want 125"
  echo
  note "again, approved this time: the run's only way out is a broker of its own, through the proxy on 127.0.0.1:3128;"
  note "fetch.py (in the project) asks for each URL, the last one without the proxy; then curl calls the API stand-in"
  note "with the credential demo-api: the run holds only a placeholder in \$DEMO_API_TOKEN, its broker swaps in the token"
  NETRUN_OPTS=(--credential demo-api)
  netrun sh -c 'python3 /workspace/fetch.py "$@"; echo "DEMO_API_TOKEN in the run: $DEMO_API_TOKEN"
echo "api: $(/usr/bin/curl -sS --max-time 10 -H "Authorization: Bearer $DEMO_API_TOKEN" https://127.0.0.2:'"$API_PORT"'/v1/me)"' fetch \
    "allowed=http://127.0.0.1:$WEB_PORT/notes" \
    "metadata=http://169.254.169.254/latest/meta-data/" "other-port=http://127.0.0.1:$MCP_PORT/mcp" \
    "direct=http://127.0.0.1:$WEB_PORT/notes"
  NETRUN_OPTS=()
  approved=$NETRUN_ID
  sh_ /usr/bin/sandbox-host run show "$approved" | tee "$E2E_WORK/netrun-show2"
  grep -q "credentials=demo-api(DEMO_API_TOKEN)" "$E2E_WORK/netrun-show2" || fail "the run awaiting approval does not name its credential and variable"
  sh_ /usr/bin/sandbox-host run approve "$approved"
  rc=0
  wait "$NETRUN_PID" || rc=$?
  cat "$E2E_WORK/netrun.out"
  ((rc == 0)) || { cat "$E2E_WORK/netrun.err"; fail "the approved run exited $rc"; }
  grep -q "^allowed: Roundtable demo notes" "$E2E_WORK/netrun.out" || fail "the approved run did not reach the allowed page"
  grep -q "^metadata: refused, HTTP 403" "$E2E_WORK/netrun.out" || fail "the metadata address was not refused"
  grep -q "^other-port: refused, HTTP 403" "$E2E_WORK/netrun.out" || fail "a port egress.allow does not name was not refused"
  grep -q "^direct: no network" "$E2E_WORK/netrun.out" || fail "a direct connection found a network"
  grep -q "^DEMO_API_TOKEN in the run: rtsbx_ph_[0-9a-f]\{32\}$" "$E2E_WORK/netrun.out" || fail "the run's DEMO_API_TOKEN is not a placeholder"
  grep -q "^api: demo API: hello, the bearer token was accepted" "$E2E_WORK/netrun.out" || fail "curl with the placeholder did not reach the API"
  if X cat "$CREDS/demo-api" | tr -d '\n' | grep -qFf - "$E2E_WORK/netrun.out" "$E2E_WORK/netrun.err"; then fail "the token reached the run's output"; fi
  journal "the host's lines of both runs" -u sandbox-host --grep "$denied|$approved"
  journal "the approved run's broker" -u "sandbox-broker@$approved.service"
  journal "the web page and API stand-ins" -u roundtable-demo-mcp.service --grep "web page served|demo API request"
  ok "run $denied waited, then denied (exit 125); run $approved approved: reached the allowed page, refused the metadata address and another port, no direct network; called the API with a placeholder"
}

kind_precheck() {
  header "precheck: a schedule's script in a sealed container, with only the MCP tool granted to it, decides whether the turn wakes"
  cat >"$E2E_WORK/check.js" <<'JS'
export default async ({ mcp, today, timeZone, schedule }) => {
  const r = await mcp.call("tickets", "lookup", { q: "open tickets for the standup" });
  return { wake: true, context: `${r.content[0].text} (checked ${today} in ${timeZone}, schedule "${schedule}")` };
};
JS
  local since
  since=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
  sh_ cat "$E2E_WORK/check.js"
  sh_ /usr/bin/sandbox-host precheck --channel "$PRECHECK_CHANNEL" --script "$E2E_WORK/check.js" --grant tickets:lookup \
    --time-zone Europe/Berlin --schedule "weekdays 09:00" | tee "$E2E_WORK/precheck-out"
  [[ $(head -1 "$E2E_WORK/precheck-out") == wake ]] || fail "the precheck did not wake"
  grep -q "result for open tickets for the standup" "$E2E_WORK/precheck-out" || fail "the wake's context lacks the MCP tool's answer"
  wait_journal '"precheck done"' -t "sandbox/$PRECHECK_CHANNEL" --since "$since"
  journal "the precheck's worker lines" -t "sandbox/$PRECHECK_CHANNEL" --since "$since"
  journal "the MCP server stand-in (the broker inserted the credential)" -u roundtable-demo-mcp.service --since "$since" --grep "MCP server request"
  ok "woke with the MCP tool's answer: $(sed -n 2p "$E2E_WORK/precheck-out" | cut -c1-60)..."
}

kind_delegation() {
  header "delegation: a guest hands off a research task; a sealed research turn with only fetch reports back later"
  local id t0 since
  since=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
  t0=$(date +%s%N)
  sh_ /usr/bin/sandbox-host delegate "$CHANNEL" --title "Demo research" \
    --task "Read this page and report what it says: http://127.0.0.1:$WEB_PORT/notes" \
    --author-id guest-1 --author-name "Demo Guest" | tee "$E2E_WORK/job-id"
  id=$(tr -d '\n' <"$E2E_WORK/job-id")
  [[ $id =~ ^[0-9a-f]{32}$ ]] || fail "sandbox-host delegate printed no job id"
  note "the channel's turns go on meanwhile; the frontend collects the report:"
  sh_ /usr/bin/sandbox-host jobs follow "$CHANNEL" --count 1 | tee "$E2E_WORK/job-report"
  note "($((($(date +%s%N) - t0) / 1000000)) ms from delegate to the report)"
  grep -q "job $id done" "$E2E_WORK/job-report" || fail "jobs follow did not deliver job $id done"
  grep -q "the meeting moved to Thursday" "$E2E_WORK/job-report" || fail "the report does not carry the fetched page"
  wait_journal '"turn finished"' SANDBOX_TURN="$id"
  journal "the host's lines of the job" -u sandbox-host --grep "$id"
  journal "the research turn's worker lines" SANDBOX_TURN="$id"
  journal "the web page stand-in (fetched by the job's broker)" -u roundtable-demo-mcp.service --since "$since" --grep "web page served"
  ok "job $id done, its report on jobs follow quotes the fetched page"
}

kind_mcp() {
  header "MCP: an agent's MCP client calls sandbox_run through \`sandbox-host mcp\` (here the official TypeScript SDK)"
  [[ -z $TOOLBOX_WHY ]] || skip "$TOOLBOX_WHY"
  [[ -n ${E2E_PEERS:-} ]] || skip "test/peers/node_modules missing (npm ci --prefix test/peers; make demo's prerequisites step installs it)"
  command -v node >/dev/null || skip "node not found (packaging/prerequisites.txt lists nodejs)"
  local id
  note "an agent configures the stdio MCP server \`sandbox-host mcp --project demo\`; this client lists the tools and calls sandbox_run once"
  sh_ node "$E2E_PEERS/mcp-run-client.mjs" --progress \
    --call '{"command":"python3 -c \"print(sum(range(10)))\" | tee /output/answer.txt; wc -l /workspace/sales.csv","artifacts":["answer.txt"]}' \
    -- /usr/bin/sandbox-host mcp --project demo >"$E2E_WORK/mcp.json"
  node -e '
const d = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
console.log(`server ${d.server.name} ${d.server.version}, protocol ${d.protocolVersion}; tools: ${d.tools.map(t => t.name).join(", ")}`);
const r = d.result;
console.log(`sandbox_run -> isError ${!!r.isError}; ${d.progress.length} progress notification(s)`);
for (const c of r.content) {
  if (c.type === "text") console.log("  text: " + c.text.trim().replace(/\n/g, "\n        "));
  if (c.type === "resource") console.log(`  resource: ${c.resource.uri} (${c.resource.mimeType}): ${Buffer.from(c.resource.blob, "base64").toString().trim()}`);
}
console.log(`RUN-ID ${r.structuredContent && r.structuredContent.id}`);
' "$E2E_WORK/mcp.json" | tee "$E2E_WORK/mcp-out"
  id=$(sed -n 's/^RUN-ID \([0-9a-f]\{32\}\)$/\1/p' "$E2E_WORK/mcp-out")
  grep -q "isError false" "$E2E_WORK/mcp-out" || fail "sandbox_run answered a tool error"
  grep -q "resource: sandbox-output:///answer.txt (.*): 45" "$E2E_WORK/mcp-out" || fail "the artifact answer.txt did not come back as an embedded resource holding 45"
  [[ -n $id ]] || fail "the tool result carried no run id"
  wait_journal 45 -t "sandbox/run-$id"
  journal "the run's output" -t "sandbox/run-$id"
  ok "sandbox_run through @modelcontextprotocol/sdk: run $id, output and the artifact answer.txt as an embedded resource"
}

kind_session() {
  header "session: one toolbox container across execs; what an exec installs or leaves stays for the next"
  [[ -z $TOOLBOX_WHY ]] || skip "$TOOLBOX_WHY"
  local id wheel out=$E2E_WORK/session
  mkdir -p "$out"
  wheel=$("$E2E_WORK/bin/mkwheel" -out "$out" -marker "(installed in the session)")
  sh_ /usr/bin/sandbox-host session create | tee "$E2E_WORK/session-id"
  id=$(tr -d '\n' <"$E2E_WORK/session-id")
  [[ $id =~ ^[0-9a-f]{32}$ ]] || fail "sandbox-host session create printed no session id"
  echo
  note "install: a wheel copied in, then installed into /work/site (the small toolbox has no pip: a pure wheel is unpacked onto sys.path, as pip install --target does)"
  sh_ /usr/bin/sandbox-host session cp "$wheel" "$id:${wheel##*/}"
  sh_ /usr/bin/sandbox-host session exec "$id" -c "python3 -m zipfile -e ${wheel##*/} site && ls site"
  echo
  note "two execs: the first imports the package and leaves a note; the second reads the note and writes /output/greeting.txt"
  sh_ /usr/bin/sandbox-host session exec --cwd site "$id" -- python3 -c 'import greet; print(greet.hello("demo")); open("/work/note.txt", "w").write("left by exec 1\n")'
  sh_ /usr/bin/sandbox-host session exec "$id" -c 'cat note.txt; python3 -c "import sys; sys.path.insert(0, \"site\"); import greet; print(greet.hello(\"a file\"))" > /output/greeting.txt; echo wrote /output/greeting.txt' |
    tee "$E2E_WORK/session-out"
  grep -q "left by exec 1" "$E2E_WORK/session-out" || fail "the second exec did not see the first exec's note"
  echo
  sh_ /usr/bin/sandbox-host session cp "$id:/output/greeting.txt" "$out/greeting.txt"
  sh_ cat "$out/greeting.txt"
  grep -q "hello a file from greet (installed in the session)" "$out/greeting.txt" || fail "greeting.txt did not come out of the session"
  sh_ /usr/bin/sandbox-host session show "$id"
  sh_ /usr/bin/sandbox-host session close "$id" >/dev/null
  wait_journal "left by exec 1" -t "sandbox/session-$id"
  journal "the session's output" -t "sandbox/session-$id"
  journal "the host's lines of the session" -u sandbox-host --grep "$id"
  ok "session $id: a wheel installed, two execs sharing /work, greeting.txt out, closed"
}

# --- set up --------------------------------------------------------------

build_all demo
code_kinds() { [[ " ${KINDS[*]} " == *" run "* || " ${KINDS[*]} " == *" network-run "* || " ${KINDS[*]} " == *" mcp "* || " ${KINDS[*]} " == *" session "* ]]; }
if [[ $MODE == namespace ]]; then
  # The small toolbox's base is built (the first time on a box) or found
  # cached BEFORE ns_boot, as run.sh does: the cache it leaves in
  # /var/cache/roundtable-sandbox-test (README: kept) is then in the listing
  # the teardown's leftover check took before boot, which needs no allowance
  # by name and still reports any other new path.
  if code_kinds; then
    e2e_log "the small test toolbox's base (test/toolbox/build.sh: mmdebstrap once, about a minute; then cached)"
    toolbox_base
  fi
  e2e_log "no systemd as PID 1 here: booting the harness's namespaced systemd"
  t=$SECONDS
  e2e_lock
  (((SECONDS - t) < 2)) || LOCK_WAIT=$((SECONDS - t))
  ns_boot
  install_package
else
  e2e_log "installing $(basename "$DEB") on this machine"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$DEB" >"$E2E_WORK/install.log" 2>&1 ||
    { tail -30 "$E2E_WORK/install.log"; e2e_die "install failed"; }
fi
peers_path >/dev/null 2>&1 || true
mkdir -p "$RESULTS"

# The stand-ins: transient units, so they run under the same systemd.
# (DynamicUser= implies a private /var/tmp, so the binaries go to /run.)
X install -D -m 0755 "$E2E_WORK/bin/fakemodel" /run/roundtable-demo/fakemodel
X install -D -m 0755 "$E2E_WORK/bin/fakemcp" /run/roundtable-demo/fakemcp
X systemd-run --unit=roundtable-demo-model --quiet --property=DynamicUser=yes \
  --property=RuntimeDirectory=roundtable-demo-model --property=RuntimeDirectoryMode=0755 \
  /run/roundtable-demo/fakemodel -demo -listen 127.0.0.1:0 -port-file /run/roundtable-demo-model/port
X systemd-run --unit=roundtable-demo-mcp --quiet --property=DynamicUser=yes \
  --property=RuntimeDirectory=roundtable-demo-mcp --property=RuntimeDirectoryMode=0755 \
  /run/roundtable-demo/fakemcp -listen 127.0.0.1:0 -port-file /run/roundtable-demo-mcp/port \
  -web-listen 127.0.0.1:0 -web-port-file /run/roundtable-demo-mcp/web-port \
  -api-listen 127.0.0.2:0 -api-port-file /run/roundtable-demo-mcp/api-port \
  -api-cert-file /run/roundtable-demo-mcp/api-ca.pem -api-token-file /run/roundtable-demo-mcp/api-token
port_of() {
  local p="" i
  for i in $(seq 1 100); do
    p=$(X cat "$1" 2>/dev/null || true)
    [[ -n $p ]] && break
    sleep 0.05
  done
  [[ -n $p ]] || e2e_die "$2 did not start"
  echo "$p"
}
MODEL_PORT=$(port_of /run/roundtable-demo-model/port "the demo model")
MCP_PORT=$(port_of /run/roundtable-demo-mcp/port "the MCP server stand-in")
WEB_PORT=$(port_of /run/roundtable-demo-mcp/web-port "the web page stand-in")
API_PORT=$(port_of /run/roundtable-demo-mcp/api-port "the demo API stand-in")

# The project runs mount read-only. In the namespace /srv is a tmpfs of its
# own, so nothing is written to the machine's /srv.
[[ $MODE == namespace ]] && X mount -t tmpfs -o mode=0755,size=16m tmpfs /srv
X mkdir -p "$PROJECT"
X sh -c "cat > $PROJECT/sales.csv" <<'CSV'
region,amount
north,10
south,20
west,30
CSV
X sh -c "cat > $PROJECT/summarize.py" <<'PY'
import csv, json, os
rows = list(csv.DictReader(open("/workspace/sales.csv")))
total = sum(int(r["amount"]) for r in rows)
print(f"main command runs as uid {os.getuid()}; {len(rows)} rows in the project, total {total}")
print("setup left:", open("/opt/demo/setup-note").read().strip())
try:
    open("/workspace/new-file", "w")
    print("the project is writable")
except OSError as e:
    print("the project is read-only:", e.strerror)
json.dump({"rows": len(rows), "total": total}, open("/output/report.json", "w"))
print("wrote /output/report.json")
PY
X sh -c "cat > $PROJECT/fetch.py" <<'PY'
# fetch.py LABEL=URL...: GET each URL through the run's proxy (HTTP_PROXY),
# or straight, without it, for a label starting with "direct".
import re, sys, urllib.error, urllib.request
for arg in sys.argv[1:]:
    label, url = arg.split("=", 1)
    opener = urllib.request.build_opener(*([urllib.request.ProxyHandler({})] if label.startswith("direct") else []))
    try:
        body = opener.open(url, timeout=10).read().decode()
        print(f"{label}: {re.search('<title>(.*)</title>', body).group(1)}  ({url})")
    except urllib.error.HTTPError as e:
        print(f"{label}: refused, HTTP {e.code}  ({url})")
    except Exception as e:
        print(f"{label}: no network, {type(e).__name__}  ({url})")
PY
X chmod -R a+rX "$PROJECT"

[[ $MODE == real && -f $CONF ]] && cp -a "$CONF" "$CONF.pre-demo"
[[ $MODE == real && -f $CRED ]] && cp -a "$CRED" "$CRED.pre-demo"
[[ $MODE == real && ! -e $CREDS/mcp-demo ]] && touch "$CREDS/.mcp-demo-new"
[[ $MODE == real && ! -e $CREDS/demo-api ]] && touch "$CREDS/.demo-api-new"
# The demo API's token (made by the stand-in) is the credential demo-api; its
# certificate is the test root CA the run brokers trust for loopback literals.
# It listens on 127.0.0.2: a run granted a credential for a host:port is
# refused every other port of that host (docs/credentialed-egress.md), and
# the web page stand-in is on 127.0.0.1.
X sh -c "umask 077; cat /run/roundtable-demo-mcp/api-token > $CREDS/demo-api && install -m 0644 /run/roundtable-demo-mcp/api-ca.pem ${CONF%/*}/demo-api-ca.pem"
X sh -c "umask 077; mkdir -p $CREDS && echo demo-key-\$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n') > $CRED && echo mcp-demo-\$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n') > $CREDS/mcp-demo"
# The copier of a turn's credentials reads them through its group
# (docs/operating.md, "Credentials").
X sh -c "chgrp _sandbox-credset $CREDS/demo-api $CRED $CREDS/mcp-demo && chmod 0640 $CREDS/demo-api $CRED $CREDS/mcp-demo"
X sh -c "cat > $CONF.demo-tmp" <<YAML
# roundtable-sandbox demo configuration (written by make demo)
model:
  url: http://127.0.0.1:$MODEL_PORT/v1/chat/completions
  name: offline-demo-model
  allowInsecureLoopbackHTTP: true   # demo/test only: plain HTTP on loopback
credentials:
  default: model
api:
  clients:
    uids: [0]
    groups: [sandbox-clients]
turnDeadlineSeconds: 60
tools:
  - name: fetch
    description: Fetch a web page as text
    parameters: '{"type":"object","properties":{"url":{"type":"string"}},"required":["url"],"additionalProperties":false}'
    kind: fetch
    timeoutSeconds: 10
  - name: clock
    description: Read the current UTC time
    parameters: '{"type":"object","properties":{},"additionalProperties":false}'
    kind: builtin
    builtin: clock
egress:
  allow: ["127.0.0.1:$WEB_PORT", "127.0.0.2:$API_PORT"]   # the web page and API stand-ins, nothing else private
  testRootCAFile: ${CONF%/*}/demo-api-ca.pem   # demo/test only: the API stand-in's certificate, loopback literals only
  credentials:
    - {name: demo-api, host: 127.0.0.2, port: $API_PORT, credential: demo-api, header: Authorization, format: "Bearer {}", env: DEMO_API_TOKEN, projects: [demo]}
mcp:
  - name: tickets
    url: http://127.0.0.1:$MCP_PORT/mcp
    credential: mcp-demo
    session: stateless
    allowInsecureLoopbackHTTP: true
    tools:
      - name: lookup
        description: Look up a term
        parameters: '{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}'
prechecks:
  enabled: true
  grants:
    - channel: $PRECHECK_CHANNEL
      server: tickets
      tools: [lookup]
delegation:
  enabled: true
  fetchTool: fetch
runs:
  projects:
    - name: demo
      path: $PROJECT
rich:
  enabled: true
  anthropicUrl: http://127.0.0.1:$MODEL_PORT
  allowInsecureLoopbackHTTP: true
profiles:
  - name: demo
    model: offline-demo-claude
    maxOutputTokens: 4096
    thinking: low
    tools: [clock]
YAML
X sh -c "chown root:_sandbox $CONF.demo-tmp && chmod 0640 $CONF.demo-tmp && mv -f $CONF.demo-tmp $CONF"
X systemctl restart sandbox-host.service
header "the demo's configuration ($CONF)"
X cat "$CONF"
echo
sh_ /usr/bin/sandbox-host channel on "$CHANNEL"
e2e_log "installed and configured ($MODE systemd, $((SECONDS - STARTED)) s${LOCK_WAIT:+, $LOCK_WAIT s of it waiting for the lock}): the demo model on 127.0.0.1:$MODEL_PORT, the MCP server stand-in on :$MCP_PORT, the web page stand-in on :$WEB_PORT"

if code_kinds; then
  toolbox || true
fi
for k in "${KINDS[@]}"; do run_kind "$k"; done
echo
e2e_log "demo done ($MODE systemd, $((SECONDS - STARTED)) s before teardown)"
