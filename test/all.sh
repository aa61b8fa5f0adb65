#!/usr/bin/env bash
# make test: the seven stages in order (unit, integration, fleet-test, packaging-check,
# clients, e2e, e2e-fleet), then each stage's one-line summary again: how many tests ran, passed,
# failed and were skipped, or why the stage was skipped. A failing unit stage
# stops the run (the later stages build the same code); a later stage's
# failure does not stop the stages after it, so one run shows every failure.
set -uo pipefail
cd "$(dirname "$0")/.."
TEST_SUMMARY_FILE=$(mktemp)
export TEST_SUMMARY_FILE
trap 'rm -f "$TEST_SUMMARY_FILE"' EXIT
start=$SECONDS
failed=()
for stage in unit integration fleet-test packaging-check clients e2e e2e-fleet; do
  s0=$SECONDS
  echo "==== make $stage"
  if [[ $stage == e2e-fleet && -z ${E2E_DEB:-} ]]; then
    # The e2e stage has just built this tree's package (make deb, ~4 min):
    # the fleet's boxes install that one rather than build it again.
    deb=$(ls -t dist/roundtable-sandbox_*_amd64.deb 2>/dev/null | head -1)
    if [[ -n $deb ]]; then export E2E_DEB=$PWD/$deb; fi
  fi
  if ! make --no-print-directory "$stage"; then
    failed+=("$stage")
    # A stage that names its failing check (the leftover checks do) has
    # said it; otherwise say where to look.
    grep -q "^$stage: FAILED" "$TEST_SUMMARY_FILE" ||
      echo "$stage: FAILED (its output above says which check)" >>"$TEST_SUMMARY_FILE"
  fi
  echo "     ($stage took $((SECONDS - s0)) s)" >>"$TEST_SUMMARY_FILE"
  if [[ $stage == unit && ${#failed[@]} -gt 0 ]]; then
    echo "(the unit stage failed: integration, fleet-test, packaging-check, clients, e2e and e2e-fleet not run)" >>"$TEST_SUMMARY_FILE"
    break
  fi
done
echo
if ((${#failed[@]} == 0)); then
  echo "==== make test: passed after $((SECONDS - start)) s"
else
  echo "==== make test: FAILED in ${failed[*]} after $((SECONDS - start)) s"
fi
cat "$TEST_SUMMARY_FILE"
((${#failed[@]} == 0))
