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
