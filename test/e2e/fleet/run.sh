#!/usr/bin/env bash
# make e2e-fleet: the fleet's end-to-end scenario (fleet_test.go) on two
# namespaced systemd 252 boxes (test/e2e/lib/fleet.sh), each with its own
# dpkg install of the same .deb, its own dockerd and sandbox-nats, joined by
# a bridge in a namespace of its own (10.252.0.0/24, inside the namespaces
# only). The scenario itself runs on the machine side and acts on each box
# through nsenter: the real CLI, systemctl and journalctl of that box.
#
# Skips (exit 0, "e2e-fleet skipped: <reason>") where the one-box e2e skips,
# or without network namespaces, ip or the hybrid cgroup layout. Always tears
# the boxes down and runs the leftover checks. Environment:
#   E2E_DEB=<path>  use this prebuilt .deb instead of running make deb
#   E2E_KEEP=1      on failure, keep the boxes running for inspection
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../lib/ns.sh"
source "$here/../lib/install.sh"
source "$here/../lib/fleet.sh"

say_skip() {
  echo "e2e-fleet skipped: $1"
  if [[ -n ${TEST_SUMMARY_FILE:-} ]]; then echo "e2e-fleet: skipped: $1" >>"$TEST_SUMMARY_FILE"; fi
  exit 0
}
reason=$(e2e_skip_reason)
[[ -z $reason ]] || say_skip "$reason"
reason=$(fleet_skip_reason)
[[ -z $reason ]] || say_skip "$reason"

started=$(date +%s)
FLEET_TOP=$(mktemp -d /var/tmp/roundtable-e2e-fleet.XXXXXX)
chmod 0755 "$FLEET_TOP"
export FLEET_TOP
status=1
finish() {
  local rc=$?
  if [[ ${E2E_KEEP:-0} == 1 && $status != 0 && ${#FLEET_BOX_PIDS[@]} -gt 0 ]]; then
    e2e_log "E2E_KEEP=1: boxes kept. Enter box N: nsenter -t <pid> -m -p -u -i -n bash (pids: ${FLEET_BOX_PIDS[*]}); stop: source test/e2e/lib/ns.sh test/e2e/lib/install.sh test/e2e/lib/fleet.sh; FLEET_TOP=$FLEET_TOP fleet_teardown"
    exit 1
  fi
  fleet_teardown || { e2e_log "teardown failed"; rc=1; status=1; }
  e2e_log "whole fleet run took $(($(date +%s) - started)) s"
  if [[ $status == 0 && $rc == 0 ]]; then echo "e2e-fleet passed"; else echo "e2e-fleet FAILED"; exit 1; fi
}
trap finish EXIT
trap 'exit 130' INT TERM

# The package and the fake model (install.sh), the scenario binary.
E2E_WORK=$FLEET_TOP
build_all demo
(cd "$REPO_ROOT" && go test -c -o "$FLEET_TOP/bin/fleet-e2e.test" ./test/e2e/fleet &&
  go build -o "$FLEET_TOP/bin/testsummary" ./test/testsummary) >"$FLEET_TOP/build-fleet.log" 2>&1 || {
  tail -40 "$FLEET_TOP/build-fleet.log" >&2
  e2e_die "building the fleet scenario failed"
}

e2e_lock
fleet_snapshot
fleet_switch_up
boot0=$(date +%s)
for n in 1 2; do
  fleet_boot "$n"
  install_package
done
e2e_log "two boxes booted and installed in $(($(date +%s) - boot0)) s"

e2e_log "running the fleet scenario"
args=(-test.v=test2json -test.timeout 15m -test.count 1)
[[ -n ${E2E_RUN:-} ]] && args+=(-test.run "$E2E_RUN")
set +e
env SANDBOX_E2E_FLEET=1 FLEET_TOP="$FLEET_TOP" FLEET_SUBNET="$FLEET_SUBNET" FLEET_BOX_PIDS="${FLEET_BOX_PIDS[*]}" \
  "$FLEET_TOP/bin/fleet-e2e.test" "${args[@]}" 2>&1 | tee "$FLEET_TOP/scenario.log" |
  go tool test2json -t -p e2e-fleet | "$FLEET_TOP/bin/testsummary" -v -stage e2e-fleet ${TEST_SUMMARY_FILE:+-line "$TEST_SUMMARY_FILE"}
rcs=("${PIPESTATUS[@]}")
set -e
status=0
for rc in "${rcs[@]}"; do ((rc == 0)) || status=1; done
tr -d '\026' <"$FLEET_TOP/scenario.log" | grep -aE '^(--- |ok|FAIL|PASS)' >&2 || true
