// Package lib holds the end-to-end harness's shell libraries (common.sh,
// ns.sh, install.sh, fleet.sh) and tests of them that need no namespace:
// the teardown's leftover check reports a path made on the machine after
// the snapshot, and the only path a run keeps there on purpose (the small
// toolbox's base cache) is made before it. It holds tests only.
package lib
