#!/usr/bin/env bash
# make integration: the Docker integration tests (go test -run Integration
# ./pkg/... with SANDBOX_IT_DOCKER set) against a PRIVATE dockerd that this
# script starts and always stops: its own data root, exec root, socket and
# pidfile under a temporary directory, --bridge=none, no iptables.
#
# The daemon runs in a private mount namespace whose /run is a fresh tmpfs
# holding a stand-in journald socket (pkg/container/testdata/journalsink),
# so containers with the journald log driver start on machines without
# systemd, and the tests can read what Docker sent to "journald"
# (SANDBOX_IT_JOURNAL). /etc/docker is a tmpfs copy there (dockerd writes
# key.json into it), so nothing outside the temporary directory is changed.
#
# Skips (exit 0, saying why) when not root or when dockerd is missing.
# Usage: test/integration.sh [go test arguments, default ./pkg/...]
set -euo pipefail
cd "$(dirname "$0")/.."

skip() {
	echo "integration tests skipped: $*"
	if [[ -n ${TEST_SUMMARY_FILE:-} ]]; then echo "integration: skipped: $*" >>"$TEST_SUMMARY_FILE"; fi
	exit 0
}
[[ "$(id -u)" == 0 ]] || skip "not running as root (a private dockerd needs root)"
for t in dockerd containerd unshare curl; do
	command -v "$t" >/dev/null ||
		skip "$t not found (apt-get install -y --no-install-recommends $(packaging/prerequisites.sh missing); README Quick start lists every prerequisite)"
done
GO="${GO:-go}"

# The end-to-end, bench and package checks' lock: this run's dockerd makes
# top-level cgroups (sandbox-it-*) that a namespaced run's teardown would find
# new and in use, and both compete for the same two cores.
if [[ -z ${E2E_LOCK_FD:-} ]]; then
	mkdir -p /run/lock
	exec {E2E_LOCK_FD}>/run/lock/roundtable-sandbox-e2e.lock
	if ! flock -n "$E2E_LOCK_FD"; then
		echo "integration: another namespaced run holds /run/lock/roundtable-sandbox-e2e.lock; waiting (up to 30 min)"
		flock -w 1800 "$E2E_LOCK_FD" || { echo "integration: could not take the lock" >&2; exit 1; }
	fi
	export E2E_LOCK_FD
fi

# A short path: the daemon's and containerd's socket paths must fit in 108 bytes.
tmp="$(mktemp -d /tmp/sbx-it.XXXXXX)"
sock="$tmp/docker.sock"
journal="$tmp/journal.jsonl"
dockerd_pid=""
# The containers' cgroup parent, this run's own: removed when dockerd stopped.
cgparent="sandbox-it-${tmp##*.}"

# What a dockerd writes to the machine (the e2e harness's listing, plus
# /run): taken before it starts, compared in cleanup.
# shellcheck source=e2e/lib/ns.sh
source test/e2e/lib/ns.sh
watch() { { ns_watch_list; find /run -xdev -maxdepth 1; } | grep -vxF "$tmp" | sort; }

cleanup() {
	local rc=$?
	set +e
	if [[ -n "$dockerd_pid" ]] && kill -0 "$dockerd_pid" 2>/dev/null; then
		kill -TERM "$dockerd_pid"
		for _ in $(seq 1 100); do
			kill -0 "$dockerd_pid" 2>/dev/null || break
			sleep 0.2
		done
		if kill -0 "$dockerd_pid" 2>/dev/null; then
			echo "integration: dockerd $dockerd_pid did not stop, killing it" >&2
			kill -KILL "$dockerd_pid"
		fi
		wait "$dockerd_pid" 2>/dev/null
	fi
	# Our containerd (ns.sh) outlives dockerd: stop it, then its shims go.
	if [[ -f "$tmp/containerd.pid" ]]; then
		local cpid
		cpid=$(cat "$tmp/containerd.pid")
		kill -TERM "$cpid" 2>/dev/null
		for _ in $(seq 1 50); do
			kill -0 "$cpid" 2>/dev/null || break
			sleep 0.2
		done
		kill -KILL "$cpid" 2>/dev/null
	fi
	local cg
	for cg in /sys/fs/cgroup/"$cgparent" /sys/fs/cgroup/*/"$cgparent"; do
		for _ in $(seq 1 20); do # shims may take a moment to leave
			find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null
			[[ -d $cg ]] || break
			sleep 0.1
		done
		[[ ! -d $cg ]] || echo "integration: cgroup $cg remains (a container outlived dockerd?)" >&2
	done
	if [[ -f "$tmp/sink.pid" ]]; then
		kill -TERM "$(cat "$tmp/sink.pid")" 2>/dev/null
	fi
	if [[ -f $tmp/paths.before ]]; then
		local new
		new=$(comm -13 "$tmp/paths.before" <(watch))
		if [[ -n $new ]]; then
			echo "integration: LEFT: new paths on the machine since dockerd started (made by it, or by another process meanwhile):" >&2
			head -40 <<<"$new" >&2
			((rc != 0)) || rc=1
			[[ -z ${TEST_SUMMARY_FILE:-} ]] || echo "integration: FAILED: the leftover check found $(wc -l <<<"$new") new paths on the machine (first: $(head -1 <<<"$new"))" >>"$TEST_SUMMARY_FILE"
		fi
	fi
	# Container layers may still be mounted in the (now gone) namespace only;
	# on the host the tree is plain files.
	rm -rf "$tmp" 2>/dev/null || echo "integration: could not remove $tmp entirely" >&2
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "integration: building helpers"
"$GO" build -o "$tmp/journalsink" ./pkg/container/testdata/journalsink
# The static worker a toolbox image carries (toolbox.ReadWorker takes it).
CGO_ENABLED=0 "$GO" build -trimpath -o "$tmp/sandbox-worker" ./cmd/sandbox-worker

# The small test toolbox's base tar (built once, then cached by
# test/toolbox/build.sh); the toolbox tests import it into this dockerd.
toolbox_tar=""
if toolbox_tar=$(test/toolbox/build.sh 2>"$tmp/toolbox.log"); then
	echo "integration: small toolbox base $toolbox_tar"
else
	toolbox_tar=""
	echo "integration: small toolbox base unavailable (test/toolbox/build.sh, below); its import test skips"
	tail -n 5 "$tmp/toolbox.log" || true
fi

cat >"$tmp/ns.sh" <<'EOF'
#!/bin/sh
# Runs inside the private mount namespace, then becomes dockerd.
set -eu
tmp="$1"
# dockerd and its containerd write state under /run (docker/, containerd/)
# and key.json into /etc/docker: both private here. libmount's utab (it would
# make /run/mount on the machine) goes to $tmp.
export LIBMOUNT_UTAB="$tmp/utab"
mount -t tmpfs -o mode=0755,size=16m sandbox-it-run /run
mkdir -p /run/etc-docker /run/systemd/journal
if [ -d /etc/docker ]; then
	cp -a /etc/docker/. /run/etc-docker/
	mount -t tmpfs -o mode=0755,size=4m sandbox-it-etc-docker /etc/docker
	cp -a /run/etc-docker/. /etc/docker/
fi
"$tmp/journalsink" /run/systemd/journal/socket "$tmp/journal.jsonl" 2>>"$tmp/sink.log" &
echo $! >"$tmp/sink.pid"
for _ in $(seq 1 50); do
	[ -S /run/systemd/journal/socket ] && break
	sleep 0.1
done
# containerd of our own, not dockerd's managed one: that one's opt plugin
# makes /opt/containerd on the shared root. Everything here is under $tmp
# (and its CRI plugin, which writes /etc/cni, is off).
# Top-level keys before the first table, or TOML files them under it.
printf '%s\n' 'version = 2' "root = \"$tmp/containerd\"" "state = \"/run/containerd\"" \
	'disabled_plugins = ["io.containerd.grpc.v1.cri"]' \
	"[grpc]" "  address = \"$tmp/containerd.sock\"" '[plugins."io.containerd.internal.v1.opt"]' \
	"  path = \"$tmp/containerd/opt\"" >"$tmp/containerd.toml"
containerd --config "$tmp/containerd.toml" >>"$tmp/containerd.log" 2>&1 &
echo $! >"$tmp/containerd.pid"
for _ in $(seq 1 100); do
	[ -S "$tmp/containerd.sock" ] && break
	sleep 0.1
done
[ -S "$tmp/containerd.sock" ] || { echo "containerd did not start:" >&2; tail -n 20 "$tmp/containerd.log" >&2; exit 1; }
exec dockerd \
	--containerd "$tmp/containerd.sock" \
	--data-root "$tmp/data" \
	--exec-root "$tmp/exec" \
	-H "unix://$tmp/docker.sock" \
	--pidfile "$tmp/docker.pid" \
	--bridge=none --iptables=false --ip6tables=false \
	--cgroup-parent="$2" \
	--log-level=warn
EOF
chmod 0755 "$tmp/ns.sh"

watch >"$tmp/paths.before"
echo "integration: starting a private dockerd on unix://$sock"
# The daemons do not inherit the lock (a lingering shim would hold it).
unshare --mount --propagation private "$tmp/ns.sh" "$tmp" "$cgparent" >"$tmp/dockerd.log" 2>&1 {E2E_LOCK_FD}>&- &
dockerd_pid=$!

for _ in $(seq 1 150); do
	if [[ -S "$sock" ]] && [[ "$(curl -fsS --max-time 2 --unix-socket "$sock" http://docker/_ping 2>/dev/null)" == OK ]]; then
		break
	fi
	if ! kill -0 "$dockerd_pid" 2>/dev/null; then
		echo "integration: dockerd exited early:" >&2
		tail -n 20 "$tmp/dockerd.log" >&2
		exit 1
	fi
	sleep 0.2
done
[[ "$(curl -fsS --max-time 2 --unix-socket "$sock" http://docker/_ping 2>/dev/null)" == OK ]] || {
	echo "integration: dockerd did not answer within 30 s" >&2
	tail -n 20 "$tmp/dockerd.log" >&2
	exit 1
}

# The real worker image, when it can be built without an engine. The Go
# tests always build their own trivial FROM scratch image as well.
worker_image=""
if [[ -x image/archive.sh ]] && make --no-print-directory image-archive >"$tmp/image.log" 2>&1 && [[ -f dist/worker-image.tar ]]; then
	if curl -fsS --max-time 120 --unix-socket "$sock" -X POST -H 'Content-Type: application/x-tar' \
		--data-binary @dist/worker-image.tar "http://docker/images/load?quiet=1" >"$tmp/load.log"; then
		if ! grep -q '"error' "$tmp/load.log"; then
			worker_image="roundtable-sandbox-worker:latest"
			echo "integration: loaded the worker image from dist/worker-image.tar"
		fi
	fi
fi
if [[ -z "$worker_image" ]]; then
	echo "integration: worker image unavailable (make image-archive failed, see below); running with the tests' own trivial test image only"
	tail -n 5 "$tmp/image.log" 2>/dev/null || true
fi

# The official MCP reference server (test/peers; .ci/run installs it with npm ci).
# Its test runs it in a network namespace of its own (it listens on every interface).
everything="" everything_skip=""
if [[ ! -x test/peers/node_modules/.bin/mcp-server-everything ]]; then
	echo "integration: reference MCP server test skipped: test/peers/node_modules missing (npm ci --prefix test/peers)"
elif ! command -v node >/dev/null; then
	echo "integration: reference MCP server test skipped: node not found (apt-get install nodejs npm)"
elif (($(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0) < 20)); then
	# Its Streamable HTTP mode fails on Debian 12's Node.js 18 (no global
	# crypto; with --experimental-global-webcrypto every request after
	# initialize still gets 400). The SDK client tests run on 18.
	everything_skip="server-everything needs Node.js 20 or later, this node is $(node --version) (Debian 12's nodejs is 18; NodeSource's 20 runs it)"
	echo "integration: reference MCP server test skipped: $everything_skip"
else
	everything="$PWD/test/peers/node_modules/.bin/mcp-server-everything"
fi

# The official MCP TypeScript SDK's client (test/peers/mcp-run-client.mjs)
# against the sandbox_run MCP server (pkg/runmcp).
tsclient=""
if [[ ! -f test/peers/node_modules/@modelcontextprotocol/sdk/package.json ]]; then
	echo "integration: MCP TypeScript client test skipped: test/peers/node_modules missing (npm ci --prefix test/peers)"
elif ! command -v node >/dev/null; then
	echo "integration: MCP TypeScript client test skipped: node not found (apt-get install nodejs npm)"
else
	tsclient=1
fi

# The network namespace tests (test/netns: the box's own addresses in
# pkg/safefetch and pkg/egress) need root only, checked above.

# Arguments, when given, replace the package list (for example: -v ./pkg/container/).
args=("$@")
((${#args[@]})) || args=(./pkg/...)
echo "integration: go test -count=1 -run Integration ${args[*]}"
SANDBOX_IT_DOCKER="unix://$sock" \
	SANDBOX_IT_JOURNAL="$journal" \
	SANDBOX_IT_WORKER_IMAGE="$worker_image" \
	SANDBOX_IT_MCP_EVERYTHING="$everything" \
	SANDBOX_IT_MCP_EVERYTHING_SKIP="$everything_skip" \
	SANDBOX_IT_TOOLBOX_TAR="$toolbox_tar" \
	SANDBOX_IT_SANDBOX_WORKER="$tmp/sandbox-worker" \
	SANDBOX_IT_MCP_TSCLIENT="$tsclient" \
	SANDBOX_IT_NETNS=1 \
	test/gotest.sh integration -count=1 -run Integration "${args[@]}"
