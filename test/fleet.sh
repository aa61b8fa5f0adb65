#!/usr/bin/env bash
# make fleet-test: the fleet on one machine (test/fleet): three boxes as
# network namespaces, each with its own nats-server and box process, a few
# hundred stub turns through one fault of each kind (kill -9 of a box and
# of a nats-server, a cut link, a paused owner, a full disk, a partial cut;
# FLEET_FAULTS='partial cut' runs chosen kinds only), asserting
# nothing lost, duplicated or reordered, one reply per turn id and every
# channel answered again after each fault (timings are reported, never
# asserted). Skips (exit 0, saying why) when not root or without network
# namespaces.
set -euo pipefail
cd "$(dirname "$0")/.."
skip() {
	echo "fleet tests skipped: $*"
	if [[ -n ${TEST_SUMMARY_FILE:-} ]]; then echo "fleet-test: skipped: $*" >>"$TEST_SUMMARY_FILE"; fi
	exit 0
}
[[ "$(id -u)" == 0 ]] || skip "not running as root (network namespaces need root)"
command -v ip >/dev/null || skip "ip not found (apt-get install -y iproute2)"
probe="sbxfprobe$$"
ip netns add "$probe" 2>/dev/null || skip "cannot make a network namespace (ip netns add)"
ip netns del "$probe"
SANDBOX_IT_FLEET=1 test/gotest.sh fleet-test -count=1 -timeout 10m -run TestFleet ./test/fleet/...
