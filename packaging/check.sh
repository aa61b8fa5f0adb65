#!/usr/bin/env bash
# check.sh: every packaging check in one go, for CI or before a release.
#   make deb                       build dist/roundtable-sandbox_<version>_amd64.deb
#   packaging/units-check.sh       systemd-analyze verify + exposure limits,
#                                  sysusers/tmpfiles, lintian (no errors, no warnings)
#   packaging/polkit-check.sh      the polkit rule against a real polkitd (pkcheck matrix)
#   packaging/deb-install-check.sh apt install + purge under a namespaced systemd
#                                  (stand-in binaries; DEB=dist/... for the real package)
# Each check prints its own SKIP line when the machine cannot run it; at the
# end one line per check counts its ok, failed and skipped checks and repeats
# the skip reasons (appended to TEST_SUMMARY_FILE too when make test sets it).
set -euo pipefail
cd "$(dirname "$0")/.."
make deb
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
status=0 lines=()
for c in units-check polkit-check deb-install-check; do
  set +e
  "packaging/$c.sh" 2>&1 | tee "$log/$c"
  rc=${PIPESTATUS[0]}
  set -e
  ok=$(grep -cE '^ok[: ]' "$log/$c" || true)
  bad=$(grep -cE '^FAIL[: ]' "$log/$c" || true)
  skips=$(grep -iE '^skip: ' "$log/$c" | sed -E 's/^[Ss][Kk][Ii][Pp]: //' || true)
  nskip=0
  [[ -z $skips ]] || nskip=$(wc -l <<<"$skips")
  if ((rc != 0)); then
    status=1
    res="FAILED (exit $rc)"
  elif ((ok == 0 && nskip > 0)); then
    res="skipped"
  else
    res="passed"
  fi
  line="packaging-check: $c: $res: $ok ok, $bad failed, $nskip skipped"
  [[ -z $skips ]] || line+=" ($(paste -sd';' <<<"$skips" | sed 's/;/; /g'))"
  lines+=("$line")
done
echo
printf '== %s\n' "${lines[@]}"
if [[ -n ${TEST_SUMMARY_FILE:-} ]]; then printf '%s\n' "${lines[@]}" >>"$TEST_SUMMARY_FILE"; fi
exit $status
