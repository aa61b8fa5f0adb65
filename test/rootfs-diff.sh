#!/usr/bin/env bash
# rootfs-diff.sh: what a run leaves on the root filesystem, measured.
#   test/rootfs-diff.sh snapshot FILE   list every path on / (one filesystem:
#                                       -xdev) with its size and mtime
#   test/rootfs-diff.sh compare FILE    print what is new (+), gone (-) or
#                                       changed (~, size or mtime) since then
# How docs/development.md's note on leftovers was measured: snapshot, make demo
# (or a make test stage), compare. Everything else on the machine writes
# too (build caches, other jobs' temporary files): read the list, do not
# expect it empty on a busy box. Root for a complete listing.
set -euo pipefail
list() { find / -xdev -printf '%p\t%y %s %T@\n' 2>/dev/null | LC_ALL=C sort; }
case ${1:-} in
snapshot) list >"$2" ;;
compare)
  LC_ALL=C join -t $'\t' -a1 -a2 -e MISSING -o 0,1.2,2.2 "$2" <(list) |
    awk -F'\t' '$2 == "MISSING" {print "+ " $1; next} $3 == "MISSING" {print "- " $1; next} $2 != $3 {print "~ " $1}'
  ;;
*) echo "usage: $0 snapshot|compare FILE" >&2; exit 2 ;;
esac
