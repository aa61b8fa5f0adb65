#!/usr/bin/env bash
# make stress: hunts flaky tests. Runs the unit tests under the race
# detector STRESS_COUNT times (go test -count) and the Docker integration
# tests STRESS_IT_COUNT times, while STRESS_HOGS CPU-bound busy loops (started
# and stopped here) keep the machine busy; then prints, per test that failed
# at least once, how many of its runs failed (testsummary -tally).
#
# "No flakes" here means: 0 failing tests at the defaults. A test that fails
# once in this run is a bug to root-cause (product first), never a re-run.
#
# Settings (environment): STRESS_COUNT (3), STRESS_IT_COUNT (2; 0 skips the
# integration tests, which also skip themselves without root or dockerd),
# STRESS_HOGS (2), STRESS_PKGS (./...), STRESS_RUN (a go test -run pattern).
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
count=${STRESS_COUNT:-3}
it_count=${STRESS_IT_COUNT:-2}
hogs=${STRESS_HOGS:-2}
read -r -a pkgs <<<"${STRESS_PKGS:-./...}"
run=()
[[ -z ${STRESS_RUN:-} ]] || run=(-run "$STRESS_RUN")
for v in count it_count hogs; do
	[[ ${!v} =~ ^[0-9]+$ ]] || { echo "stress: ${v^^} must be a number, got ${!v}" >&2; exit 2; }
done

tmp=$(mktemp -d)
hog_pids=()
stop_hogs() {
	((${#hog_pids[@]} == 0)) || kill "${hog_pids[@]}" 2>/dev/null
	wait "${hog_pids[@]}" 2>/dev/null
	hog_pids=()
}
trap 'stop_hogs; rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

"$GO" build -o "$tmp/testsummary" ./test/testsummary || exit 1
# Build first, off the clock of the hogs: a build failure is not a flake.
"$GO" test -race -count=1 -run '^$' "${pkgs[@]}" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }

for _ in $(seq 1 "$hogs"); do
	bash -c 'while :; do :; done' &
	hog_pids+=($!)
done
echo "stress: $hogs CPU hogs running (pids ${hog_pids[*]}); load $(cut -d' ' -f1-3 /proc/loadavg)"
start=$SECONDS

echo "stress: unit tests, go test -race -count=$count ${run[*]} ${pkgs[*]}"
"$GO" test -race -timeout 60m -count="$count" "${run[@]}" -json "${pkgs[@]}" >"$tmp/unit.json" 2>&1
"$tmp/testsummary" -stage "stress unit" <"$tmp/unit.json" | tail -n 3

if ((it_count > 0)); then
	echo "stress: integration tests, -count=$it_count (test/integration.sh)"
	TEST_JSON_FILE="$tmp/integration.json" ./test/integration.sh -count="$it_count" ${run[@]+"${run[@]}"} "${pkgs[@]}" 2>&1 | tail -n 3
fi
stop_hogs
echo "stress: took $((SECONDS - start)) s"
echo
cat "$tmp"/*.json | "$tmp/testsummary" -stage stress -tally >"$tmp/report" 2>&1
rc=$?
# The per-test table is what stress is for; the failed tests' output was
# printed by each stage above.
sed -n '/^stress: [0-9]* failing tests/,$p' "$tmp/report"
exit $rc
