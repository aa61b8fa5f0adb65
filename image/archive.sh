#!/usr/bin/env bash
# make image-archive: dist/worker-image.tar in docker-archive format, built
# WITHOUT a Docker engine (image/mkarchive), deterministic, tagged
# roundtable-sandbox-worker:latest and :$VERSION. Load it with
# `docker load -i dist/worker-image.tar`.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION="${VERSION:-$(cat VERSION 2>/dev/null || echo 0.1.0)}"
IMAGE="${IMAGE:-roundtable-sandbox-worker}"
GO="${GO:-go}"
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-0}"
# 16 MiB: the worker also carries the precheck JavaScript engine (goja, about 7.5 MiB).
MAX_BYTES=$((16 * 1024 * 1024))

make --no-print-directory bin/sandbox-worker
mkdir -p dist
"$GO" run ./image/mkarchive -binary bin/sandbox-worker -out dist/worker-image.tar \
	-arch "$("$GO" env GOARCH)" -tag "$IMAGE:latest" -tag "$IMAGE:$VERSION"
size="$(stat -c %s dist/worker-image.tar)"
if ((size > MAX_BYTES)); then
	echo "archive.sh: archive is $size bytes, over the $MAX_BYTES byte limit" >&2
	exit 1
fi
