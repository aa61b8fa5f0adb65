#!/usr/bin/env bash
# make demo: build and install the package, then show each kind working
# against local stand-ins, each step's command, its output and its journal
# lines, and one summary line per kind at the end:
#   sealed      three sealed turns (an echo, "remember ...", a recall), the
#               later ones on the channel's standby
#   rich        a rich channel's two turns on one session, the second
#               answered from the history the session kept
# A kind that cannot run here says why in one line and the others go on;
# the exit status is 1 when a kind failed.
#
# The stand-in, local and NOT a language model: test/e2e/fakemodel -demo
# (Chat Completions for sealed turns: echo, memory_set/memory_get; the
# Anthropic Messages stream for rich channels).
#
# With systemd as PID 1 (/run/systemd/system exists and PID 1 is systemd) the
# package is installed on this machine and stays installed; the demo config
# replaces /etc/roundtable-sandbox/sandbox.yaml only for the demo and the
# previous file is put back afterwards. Otherwise the demo boots the e2e
# harness's namespaced systemd, runs there and tears it down.
#   DEMO_KINDS="sealed rich ..."  run only these kinds (default: all)
#   DEMO_TEXT="..."               one sealed turn with this message instead
set -euo pipefail
source "$(dirname "$0")/lib/ns.sh"
source "$(dirname "$0")/lib/install.sh"

ALL_KINDS=(sealed rich)
read -r -a KINDS <<<"${DEMO_KINDS:-${ALL_KINDS[*]}}"
for k in "${KINDS[@]}"; do
  [[ " ${ALL_KINDS[*]} " == *" $k "* ]] || { echo "DEMO_KINDS: unknown kind $k (kinds: ${ALL_KINDS[*]})" >&2; exit 2; }
done

CHANNEL=demo
RICH_CHANNEL=demo-rich
STARTED=$SECONDS

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
    systemctl stop roundtable-demo-model.service 2>/dev/null || true
    rm -rf /run/roundtable-demo
    if [[ -f $CONF.pre-demo ]]; then
      mv -f "$CONF.pre-demo" "$CONF"
      [[ -f $CRED.pre-demo ]] && mv -f "$CRED.pre-demo" "$CRED"
      systemctl try-restart sandbox-host.service || true
      e2e_log "previous configuration restored"
    fi
  else
    ns_teardown || rc=1
  fi
  [[ $MODE == real ]] && rm -rf "$E2E_WORK"
  if [[ -n $sum ]]; then
    echo
    echo "=== demo summary ($MODE systemd; $((SECONDS - STARTED)) s from the build to the end of the teardown) ==="
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
  local text=$1 cursor name="" deadline t0 t1 how="cold: a fresh container created for it"
  cursor=$(X journalctl -n 0 --show-cursor --no-pager 2>/dev/null | sed -n 's/^-- cursor: //p')
  [[ -n $cursor ]] || fail "journalctl printed no cursor"
  echo
  t0=$(date +%s%N)
  sh_ /usr/bin/sandbox-host turn "$CHANNEL" --speaker-id guest-1 --speaker-name "Demo Guest" --text "$text" >"$E2E_WORK/reply" 2>&1 ||
    { cat "$E2E_WORK/reply"; fail "the turn failed; journal: journalctl -u sandbox-host -u 'sandbox-broker@*'"; }
  t1=$(date +%s%N)
  [[ -z $WARM ]] || how="on the standby"
  WARM=""
  TURN_MS+=("$(((t1 - t0) / 1000000)) ms ${how%%:*}")
  echo "$(cat "$E2E_WORK/reply")"
  note "($(((t1 - t0) / 1000000)) ms, $how)"
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

# --- set up --------------------------------------------------------------

build_all demo
if [[ $MODE == namespace ]]; then
  e2e_log "no systemd as PID 1 here: booting the harness's namespaced systemd"
  ns_boot
  install_package
else
  e2e_log "installing $(basename "$DEB") on this machine"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$DEB" >"$E2E_WORK/install.log" 2>&1 ||
    { tail -30 "$E2E_WORK/install.log"; e2e_die "install failed"; }
fi
mkdir -p "$RESULTS"

# The stand-ins: transient units, so they run under the same systemd.
# (DynamicUser= implies a private /var/tmp, so the binaries go to /run.)
X install -D -m 0755 "$E2E_WORK/bin/fakemodel" /run/roundtable-demo/fakemodel
X systemd-run --unit=roundtable-demo-model --quiet --property=DynamicUser=yes \
  --property=RuntimeDirectory=roundtable-demo-model --property=RuntimeDirectoryMode=0755 \
  /run/roundtable-demo/fakemodel -demo -listen 127.0.0.1:0 -port-file /run/roundtable-demo-model/port
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

[[ $MODE == real && -f $CONF ]] && cp -a "$CONF" "$CONF.pre-demo"
[[ $MODE == real && -f $CRED ]] && cp -a "$CRED" "$CRED.pre-demo"
X sh -c "umask 077; mkdir -p $CREDS && echo demo-key-\$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n') > $CRED"
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
  - name: clock
    description: Read the current UTC time
    parameters: '{"type":"object","properties":{},"additionalProperties":false}'
    kind: builtin
    builtin: clock
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
e2e_log "installed and configured ($MODE systemd, $((SECONDS - STARTED)) s): the demo model on 127.0.0.1:$MODEL_PORT"

for k in "${KINDS[@]}"; do run_kind "$k"; done
echo
e2e_log "demo done ($MODE systemd, $((SECONDS - STARTED)) s before teardown)"
