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

tmp="" gen=""
trap 'rm -rf ${gen:+"$gen"} ${tmp:+"$tmp"}' EXIT
if $check; then
	tmp=$(mktemp -d)
	for pkg in "${pkgs[@]}"; do
		mkdir -p "$tmp/$pkg"
		cp "$pkg"/*_bpfel.o "$pkg"/*_bpfel.go "$tmp/$pkg"/
	done
fi

# bpf2go hands clang absolute paths, and clang-19's BTF depends on how
# long the paths are: two types in onramp/onramp_sockops_bpfel.o trade
# places between a checkout at a path of up to 11 characters and one at 12
# or more (in the checkouts tried; a symlink of a fixed path did not help,
# clang also uses the real working directory). So the sources are copied to a directory whose
# path has one length, /tmp/ccload-gen.XXXXXXXX, and built there; the
# objects are the same bytes wherever the checkout is.
gen=$(mktemp -d /tmp/ccload-gen.XXXXXXXX)
cp go.mod go.sum "$gen"/
cp -r bpf "$gen"/
for pkg in "${pkgs[@]}"; do
	mkdir -p "$gen/$pkg"
	cp "$pkg"/*.go "$gen/$pkg"/
	(cd "$gen/$pkg" && go generate .)
	cp "$gen/$pkg"/*_bpfel.o "$gen/$pkg"/*_bpfel.go "$pkg"/
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
