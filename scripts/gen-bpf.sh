#!/usr/bin/env bash
# Regenerates the committed BPF objects (loader/*_bpfel.{o,go}) with the
# pinned toolchain. With --check, fails when they differ from what is
# committed, so a stale object can never be shipped.
#
# Pinned toolchain: Debian bookworm's clang-19 and libbpf-dev (headers).
set -euo pipefail
cd "$(dirname "$0")/.."

CLANG=clang-19
command -v "$CLANG" >/dev/null || { echo "gen-bpf: $CLANG not found; install it: apt-get install clang-19 llvm-19 libbpf-dev" >&2; exit 1; }
[ -f /usr/include/bpf/bpf_helpers.h ] || { echo "gen-bpf: libbpf headers missing; apt-get install libbpf-dev" >&2; exit 1; }

check=false
[ "${1:-}" = "--check" ] && check=true

if $check; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	cp loader/*_bpfel.o loader/*_bpfel.go "$tmp"/
fi

(cd loader && go generate ./...)

if $check; then
	status=0
	for f in "$tmp"/*; do
		name=$(basename "$f")
		if ! cmp -s "$f" "loader/$name"; then
			echo "gen-bpf: loader/$name is stale: regenerate it with scripts/gen-bpf.sh and commit the result" >&2
			status=1
		fi
	done
	exit $status
fi
echo "gen-bpf: regenerated $(ls loader/*_bpfel.o | wc -l) objects with $($CLANG --version | head -1)"
