// SPDX-License-Identifier: GPL-2.0
/*
 * hpcc: an HPCC-style window over INT (HPCC, SIGCOMM'19, §3.2 Algorithm 1,
 * parameters from §3.3), fed by the INT echoes bpf/int_sockops.c puts in
 * the socket's int_store entry.
 *
 * Per new echo, for each hop i against the previous echo:
 *     txRate = (tx_i - tx_i') / (ts_i - ts_i')
 *     u'     = min(qlen_i, qlen_i') / (B_i·T) + txRate / B_i
 * U is the EWMA of the largest u' with weight τ/T (τ: that hop's dt):
 *     U = (1 - τ/T)·U + (τ/T)·u
 * Window, with a reference W^c synchronised once per RTT, on a U measured
 * since the last synchronisation (HPCC_FRESH_U):
 *     U >= η or incStage >= maxStage:  W = W^c/(U/η) + W_AI  (incStage = 0)
 *     otherwise:                        W = W^c + W_AI        (incStage++)
 * and pacing R = W/T.
 *
 * T is base_rtt, or the smallest RTT sample less the queueing delay its
 * echo reports (floored at one GSO burst at host_bw, as for PowerTCP). W starts at host_bw·T (line rate).
 * W_AI defaults to the paper's rule of thumb W_init·(1-η)/N. Each hop's
 * B·T is at least one GSO packet, as in PowerTCP, for hops that forward
 * whole GSO packets.
 *
 * HPCC needs INT. An ACK without it leaves the window where it is; the
 * no_int_acks counter shows how many there were.
 */
#include "include/hpcc.h"

char _license[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hpcc_params);
} params SEC(".maps");

CCLOAD_STATS_MAP;
CCLOAD_TRACE_MAPS;
INT_STORE_MAP;

static __always_inline struct hpcc_params *hpcc_params(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&params, &zero);
}

static __always_inline void hpcc_on_ack(struct sock *sk, const struct rate_sample *rs)
{
	struct hpcc_ca *ca = inet_csk_ca(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	struct hpcc_params *p = hpcc_params();
	__u32 srtt = tp->srtt_us >> 3, t;
	struct cc_use u;
	struct int_sk *st;
	bool update_wc;

	/* The SYN-ACK of an active open is processed before init() runs. */
	if (!(ca->flags & HPCC_COUNTED))
		return;
	stat_add(&stats, STAT_ACKS, 1);
	if (!p)
		return;
	st = bpf_sk_storage_get(&int_store, sk, NULL, 0);
	if (!st || !st->echo_hops) {
		cc_track_min(&ca->min_rtt_us, srtt);
		stat_add(&stats, STAT_NO_INT_ACKS, 1);
		return;
	}
	/* T: the RTT less the queueing the echo reports (see int.h). */
	int_track_base_rtt(&ca->min_rtt_us, rs->rtt_us, st);
	t = hpcc_t(sk->sk_gso_max_size, p, ca);
	if (st->echo_seq != ca->prev.echo_seq) {
		stat_add(&stats, STAT_INT_SAMPLES, 1);
		hpcc_measure(ca, st, t, sk->sk_gso_max_size);
	}

	/* Once per round, and only on a U measured since the last time. */
	update_wc = (ca->flags & HPCC_FRESH_U) && !seq_before(tp->snd_una, ca->last_update_seq);
	cc_use_of(sk, rs, &u);
	ca->w = hpcc_ack_window(ca, p, t, update_wc, &u);
	if (update_wc) {
		ca->last_update_seq = tp->snd_nxt;
		stat_add(&stats, STAT_REF_UPDATES, 1);
	}
	stat_add(&stats, STAT_CWND_UPDATES, 1);
	cc_set_window(sk, ca->w, t);
	TRACE_ACK(sk, ca->w, ca->u, int_max_qlen(st), rs->rtt_us > 0 ? rs->rtt_us : 0, TRACE_MODE_INT);
}

SEC("struct_ops")
void BPF_PROG(hpcc_init, struct sock *sk)
{
	struct hpcc_ca *ca = inet_csk_ca(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	struct hpcc_params *p = hpcc_params();
	__u32 t;

	__builtin_memset(ca, 0, sizeof(*ca));
	ca->flags = HPCC_COUNTED;
	CC_COUNT_SOCK_INIT();
	if (!p)
		return;
	ca->u = FP_ONE;
	ca->min_rtt_us = tp->srtt_us >> 3;
	ca->last_update_seq = tp->snd_nxt;
	t = hpcc_t(sk->sk_gso_max_size, p, ca);
	ca->w = ca->wc = max_u64(bdp_bytes(p->host_bw_bps, t), 2ULL * (tp->mss_cache ?: 1));
	sk->sk_pacing_status = SK_PACING_NEEDED;
	cc_set_window(sk, ca->w, t);
}

SEC("struct_ops")
void BPF_PROG(hpcc_cong_control, struct sock *sk, __u32 ack, int flag,
	      const struct rate_sample *rs)
{
	hpcc_on_ack(sk, rs);
}

SEC("struct_ops")
void BPF_PROG(hpcc_cong_control_legacy, struct sock *sk, const struct rate_sample *rs)
{
	hpcc_on_ack(sk, rs);
}

SEC("struct_ops")
void BPF_PROG(hpcc_set_state, struct sock *sk, __u8 new_state)
{
	struct hpcc_ca *ca = inet_csk_ca(sk);
	struct tcp_sock *tp = tcp_sk(sk);

	if (new_state == TCP_CA_Recovery || new_state == TCP_CA_Loss)
		stat_add(&stats, STAT_LOSS_EVENTS, 1);
	/* After an RTO, restart from the kernel's window. */
	if (new_state == TCP_CA_Loss)
		ca->w = ca->wc = (__u64)tp->snd_cwnd * (tp->mss_cache ?: 1);
}

/* Loss is not a signal for HPCC: keep the kernel from cutting the window. */
SEC("struct_ops")
__u32 BPF_PROG(hpcc_ssthresh, struct sock *sk)
{
	return tcp_sk(sk)->snd_ssthresh;
}

SEC("struct_ops")
__u32 BPF_PROG(hpcc_undo_cwnd, struct sock *sk)
{
	return tcp_sk(sk)->snd_cwnd;
}

SEC("struct_ops")
void BPF_PROG(hpcc_release, struct sock *sk)
{
	struct hpcc_ca *ca = inet_csk_ca(sk);

	if (ca->flags & HPCC_COUNTED) {
		ca->flags &= ~HPCC_COUNTED;
		stat_add(&stats, STAT_SOCK_RELEASE, 1);
	}
}

SEC(".struct_ops.link")
struct tcp_congestion_ops hpcc = {
	.init = (void *)hpcc_init,
	.release = (void *)hpcc_release,
	.cong_control = (void *)hpcc_cong_control,
	.set_state = (void *)hpcc_set_state,
	.ssthresh = (void *)hpcc_ssthresh,
	.undo_cwnd = (void *)hpcc_undo_cwnd,
	.flags = CCLOAD_CC_FLAGS,
	.name = "hpcc",
};
