#!/usr/bin/env bash
# Regenerates bpf/include/vmlinux.h from a kernel's BTF.
# Usage: scripts/gen-vmlinux.sh [BTF_FILE]   (default: /sys/kernel/btf/vmlinux)
# The BPF programs use CO-RE, so one header serves every supported kernel;
# it only has to contain the types the programs name.
set -euo pipefail
btf=${1:-/sys/kernel/btf/vmlinux}
out="$(dirname "$0")/../bpf/include/vmlinux.h"
command -v bpftool >/dev/null || { echo "bpftool not found: apt-get install bpftool" >&2; exit 1; }
bpftool btf dump file "$btf" format c > "$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out from $btf ($(wc -l < "$out") lines)"
