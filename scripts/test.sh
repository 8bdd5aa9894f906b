#!/usr/bin/env bash
# Runs ccload's whole test suite on a machine of the project's kind
# (Debian bookworm, root, a kernel with BTF). Installs what it needs first;
# running it again installs nothing new.
#
#   scripts/test.sh            # everything
#   CI=true scripts/test.sh    # the same, but a skipped test fails the run
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"

step() { printf '\n== %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
	echo "test.sh: the kernel tests load BPF and create network namespaces: run as root (sudo $0)" >&2
	exit 1
fi

step "packages"
# clang-19/llvm-19/libbpf-dev: regenerate and check the BPF objects.
# bpftool: scripts/gen-vmlinux.sh. iproute2: `tc` in the testbed tests.
# procps: sysctl, used as a user would in the tests. util-linux: nsenter,
# setpriv. tshark: an independent decoder of the INT option in the loader
# tests. busybox-static, cpio, qemu-system-x86, xz-utils, kmod: the
# vmtests' initramfs and guests. linuxptp: ptp4l, the clock bench's
# baseline beside the clock agent, and its tests. prometheus: promtool and
# the server, which the metrics and daemon tests run against ccload.
# podman: builds and runs the container image as the DaemonSet does.
pkgs=(clang-19 llvm-19 libbpf-dev bpftool iproute2 procps util-linux tshark
	busybox-static cpio qemu-system-x86 xz-utils kmod linuxptp prometheus podman)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "installing: ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
	echo "all present: ${pkgs[*]}"
fi

step "format and vet"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt needed: $unformatted" >&2
	exit 1
fi
go vet ./...

step "BPF objects are current"
scripts/gen-bpf.sh --check
echo "committed objects match a fresh build"

step "build"
go build -o /dev/null ./...

step "tests"
if [ "${CI:-}" = "true" ]; then
	# CI's machine has every feature the tests need: a skip is a failure.
	export CCLOAD_NO_SKIP=1
fi
# -p 1: kernel tests in different packages register the same CC names,
# which are global to the kernel.
status=0
# The host's test events: vmtests reads from them which tests skipped
# because this kernel lacks a feature, and fails unless every guest ran
# and passed each of them.
host_events=$(mktemp)
trap 'rm -f "$host_events"' EXIT
go tool gotestsum --jsonfile "$host_events" --format testname --format-hide-empty-pkg -- -count=1 -p 1 -timeout 20m ./... || status=1

step "vmtests: the kernel tests on Debian's 6.1 and 6.12 kernels"
# CCLOAD_UPDATE_README=README.md also rewrites the README's supported-kernels
# table from this run (vmtests --update-readme).
go run ./vmtests --kernel 6.1 --kernel 6.12 --host-skips "$host_events" \
	${CCLOAD_UPDATE_README:+--update-readme "$CCLOAD_UPDATE_README"} || status=1

# The guest bench path end to end: the kernel's dctcp and bpf_dctcp on a
# real AQM (fq_codel, which this host lacks). It asserts that the bench ran
# and its results came back, not what they say: TCG's speed is no measure.
step "vmtests --bench: a quick longflow with dctcp and bpf_dctcp on fq_codel, in the 6.12 guest"
bench_out=$(mktemp -d)
go run ./vmtests --kernel 6.12 --bench-out "$bench_out" \
	--bench '--scenario longflow --quick --cc dctcp,bpf_dctcp --marker fq_codel --control-plane-runs 0' || status=1
[ -s "$bench_out"/*/results.json ] || { echo "vmtests --bench brought back no results.json" >&2; status=1; }
rm -rf "$bench_out"
exit $status
