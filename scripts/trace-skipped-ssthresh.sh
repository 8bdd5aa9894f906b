#!/usr/bin/env bash
# Shows whether this host's kernel skips a BPF CC's ssthresh() callback.
#
# It runs one longflow bench with bpf_dctcp under the tcp:tcp_probe and
# tcp:tcp_cong_state_set tracepoints, then reports:
#   - the entries into CWR, by the task the softirq ran on;
#   - the stale snd_ssthresh values (above TCP_INFINITE_SSTHRESH, which no
#     CC and no kernel path computes), each with the task of the CWR entry
#     that stored it and the kernel symbol the value points into.
# A value such as 0x822034e5 that /proc/kallsyms places inside a return
# thunk is a stack word: the trampoline returned without running the
# program (docs/design.md, "DCTCP in BPF").
#
#   scripts/trace-skipped-ssthresh.sh [extra ccload bench flags]
#
# Needs root, tracefs at /sys/kernel/tracing and a built ccload on PATH or
# in $CCLOAD. It changes no sysctl; the trace buffer is restored on exit.
set -euo pipefail

ccload=${CCLOAD:-ccload}
tr=/sys/kernel/tracing
[ -w "$tr/trace" ] || { echo "trace-skipped-ssthresh: $tr is not writable: run as root with tracefs mounted (mount -t tracefs nodev $tr)" >&2; exit 1; }
command -v "$ccload" >/dev/null || { echo "trace-skipped-ssthresh: $ccload not found: go build -o /usr/local/bin/ccload ./cmd/ccload, or set CCLOAD" >&2; exit 1; }

out=$(mktemp -d)
old_size=$(cat "$tr/buffer_size_kb")
cleanup() {
	echo 0 >"$tr/tracing_on"
	echo 0 >"$tr/events/tcp/tcp_probe/enable"
	echo 0 >"$tr/events/tcp/tcp_cong_state_set/enable"
	echo "$old_size" >"$tr/buffer_size_kb"
	echo >"$tr/trace"
	rm -rf "$out"
}
trap cleanup EXIT

echo 0 >"$tr/tracing_on"
echo >"$tr/trace"
echo 65536 >"$tr/buffer_size_kb"
echo 1 >"$tr/events/tcp/tcp_probe/enable"
echo 1 >"$tr/events/tcp/tcp_cong_state_set/enable"
echo 1 >"$tr/tracing_on"
"$ccload" bench --scenario longflow --cc bpf_dctcp --duration 5s --control-plane-runs 0 --out "$out/bench" "$@" >"$out/bench.txt"
echo 0 >"$tr/tracing_on"
cat "$tr/trace" >"$out/trace.txt"
grep -E '^ +bpf_dctcp ' "$out/bench.txt" || true

# The task is the first field of a trace line, less its "-PID".
awk -v kallsyms=/proc/kallsyms '
function task(   t) { t = $1; sub(/-[0-9]+$/, "", t); return t }
function field(name,   i, kv) {
	for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) return kv[2] }
	return ""
}
/tcp_cong_state_set:/ && / cong_state=2/ {
	last_cwr[field("sport")] = task(); cwr[task()]++; next
}
/tcp_probe:/ {
	split(field("src"), a, ":"); port = a[2]
	ss = field("ssthresh") + 0
	stale = ss > 2147483647
	if (stale && !was[port]) { n++; by[last_cwr[port]]++; vals[sprintf("%08x", ss)] = 1 }
	was[port] = stale
}
END {
	printf "CWR entries by task:\n"
	for (t in cwr) printf "  %-24s %d\n", t, cwr[t]
	printf "stale snd_ssthresh episodes: %d\n", n
	for (t in by) printf "  after a CWR entry on %-16s %d\n", t, by[t]
	for (v in vals) {
		target = "ffffffff" v; best = ""; sym = "?"
		while ((getline line < kallsyms) > 0) {
			split(line, f, " ")
			if (f[1] <= target && f[1] > best) { best = f[1]; sym = f[3] }
		}
		close(kallsyms)
		printf "  value 0x%s: inside %s (%s; the nearest symbol below %s in /proc/kallsyms)\n", v, sym, best, target
	}
}' "$out/trace.txt"
