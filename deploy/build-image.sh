#!/bin/sh
# Build ccload's container image offline, with podman (or buildah when podman
# is missing): the static binary is compiled here, then copied into an image
# FROM scratch (see Containerfile).
#
#   deploy/build-image.sh [IMAGE]        IMAGE defaults to ccload:dev
#
# GO (default: go) names the Go toolchain. The build runs with --network
# none: nothing is pulled, and nothing needs to be.
set -eu

image=${1:-ccload:dev}
repo=$(cd "$(dirname "$0")/.." && pwd)
go=${GO:-go}

ctx=$(mktemp -d "${TMPDIR:-/tmp}/ccload-image.XXXXXX")
trap 'rm -rf "$ctx"' EXIT INT TERM

version=$(git -C "$repo" describe --always --dirty 2>/dev/null || echo dev)
echo "building ccload $version (static) ..."
(cd "$repo" && CGO_ENABLED=0 "$go" build -trimpath \
	-ldflags "-s -w -X main.version=$version" -o "$ctx/ccload" ./cmd/ccload)
cp "$repo/deploy/Containerfile" "$ctx/Containerfile"

if command -v podman >/dev/null 2>&1; then
	podman build --network none --file "$ctx/Containerfile" --tag "$image" "$ctx"
elif command -v buildah >/dev/null 2>&1; then
	buildah bud --network none --file "$ctx/Containerfile" --tag "$image" "$ctx"
else
	echo "build-image.sh: neither podman nor buildah is installed (apt-get install podman)" >&2
	exit 1
fi
echo "built $image"
