#!/usr/bin/env bash
# make test: the four stages in order (unit, integration, packaging-check,
# e2e), stopping at the first that fails, then each stage's one-line
# summary again: how many tests ran, passed, failed and were skipped, or why
# the stage was skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
TEST_SUMMARY_FILE=$(mktemp)
export TEST_SUMMARY_FILE
trap 'rm -f "$TEST_SUMMARY_FILE"' EXIT
start=$SECONDS
failed=""
for stage in unit integration packaging-check e2e; do
  s0=$SECONDS
  echo "==== make $stage"
  if ! make --no-print-directory "$stage"; then
    failed=$stage
    echo "$stage: FAILED (see above)" >>"$TEST_SUMMARY_FILE"
  fi
  echo "     ($stage took $((SECONDS - s0)) s)" >>"$TEST_SUMMARY_FILE"
  [[ -z $failed ]] || break
done
echo
echo "==== make test: $( [[ -z $failed ]] && echo passed || echo "FAILED in $failed") after $((SECONDS - start)) s"
cat "$TEST_SUMMARY_FILE"
[[ -z $failed ]]
