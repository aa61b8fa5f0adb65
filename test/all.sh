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
# Older than any package this run builds (the e2e stages' E2E_DEB, below).
run_marker=$(mktemp)
trap 'rm -f "$TEST_SUMMARY_FILE" "$run_marker"' EXIT
start=$SECONDS
failed=()
for stage in unit integration fleet-test packaging-check clients e2e e2e-fleet; do
  s0=$SECONDS
  echo "==== make $stage"
  if [[ $stage == e2e* && -z ${E2E_DEB:-} ]]; then
    # packaging-check has just built this tree's package (make deb, about
    # 30 s with a warm build cache, minutes on a cold one): e2e and the
    # fleet's boxes install that one rather than build it again. Only a
    # whole package made during this run; else the stage runs make deb.
    deb=$(find dist -maxdepth 1 -name 'roundtable-sandbox_*_amd64.deb' -newer "$run_marker" -printf '%T@ %p\n' 2>/dev/null |
      sort -rn | head -1 | cut -d' ' -f2-)
    if [[ -n $deb && $(dpkg-deb -c "$deb" 2>/dev/null) == *" ./usr/bin/sandbox-host"* ]]; then
      export E2E_DEB=$PWD/$deb
      echo "(installing $deb, built by packaging-check)"
    fi
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
