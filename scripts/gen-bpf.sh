#!/usr/bin/env bash
# Regenerates the committed BPF objects (*_bpfel.{o,go} in the packages below) with the
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

# Every package with a go:generate for bpf2go.
pkgs=(loader qdisc telemetry/sockops telemetry/hop bench/perack clocksync onramp)

if $check; then
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	for pkg in "${pkgs[@]}"; do
		mkdir -p "$tmp/$pkg"
		cp "$pkg"/*_bpfel.o "$pkg"/*_bpfel.go "$tmp/$pkg"/
	done
fi

for pkg in "${pkgs[@]}"; do
	(cd "$pkg" && go generate .)
done

if $check; then
	status=0
	for pkg in "${pkgs[@]}"; do
		for f in "$tmp/$pkg"/*; do
			name=$(basename "$f")
			if ! cmp -s "$f" "$pkg/$name"; then
				echo "gen-bpf: $pkg/$name is stale: regenerate it with scripts/gen-bpf.sh and commit the result" >&2
				status=1
			fi
		done
		for f in "$pkg"/*_bpfel.o; do
			[ -e "$tmp/$pkg/$(basename "$f")" ] || { echo "gen-bpf: $f is not committed" >&2; status=1; }
		done
	done
	exit $status
fi
echo "gen-bpf: regenerated $(for p in "${pkgs[@]}"; do ls "$p"/*_bpfel.o; done | wc -l) objects with $($CLANG --version | head -1)"
