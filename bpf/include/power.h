/* SPDX-License-Identifier: GPL-2.0 */
/*
 * power.h: what θ-PowerTCP and PowerTCP share (PowerTCP, NSDI'22): the
 * parameters, the per-socket state, the window law
 *     cwnd = γ·(cwnd_old/Γ + β) + (1−γ)·cwnd,  rate = cwnd/τ,
 * the RTT-based power of θ-PowerTCP (Appendix D), and the struct_ops
 * programs around them. Each including object gets its own params and
 * stats maps. Scales: see ccload.h (Γ and γ are FP_ONE-scaled, times in
 * µs, windows in bytes).
 */
#ifndef CCLOAD_POWER_H
#define CCLOAD_POWER_H

#include "ccload.h"
#include "int.h"

/* Run-time parameters, written by the loader (ccload attach/set). */
struct power_params {
	__u64 host_bw_bps;	/* host NIC bandwidth, bits/s */
	__u32 gamma;		/* EWMA weight γ, FP_ONE scale, (0, 1] */
	__u32 base_rtt_us;	/* τ; 0 = track the flow's minimum RTT */
	__u32 expected_flows;	/* N in β = host_bw·τ/N */
	__u32 beta_bytes;	/* β override in bytes; 0 = host_bw·τ/N */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct power_params);
} params SEC(".maps");

CCLOAD_STATS_MAP;
CCLOAD_TRACE_MAPS;

/* Used until a flow has an RTT sample and no base_rtt is configured. */
#define POWER_FALLBACK_RTT_US 100
/* Bounds that keep the fixed-point arithmetic inside 64 bits. */
#define POWER_GRAD_MAX (16 * (__s64)FP_ONE)
#define POWER_SAMPLE_MAX (1024 * (__s64)FP_ONE)
#define POWER_RTT_MAX_US (1U << 24)
/*
 * The smoothed power is kept in [1/2, 1024]. The lower bound limits growth
 * to doubling per RTT (cwnd_old / Γ), the same as slow start.
 */
#define POWER_MIN ((__s64)FP_ONE / 2)
#define POWER_MAX (1024 * (__s64)FP_ONE)

#define POWER_RESYNC 0x1 /* adopt the kernel's window on the next ACK */
#define POWER_COUNTED 0x2 /* counted in sock_init; release() counts it out */

/* Per-socket state in icsk_ca_priv (CCLOAD_CA_FITS checks that it fits). */
struct power_ca {
	__u64 cwnd;		/* current window, bytes */
	__u64 cwnd_old;		/* window set at the previous update, bytes */
	__s64 power;		/* smoothed normalised power Γ, FP_ONE */
	__u64 prev_ack_us;	/* time of the previous RTT sample */
	__u32 prev_rtt_us;	/* the previous RTT sample */
	__u32 min_rtt_us;	/* minimum srtt seen; 0 = none yet */
	__u32 last_update_seq;	/* θ: snd_nxt at the previous window update;
				 * INT: snd_nxt when cwnd_old was remembered */
	__u32 flags;
	/* PowerTCP (INT) only. */
	struct int_prev prev;	/* the previous echo */
	__u32 old_stamp_us;	/* when cwnd_old was remembered (tcp_mstamp, low bits) */
};
CCLOAD_CA_FITS(struct power_ca);

static __always_inline struct power_params *power_params(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&params, &zero);
}


/* The floor of a tracked τ: one GSO burst at host_bw (cc_gso_burst_us). */
static __always_inline __u32 power_burst_us(const struct sock *sk,
					    const struct power_params *p)
{
	return cc_gso_burst_us(sk, p->host_bw_bps);
}

static __always_inline __u32 power_tau(const struct power_params *p,
				       const struct power_ca *ca, __u32 floor_us)
{
	__u32 tau;

	if (p->base_rtt_us)
		return p->base_rtt_us;
	tau = ca->min_rtt_us ?: POWER_FALLBACK_RTT_US;
	return tau > floor_us ? tau : floor_us;
}


static __always_inline void power_init(struct sock *sk)
{
	struct power_ca *ca = inet_csk_ca(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	struct power_params *p = power_params();
	__u32 tau;
	__u64 cwnd;

	__builtin_memset(ca, 0, sizeof(*ca));
	ca->flags = POWER_COUNTED;
	stat_add(&stats, STAT_SOCK_INIT, 1);
	if (!p)
		return;

	ca->power = FP_ONE;
	ca->last_update_seq = tp->snd_nxt;

	/* The handshake gave an RTT estimate: use it for the first window. */
	tau = p->base_rtt_us;
	if (!tau) {
		tau = (tp->srtt_us >> 3) ?: POWER_FALLBACK_RTT_US;
		if (tau < power_burst_us(sk, p))
			tau = power_burst_us(sk, p);
	}
	cwnd = bdp_bytes(p->host_bw_bps, tau);
	ca->cwnd = cwnd;
	ca->cwnd_old = cwnd;

	sk->sk_pacing_status = SK_PACING_NEEDED;
	cc_set_window(sk, cwnd, tau);
}

/*
 * Tracks the base RTT when none is configured: the minimum of the kernel's
 * smoothed RTT (srtt, an EWMA with gain 1/8 over per-ACK samples). Single
 * samples are not used for this: on virtual and lightly loaded links some
 * ACKs return in a few microseconds, far below the RTT any full window
 * sees without queueing, and a τ that small shrinks β and the window to a
 * couple of packets.
 */
static __always_inline void power_track_base_rtt(struct power_ca *ca,
						 const struct tcp_sock *tp)
{
	__u32 srtt = tp->srtt_us >> 3;

	if (srtt && (!ca->min_rtt_us || srtt < ca->min_rtt_us))
		ca->min_rtt_us = srtt;
}

/* Updates the smoothed normalised power from one per-ACK RTT sample. */
static __always_inline void theta_rtt_power(struct power_ca *ca,
					       const struct power_params *p,
					       __u32 rtt, __u64 now, __u32 tau)
{
	__u64 dt, dtc;
	__s64 grad, sample;

	if (ca->prev_ack_us && now > ca->prev_ack_us) {
		dt = now - ca->prev_ack_us;
		grad = sdiv64(((__s64)rtt - (__s64)ca->prev_rtt_us) * (__s64)FP_ONE, dt);
		grad = clamp_s64(grad, -POWER_GRAD_MAX, POWER_GRAD_MAX);
		sample = sdiv64((grad + (__s64)FP_ONE) * (__s64)rtt, tau);
		sample = clamp_s64(sample, -POWER_SAMPLE_MAX, POWER_SAMPLE_MAX);

		dtc = dt < tau ? dt : tau;
		ca->power = sdiv64(ca->power * (__s64)(tau - dtc) + sample * (__s64)dtc, tau);
		ca->power = clamp_s64(ca->power, POWER_MIN, POWER_MAX);
	} else if (ca->prev_ack_us) {
		return; /* same microsecond: no gradient, keep the previous point */
	}
	ca->prev_rtt_us = rtt;
	ca->prev_ack_us = now;
}

/*
 * Starts an ACK: counts it, and adopts the kernel's window after an RTO.
 * Returns the parameters, or NULL when there is nothing to do: init() has
 * not run yet, or there are no parameters (never, in practice).
 */
static __always_inline struct power_params *power_ack_begin(struct sock *sk, struct power_ca *ca)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct power_params *p = power_params();

	/*
	 * An active open's SYN-ACK is ACK-processed before the kernel calls
	 * init(): nothing to control yet (and no window to divide).
	 */
	if (!(ca->flags & POWER_COUNTED))
		return NULL;
	stat_add(&stats, STAT_ACKS, 1);
	if (p && (ca->flags & POWER_RESYNC)) {
		ca->cwnd = (__u64)tp->snd_cwnd * (tp->mss_cache ?: 1);
		ca->cwnd_old = ca->cwnd;
		ca->flags &= ~POWER_RESYNC;
	}
	return p;
}

/*
 * θ-PowerTCP's power (Algorithm 2, NORMPOWER) from the ACK's RTT sample.
 * Returns false when the ACK has none.
 */
static __always_inline bool theta_ack_power(struct sock *sk, struct power_ca *ca,
					    const struct power_params *p,
					    const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	long rtt = rs->rtt_us;

	if (rtt <= 0 || rtt >= POWER_RTT_MAX_US)
		return false;
	stat_add(&stats, STAT_RTT_SAMPLES, 1);
	power_track_base_rtt(ca, tp);
	theta_rtt_power(ca, p, rtt, tp->tcp_mstamp, power_tau(p, ca, power_burst_us(sk, p)));
	return true;
}

/*
 * UPDATEWINDOW: cwnd = γ·(cwnd_old/Γ + β) + (1−γ)·cwnd, then paces at
 * cwnd/τ. The caller decides how often (θ: once per RTT; INT: per ACK)
 * and when cwnd_old moves on.
 */
static __always_inline void power_update_window(struct sock *sk, struct power_ca *ca,
						const struct power_params *p,
						const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 mss = tp->mss_cache ?: 1;
	__u32 tau = power_tau(p, ca, power_burst_us(sk, p));
	__u64 beta, target, gamma, cwnd;

	beta = p->beta_bytes;
	if (!beta)
		beta = bdp_bytes(p->host_bw_bps, tau) / (p->expected_flows ?: 1);
	gamma = p->gamma > FP_ONE ? FP_ONE : p->gamma;

	target = ca->cwnd_old * FP_ONE / (__u64)ca->power + beta;
	cwnd = (gamma * target + (FP_ONE - gamma) * ca->cwnd) >> FP_SHIFT;
	/*
	 * Grow only a window that is used (cc_used_window): a flow held back
	 * by the application or the CPU sees low RTTs and Γ < 1, and its
	 * window would otherwise double every RTT without bound.
	 */
	if (cwnd > ca->cwnd)
		cwnd = max_u64(ca->cwnd, min_u64(cwnd, 2 * cc_used_window(sk, rs, tau)));
	cwnd = max_u64(cwnd, 2ULL * mss);

	ca->cwnd = cwnd;
	stat_add(&stats, STAT_CWND_UPDATES, 1);
	cc_set_window(sk, cwnd, tau);
}

/* θ-PowerTCP's ACK: power per ACK, window once per RTT (Algorithm 2). */
static __always_inline void theta_on_ack(struct sock *sk, const struct rate_sample *rs)
{
	struct power_ca *ca = inet_csk_ca(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	struct power_params *p = power_ack_begin(sk, ca);

	if (!p)
		return;
	theta_ack_power(sk, ca, p, rs);
	if (!seq_before(tp->snd_una, ca->last_update_seq)) {
		power_update_window(sk, ca, p, rs);
		ca->cwnd_old = ca->cwnd;
		ca->last_update_seq = tp->snd_nxt;
	}
	TRACE_ACK(sk, ca->cwnd, ca->power, 0, rs->rtt_us > 0 ? rs->rtt_us : 0, TRACE_MODE_RTT);
}

static __always_inline void power_set_state(struct sock *sk, __u8 new_state)
{
	struct power_ca *ca = inet_csk_ca(sk);

	if (new_state == TCP_CA_Recovery || new_state == TCP_CA_Loss)
		stat_add(&stats, STAT_LOSS_EVENTS, 1);
	/* After an RTO the kernel has reset the window; start from it. */
	if (new_state == TCP_CA_Loss)
		ca->flags |= POWER_RESYNC;
}

/* Counts out only sockets init() counted in; see dctcp_release. */
static __always_inline void power_release(struct sock *sk)
{
	struct power_ca *ca = inet_csk_ca(sk);

	if (ca->flags & POWER_COUNTED) {
		ca->flags &= ~POWER_COUNTED;
		stat_add(&stats, STAT_SOCK_RELEASE, 1);
	}
}

/*
 * The struct_ops programs of a PowerTCP variant named NAME whose ACK
 * handler is ON_ACK(sk, rs). cong_control comes in both prototypes:
 * NAME_cong_control (kernels >= 6.10) and NAME_cong_control_legacy
 * (before); the loader loads the one that matches the kernel's BTF.
 *
 * Loss is not a control signal: ssthresh returns the current ssthresh, so
 * the kernel does not cut the window when recovery ends.
 */
#define POWER_STRUCT_OPS(NAME, ON_ACK)                                         \
	SEC("struct_ops")                                                      \
	void BPF_PROG(NAME##_init, struct sock *sk) { power_init(sk); }        \
	SEC("struct_ops")                                                      \
	void BPF_PROG(NAME##_cong_control, struct sock *sk, __u32 ack, int flag, \
		      const struct rate_sample *rs) { ON_ACK(sk, rs); }        \
	SEC("struct_ops")                                                      \
	void BPF_PROG(NAME##_cong_control_legacy, struct sock *sk,             \
		      const struct rate_sample *rs) { ON_ACK(sk, rs); }        \
	SEC("struct_ops")                                                      \
	void BPF_PROG(NAME##_set_state, struct sock *sk, __u8 new_state)       \
	{ power_set_state(sk, new_state); }                                    \
	SEC("struct_ops")                                                      \
	__u32 BPF_PROG(NAME##_ssthresh, struct sock *sk)                       \
	{ return tcp_sk(sk)->snd_ssthresh; }                                   \
	SEC("struct_ops")                                                      \
	__u32 BPF_PROG(NAME##_undo_cwnd, struct sock *sk)                      \
	{ return tcp_sk(sk)->snd_cwnd; }                                       \
	SEC("struct_ops")                                                      \
	void BPF_PROG(NAME##_release, struct sock *sk) { power_release(sk); }  \
	SEC(".struct_ops.link")                                                \
	struct tcp_congestion_ops NAME = {                                     \
		.init = (void *)NAME##_init,                                   \
		.release = (void *)NAME##_release,                             \
		.cong_control = (void *)NAME##_cong_control,                   \
		.set_state = (void *)NAME##_set_state,                         \
		.ssthresh = (void *)NAME##_ssthresh,                           \
		.undo_cwnd = (void *)NAME##_undo_cwnd,                         \
		.flags = CCLOAD_CC_FLAGS,                                      \
		.name = #NAME,                                                 \
	}

#endif /* CCLOAD_POWER_H */
