#!/usr/bin/env bash
# check.sh: every packaging check in one go, for CI or before a release.
#   make deb                       build dist/roundtable-sandbox_<version>_amd64.deb
#   packaging/units-check.sh       systemd-analyze verify + exposure limits,
#                                  sysusers/tmpfiles, lintian (no errors, no warnings)
#   packaging/polkit-check.sh      the polkit rule against a real polkitd (pkcheck matrix)
#   packaging/deb-install-check.sh apt install + purge under a namespaced systemd
#                                  (stand-in binaries; DEB=dist/... for the real package)
# Each check prints its own SKIP line when the machine cannot run it.
set -euo pipefail
cd "$(dirname "$0")/.."
make deb
packaging/units-check.sh
packaging/polkit-check.sh
packaging/deb-install-check.sh
