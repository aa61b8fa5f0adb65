#!/usr/bin/env bash
# gotest.sh STAGE [go test arguments]: go test -json through test/testsummary,
# which prints one line per package that ran tests, the output of every
# failed test, and the stage's counts (ran, passed, failed, skipped, with the
# skip reasons). Fails when go test or any test failed. With TEST_SUMMARY_FILE
# set, the stage's one-line summary is appended to it (make test); with
# TEST_JSON_FILE set, the raw go test -json stream is kept there (make stress).
set -euo pipefail
cd "$(dirname "$0")/.."
stage=${1:?usage: test/gotest.sh STAGE [go test arguments]}
shift
GO=${GO:-go}
# Under -race a test binary's clean exit first sleeps atexit_sleep_ms (1 s
# by default) for goroutines that might still race: a second per package
# and per race-built child a test runs with this environment, about 50 s
# of make unit on two cores. A race is still reported when it happens and
# fails its test; only leftover goroutines' grace second is gone. A GORACE
# of the caller's comes after it and wins.
export GORACE="atexit_sleep_ms=0${GORACE:+ $GORACE}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$GO" build -o "$tmp/testsummary" ./test/testsummary
set +e
"$GO" test -json "$@" 2>&1 | tee "${TEST_JSON_FILE:-/dev/null}" | "$tmp/testsummary" -stage "$stage" ${TEST_SUMMARY_FILE:+-line "$TEST_SUMMARY_FILE"}
rc=("${PIPESTATUS[0]}" "${PIPESTATUS[2]}")
set -e
if ((rc[0] != 0 || rc[1] != 0)); then
  ((rc[1] != 0)) || echo "$stage: go test exited with status ${rc[0]}"
  exit 1
fi
