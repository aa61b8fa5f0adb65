#!/usr/bin/env bash
# make demo: build and install the package, then run one real sealed turn
# against the bundled offline demo model and print the reply and that turn's
# journal lines.
#
# The demo model is test/e2e/fakemodel in -demo mode: a local scripted
# stand-in on 127.0.0.1, NOT a language model. It echoes the message, stores
# "remember X" in channel memory with memory_set and answers "what do you
# remember" with memory_get, so the whole path (API, queue, container,
# broker credential swap, memory, journald) runs for real without a network.
#
# With systemd as PID 1 (/run/systemd/system exists and PID 1 is systemd) the
# package is installed on this machine and stays installed; the demo config
# replaces /etc/roundtable-sandbox/sandbox.yaml only for the demo and the
# previous file is put back afterwards. Otherwise the demo boots the e2e
# harness's namespaced systemd, runs there and tears it down.
#   DEMO_TEXT="..."  the guest message (default: a "remember" then a recall)
set -euo pipefail
source "$(dirname "$0")/lib/ns.sh"
source "$(dirname "$0")/lib/install.sh"

CHANNEL=demo
SPEAKER='{"id":"guest-1","name":"Demo Guest","principalId":"demo:1"}'

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
if real_systemd; then
  MODE=real
  X() { env -u DOCKER_HOST "$@"; }
else
  MODE=namespace
  X() { ns_exec "$@"; }
fi

CONF=/etc/roundtable-sandbox/sandbox.yaml
CRED=/etc/roundtable-sandbox/credentials/model
cleanup() {
  local rc=$?
  if [[ $MODE == real ]]; then
    systemctl stop roundtable-demo-model.service 2>/dev/null || true
    rm -rf /run/roundtable-demo
    if [[ -f $CONF.pre-demo ]]; then
      mv -f "$CONF.pre-demo" "$CONF"
      [[ -f $CRED.pre-demo ]] && mv -f "$CRED.pre-demo" "$CRED"
      systemctl try-restart sandbox-host.service || true
      e2e_log "previous configuration restored"
    fi
    rm -rf "$E2E_WORK"
  else
    ns_teardown || rc=1
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

build_all
if [[ $MODE == namespace ]]; then
  e2e_log "no systemd as PID 1 here: booting the harness's namespaced systemd"
  ns_boot
  install_package
else
  e2e_log "installing $(basename "$DEB") on this machine"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$DEB" >"$E2E_WORK/install.log" 2>&1 ||
    { tail -30 "$E2E_WORK/install.log"; e2e_die "install failed"; }
fi

# The demo model: a transient unit, so it runs under the same systemd.
# (DynamicUser= implies a private /var/tmp, so the binary goes to /run.)
X install -D -m 0755 "$E2E_WORK/bin/fakemodel" /run/roundtable-demo/fakemodel
X systemd-run --unit=roundtable-demo-model --quiet --property=DynamicUser=yes \
  --property=RuntimeDirectory=roundtable-demo-model --property=RuntimeDirectoryMode=0755 \
  /run/roundtable-demo/fakemodel -demo -listen 127.0.0.1:0 -port-file /run/roundtable-demo-model/port
port=""
for _ in $(seq 1 100); do
  port=$(X cat /run/roundtable-demo-model/port 2>/dev/null || true)
  [[ -n $port ]] && break
  sleep 0.05
done
[[ -n $port ]] || e2e_die "the demo model did not start"

[[ $MODE == real && -f $CONF ]] && cp -a "$CONF" "$CONF.pre-demo"
[[ $MODE == real && -f $CRED ]] && cp -a "$CRED" "$CRED.pre-demo"
X sh -c "umask 077; mkdir -p /etc/roundtable-sandbox/credentials && echo demo-key-\$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n') > $CRED"
X sh -c "cat > $CONF.demo-tmp" <<YAML
# roundtable-sandbox demo configuration (written by make demo)
model:
  url: http://127.0.0.1:$port/v1/chat/completions
  name: offline-demo-model
  allowInsecureLoopbackHTTP: true   # demo/test only: plain HTTP on loopback
credentials:
  default: model
api:
  clients:
    uids: [0]
    groups: [sandbox-clients]
turnDeadlineSeconds: 60
YAML
X sh -c "chown root:_sandbox $CONF.demo-tmp && chmod 0640 $CONF.demo-tmp && mv -f $CONF.demo-tmp $CONF"
X systemctl restart sandbox-host.service
X /usr/bin/sandbox-host channel on "$CHANNEL" >/dev/null

# Each turn's worker lines are found by its container's name (the host
# forwards the worker's stderr to journald with CONTAINER_NAME, and names a
# turn's container roundtable-sandbox-<channel hash>-<turn>): the journal
# cursor taken before the turn only finds that name. (journalctl 252 with
# --after-cursor plus a match such as -t skips the first matching entry when
# the cursor's own entry does not match: that lost a line of every turn.)
# The lines reach the journal asynchronously, so the demo waits for the
# worker's closing "turn finished" line, with a deadline.
CONTAINER_PREFIX=roundtable-sandbox-$(printf %s "$CHANNEL" | sha256sum | cut -c1-16)-
turn() {
  local text=$1 cursor name="" deadline
  cursor=$(X journalctl -n 0 --show-cursor --no-pager 2>/dev/null | sed -n 's/^-- cursor: //p')
  [[ -n $cursor ]] || e2e_die "journalctl printed no cursor"
  echo
  echo "guest> $text"
  local t0 t1
  t0=$(date +%s%N)
  if ! X /usr/bin/sandbox-host turn "$CHANNEL" --speaker-id guest-1 --speaker-name "Demo Guest" --text "$text" >"$E2E_WORK/reply" 2>&1; then
    cat "$E2E_WORK/reply"
    e2e_die "the turn failed; journal: journalctl -u sandbox-host -u 'sandbox-broker@*'"
  fi
  t1=$(date +%s%N)
  echo "sandbox> $(cat "$E2E_WORK/reply")"
  echo "         ($(((t1 - t0) / 1000000)) ms, one fresh container)"
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
      e2e_log "WARNING: this turn's worker lines did not all reach the journal within 10 s${name:+ (container $name)}"
      break
    fi
    sleep 0.2
  done
  echo "--- journalctl -t sandbox/$CHANNEL CONTAINER_NAME=${name:-?} (this turn's worker log lines) ---"
  [[ -z $name ]] || X journalctl --utc --no-pager -t "sandbox/$CHANNEL" CONTAINER_NAME="$name" -o short-iso || true
}

if [[ -n ${DEMO_TEXT:-} ]]; then
  turn "$DEMO_TEXT"
else
  turn "hello, sandbox"
  turn "remember the meeting moved to Thursday 10:00"
  turn "what do you remember?"
fi
echo
e2e_log "demo done ($MODE systemd)"
