#!/usr/bin/env bash
# make e2e: the installed .deb under a real systemd 252 and dockerd booted in
# a private PID+mount namespace, driven through the real API socket and CLI.
#
# Skips (exit 0, "e2e skipped: <reason>") when the machine cannot do this:
# not root, no unshare/systemd/dockerd/polkitd. Always tears the namespace
# down and leaves the machine as it was. Environment:
#   E2E_RUN=<regexp>   run only the matching scenarios (go test -run)
#   E2E_DEB=<path>     use this prebuilt .deb instead of running make deb
#   E2E_RUNSC_ROUNDS=<n> with E2E_RUN=RunscLatency: time runsc beside runc (n rounds)
#   E2E_KEEP=1         on failure, keep the namespace running for inspection
#                      (prints how to enter it and how to stop it)
set -euo pipefail
source "$(dirname "$0")/lib/ns.sh"
source "$(dirname "$0")/lib/install.sh"

reason=$(e2e_skip_reason)
if [[ -n $reason ]]; then
  echo "e2e skipped: $reason"
  if [[ -n ${TEST_SUMMARY_FILE:-} ]]; then echo "e2e: skipped: $reason" >>"$TEST_SUMMARY_FILE"; fi
  exit 0
fi

started=$(date +%s)
E2E_WORK=$(mktemp -d /var/tmp/roundtable-e2e.XXXXXX)
export E2E_WORK
status=1
finish() {
  local rc=$?
  if [[ ${E2E_KEEP:-0} == 1 && $status != 0 && -n ${NS_PID:-} ]]; then
    e2e_log "E2E_KEEP=1: namespace kept. Enter: nsenter -t $NS_PID -m -p -u -i bash; stop: source test/e2e/lib/ns.sh; E2E_WORK=$E2E_WORK ns_teardown"
    exit 1
  fi
  ns_teardown || { e2e_log "teardown failed"; rc=1; status=1; }
  e2e_log "whole run took $(($(date +%s) - started)) s"
  if [[ $status == 0 && $rc == 0 ]]; then echo "e2e passed"; else echo "e2e FAILED"; exit 1; fi
}
trap finish EXIT
trap 'exit 130' INT TERM

build_all
toolbox_base
peers_path
clients_path
ns_boot
install_images
install_package
install_toolbox

e2e_log "running the scenarios"
# -test.v=test2json frames the output so go tool test2json can attribute
# every line; test/testsummary prints it as it comes and counts at the end.
args=(-test.v=test2json -test.timeout 20m -test.count 1)
[[ -n ${E2E_RUN:-} ]] && args+=(-test.run "$E2E_RUN")
set +e
ns_exec env SANDBOX_E2E=1 E2E_WORK="$E2E_WORK" E2E_BIN="$E2E_WORK/bin" E2E_PEERS="${E2E_PEERS:-}" E2E_CLIENTS="${E2E_CLIENTS:-}" E2E_RUNSC_ROUNDS="${E2E_RUNSC_ROUNDS:-0}" \
  "$E2E_WORK/bin/e2e.test" "${args[@]}" 2>&1 | tee "$E2E_WORK/scenarios.log" |
  go tool test2json -t -p e2e | "$E2E_WORK/bin/testsummary" -v -stage e2e ${TEST_SUMMARY_FILE:+-line "$TEST_SUMMARY_FILE"}
rcs=("${PIPESTATUS[@]}")
set -e
status=0
for rc in "${rcs[@]}"; do ((rc == 0)) || status=1; done
# Each scenario's result and time again (test2json framing bytes removed).
tr -d '\026' <"$E2E_WORK/scenarios.log" | grep -aE '^(--- |ok|FAIL|PASS)' >&2 || true
