#!/usr/bin/env bash
# make clients: build the TypeScript client and the Pi extension (clients/;
# pinned dev dependencies by npm ci), check the generated types against
# pkg/api/openapi.json, and run their unit tests against fake hosts under
# Node, then the client's under Bun (pinned in test/peers). The e2e stage
# after it runs both against the installed host (TestTypeScriptClientOnTheHost,
# TestRunFromPi); a stage that skips here makes those skip and say so.
# About 25 s here, most of it npm ci.
set -euo pipefail
cd "$(dirname "$0")/.."

skip() {
	echo "clients skipped: $*"
	if [[ -n ${TEST_SUMMARY_FILE:-} ]]; then echo "clients: skipped: $*" >>"$TEST_SUMMARY_FILE"; fi
	exit 0
}
command -v node >/dev/null || skip "node not found (Node 18+; README Quick start)"
command -v npm >/dev/null || skip "npm not found (it comes with NodeSource's nodejs)"

pass=0 total=0
count() { # count the tests a node --test or bun test run reported passing
	local out=$1 p t
	p=$(awk '/^# pass [0-9]+/ {s+=$3} END {print s+0}' "$out")
	t=$(awk '/^# tests [0-9]+/ {s+=$3} END {print s+0}' "$out")
	if ((t == 0)); then # bun test's summary
		p=$(awk '/^ *[0-9]+ pass$/ {s+=$1} END {print s+0}' "$out")
		t=$((p + $(awk '/^ *[0-9]+ fail$/ {s+=$1} END {print s+0}' "$out")))
	fi
	pass=$((pass + p)) total=$((total + t))
}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for pkg in typescript pi-extension; do
	echo "== clients/$pkg: npm ci && npm test (node)"
	(cd "clients/$pkg" && npm ci --no-audit --no-fund --loglevel=error && npm test) 2>&1 | tee "$log"
	count "$log"
done
bun=test/peers/node_modules/@oven/bun-linux-x64-baseline/bin/bun
if [[ -x $bun ]]; then
	echo "== clients/typescript: bun test (Bun $($bun --version))"
	"$bun" test clients/typescript/dist/test/client.test.js 2>&1 | tee "$log"
	count "$log"
else
	echo "Bun is not installed in test/peers (npm ci --prefix test/peers): the Bun pass is skipped"
fi
failed=$((total - pass))
echo "clients: $total tests, $pass passed, $failed failed"
if [[ -n ${TEST_SUMMARY_FILE:-} ]]; then echo "clients: $total tests, $pass passed, $failed failed" >>"$TEST_SUMMARY_FILE"; fi
((failed == 0))
