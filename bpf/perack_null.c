// SPDX-License-Identifier: GPL-2.0
/*
 * ccload_null: a congestion control whose callbacks return at once. The
 * bench runs a flow through it to measure the floor of a CC's per-ACK cost
 * under the kernel's BPF statistics: what calling a struct_ops program and
 * timing it costs, with no work in it (bench/perack). Its window never
 * moves from the initial one. Not for traffic that matters.
 */
#include "include/ccload.h"

char _license[] SEC("license") = "GPL";

SEC("struct_ops")
void BPF_PROG(null_in_ack_event, struct sock *sk, __u32 flags) {}

SEC("struct_ops")
void BPF_PROG(null_cong_avoid, struct sock *sk, __u32 ack, __u32 acked) {}

SEC("struct_ops")
__u32 BPF_PROG(null_ssthresh, struct sock *sk) { return tcp_sk(sk)->snd_ssthresh; }

SEC("struct_ops")
__u32 BPF_PROG(null_undo_cwnd, struct sock *sk) { return tcp_sk(sk)->snd_cwnd; }

SEC(".struct_ops.link")
struct tcp_congestion_ops ccload_null = {
	.in_ack_event = (void *)null_in_ack_event,
	.cong_avoid = (void *)null_cong_avoid,
	.ssthresh = (void *)null_ssthresh,
	.undo_cwnd = (void *)null_undo_cwnd,
	.flags = CCLOAD_CC_FLAGS,
	.name = "ccload_null",
};
