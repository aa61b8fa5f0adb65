#!/usr/bin/env bash
# make image: build bin/sandbox-worker and the FROM scratch worker image with
# the local Docker engine (DOCKER_HOST is honoured), offline, tagged
# roundtable-sandbox-worker:latest and :$VERSION. Fails over 16 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION="${VERSION:-$(cat VERSION 2>/dev/null || echo 0.1.0)}"
IMAGE="${IMAGE:-roundtable-sandbox-worker}"
MAX_BYTES=$((10 * 1024 * 1024))

if ! [[ "$VERSION" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]]; then
	echo "build.sh: VERSION '$VERSION' is not a valid image tag" >&2
	exit 1
fi
make --no-print-directory bin/sandbox-worker

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
cp bin/sandbox-worker "$ctx/sandbox-worker"
cp image/Dockerfile "$ctx/Dockerfile"

# Legacy builder: works offline with a bare dockerd 20.10 and no buildx.
DOCKER_BUILDKIT=0 docker build --network none --pull=false \
	-t "$IMAGE:latest" -t "$IMAGE:$VERSION" "$ctx"

size="$(docker image inspect -f '{{.Size}}' "$IMAGE:latest")"
bin_size="$(stat -c %s bin/sandbox-worker)"
echo "image $IMAGE:latest ($IMAGE:$VERSION): $size bytes; worker binary: $bin_size bytes"
if ((size > MAX_BYTES)); then
	echo "build.sh: image is $size bytes, over the $MAX_BYTES byte limit" >&2
	exit 1
fi
