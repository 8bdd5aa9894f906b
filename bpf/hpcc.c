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
 * Window, with a reference W^c synchronised once per RTT:
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
#include "include/ccload.h"
#include "include/int.h"

char _license[] SEC("license") = "GPL";

/* Run-time parameters, written by the loader (ccload attach/set). */
struct hpcc_params {
	__u64 host_bw_bps;	/* host NIC bandwidth, bits/s: W_init = host_bw·T */
	__u32 eta;		/* target utilisation η, FP_ONE scale */
	__u32 max_stage;	/* additive-increase stages before MI */
	__u32 base_rtt_us;	/* T; 0 = track the flow's minimum srtt */
	__u32 wai_bytes;	/* W_AI; 0 = W_init·(1-η)/expected_flows */
	__u32 expected_flows;	/* N in the W_AI rule of thumb */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hpcc_params);
} params SEC(".maps");

CCLOAD_STATS_MAP;
CCLOAD_TRACE_MAPS;
INT_STORE_MAP;

#define HPCC_FALLBACK_RTT_US 100
#define HPCC_U_MIN ((__s64)FP_ONE / 64)	/* bounds one MI step to 64·η */
#define HPCC_U_MAX (1024 * (__s64)FP_ONE)
#define HPCC_COUNTED 0x1

/* Per-socket state in icsk_ca_priv (CCLOAD_CA_FITS checks that it fits). */
struct hpcc_ca {
	__u64 w;		/* window, bytes */
	__u64 wc;		/* reference window W^c, bytes */
	__s64 u;		/* smoothed normalised inflight U, FP_ONE */
	struct int_prev prev;	/* the previous echo */
	__u32 inc_stage;
	__u32 last_update_seq;
	__u32 min_rtt_us;	/* minimum srtt; 0 = none yet */
	__u32 flags;
};
CCLOAD_CA_FITS(struct hpcc_ca);

static __always_inline struct hpcc_params *hpcc_params(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&params, &zero);
}

static __always_inline __u32 hpcc_t(const struct sock *sk, const struct hpcc_params *p,
				    const struct hpcc_ca *ca)
{
	__u32 t, floor_us;

	if (p->base_rtt_us)
		return p->base_rtt_us;
	t = ca->min_rtt_us ?: HPCC_FALLBACK_RTT_US;
	floor_us = cc_gso_burst_us(sk, p->host_bw_bps);
	return t > floor_us ? t : floor_us;
}

static __always_inline __u64 hpcc_wai(const struct hpcc_params *p, __u32 t)
{
	__u64 eta = p->eta > FP_ONE ? FP_ONE : p->eta;

	if (p->wai_bytes)
		return p->wai_bytes;
	return (bdp_bytes(p->host_bw_bps, t) * (FP_ONE - eta) >> FP_SHIFT) / (p->expected_flows ?: 1);
}


/* u' of one hop between two records, FP_ONE-scaled, or -1. */
static __always_inline __s64 hop_inflight(__u64 now_w, __u64 prev_w, __u32 t_us,
					  __u64 min_bt, __u64 *dt_us)
{
	struct int_delta d;
	__u64 bt, q;

	if (!int_hop_delta(now_w, prev_w, &d))
		return -1;
	q = d.q_now < d.q_prev ? d.q_now : d.q_prev;
	bt = d.mbps * t_us / 8; /* B·T in bytes */
	if (bt < min_bt)
		bt = min_bt;
	*dt_us = d.dt_ns / 1000;
	/* q/(B·T) + (tx/dt)/B, with B·dt = mbps·dt/8000 bytes */
	return (__s64)(q * FP_ONE / (bt ?: 1) + d.tx_bytes * FP_ONE / ((d.mbps * d.dt_ns / 8000) ?: 1));
}

/* MEASUREINFLIGHT; returns false when the echo could not be used. */
static __always_inline bool hpcc_measure(struct hpcc_ca *ca, const struct int_sk *st,
					 __u32 t, __u64 min_bt)
{
	__s64 best = -1, u;
	__u64 best_dt = 0, dt_us = 0, tau;
	bool usable = int_pair_usable(&ca->prev, st);
	__u32 i;

	for (i = 0; i < INT_MAX_HOPS && usable; i++) {
		if (i >= st->echo_hops)
			break;
		if (int_hop_may_wrap(&ca->prev, st, i))
			continue;
		u = hop_inflight(st->echo[i], ca->prev.hop[i], t, min_bt, &dt_us);
		if (u > best) {
			best = u;
			best_dt = dt_us;
		}
	}
	int_prev_save(&ca->prev, st);
	if (best < 0)
		return false;
	tau = best_dt < t ? best_dt : t;
	ca->u = sdiv64(ca->u * (__s64)(t - tau) + clamp_s64(best, 0, HPCC_U_MAX) * (__s64)tau, t);
	return true;
}

/* COMPUTEWIND. */
static __always_inline __u64 hpcc_window(struct hpcc_ca *ca, const struct hpcc_params *p,
					 __u32 t, bool update_wc)
{
	__u64 eta = p->eta > FP_ONE ? FP_ONE : (p->eta ?: 1);
	__u64 wai = hpcc_wai(p, t), w;
	__s64 u = clamp_s64(ca->u, HPCC_U_MIN, HPCC_U_MAX);

	if ((__u64)u >= eta || ca->inc_stage >= p->max_stage) {
		w = ca->wc * eta / (__u64)u + wai;
		if (update_wc) {
			ca->inc_stage = 0;
			ca->wc = w;
		}
	} else {
		w = ca->wc + wai;
		if (update_wc) {
			ca->inc_stage++;
			ca->wc = w;
		}
	}
	return w;
}

static __always_inline void hpcc_on_ack(struct sock *sk, const struct rate_sample *rs)
{
	struct hpcc_ca *ca = inet_csk_ca(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	struct hpcc_params *p = hpcc_params();
	__u32 mss = tp->mss_cache ?: 1, srtt = tp->srtt_us >> 3, t;
	struct int_sk *st;
	bool update_wc;
	__u64 w;

	/* The SYN-ACK of an active open is processed before init() runs. */
	if (!(ca->flags & HPCC_COUNTED))
		return;
	stat_add(&stats, STAT_ACKS, 1);
	if (!p)
		return;
	st = bpf_sk_storage_get(&int_store, sk, NULL, 0);
	if (!st || !st->echo_hops) {
		if (srtt && (!ca->min_rtt_us || srtt < ca->min_rtt_us))
			ca->min_rtt_us = srtt;
		stat_add(&stats, STAT_NO_INT_ACKS, 1);
		return;
	}
	/* T: the RTT less the queueing the echo reports (see int.h). */
	int_track_base_rtt(&ca->min_rtt_us, rs->rtt_us, st);
	t = hpcc_t(sk, p, ca);
	if (st->echo_seq != ca->prev.echo_seq) {
		stat_add(&stats, STAT_INT_SAMPLES, 1);
		hpcc_measure(ca, st, t, sk->sk_gso_max_size);
	}

	update_wc = !seq_before(tp->snd_una, ca->last_update_seq);
	w = hpcc_window(ca, p, t, update_wc);
	if (update_wc)
		ca->last_update_seq = tp->snd_nxt;
	/* As PowerTCP: grow only a window that is used. */
	if (w > ca->w)
		w = max_u64(ca->w, min_u64(w, 2 * cc_used_window(sk, rs, t)));
	ca->w = max_u64(w, 2ULL * mss);
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
	stat_add(&stats, STAT_SOCK_INIT, 1);
	if (!p)
		return;
	ca->u = FP_ONE;
	ca->min_rtt_us = tp->srtt_us >> 3;
	ca->last_update_seq = tp->snd_nxt;
	t = hpcc_t(sk, p, ca);
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
