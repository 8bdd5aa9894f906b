// SPDX-License-Identifier: GPL-2.0
/*
 * theta_powertcp: θ-PowerTCP, the RTT-only variant of PowerTCP
 * (PowerTCP, NSDI'22, Appendix D, Algorithm 2; parameters from §3.3).
 *
 * Per ACK with an RTT sample:
 *     dθ/dt   = (RTT - prevRTT) / (t - t_prev)
 *     Γ_norm  = (dθ/dt + 1) · RTT / τ
 *     Γ       = (Γ · (τ - Δt) + Γ_norm · Δt) / τ,   Δt = min(t - t_prev, τ)
 * Once per RTT (when the ACK covers snd_nxt of the previous update):
 *     cwnd    = γ · (cwnd_old / Γ + β) + (1 - γ) · cwnd
 *     rate    = cwnd / τ
 * where cwnd_old is the window remembered at the previous update, i.e.
 * the window the acknowledged data was sent with.
 *
 * τ is the base_rtt parameter or, when it is 0, the flow's minimum smoothed
 * RTT (see theta_track_base_rtt), but no less than the time one GSO burst
 * takes at host_bw (see theta_burst_us).
 * β = host_bw · τ / expected_flows unless beta_bytes is set.
 * A flow starts at line rate: cwnd = host_bw · τ.
 *
 * Scales and units: see include/ccload.h.
 */
#include "include/ccload.h"

char _license[] SEC("license") = "GPL";

/* Run-time parameters, written by the loader (ccload attach/set). */
struct theta_params {
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
	__type(value, struct theta_params);
} params SEC(".maps");

CCLOAD_STATS_MAP;

/* Used until a flow has an RTT sample and no base_rtt is configured. */
#define THETA_FALLBACK_RTT_US 100
/* Bounds that keep the fixed-point arithmetic inside 64 bits. */
#define THETA_GRAD_MAX (16 * (__s64)FP_ONE)
#define THETA_SAMPLE_MAX (1024 * (__s64)FP_ONE)
#define THETA_RTT_MAX_US (1U << 24)
/*
 * The smoothed power is kept in [1/2, 1024]. The lower bound limits growth
 * to doubling per RTT (cwnd_old / Γ), the same as slow start.
 */
#define THETA_POWER_MIN ((__s64)FP_ONE / 2)
#define THETA_POWER_MAX (1024 * (__s64)FP_ONE)

#define THETA_RESYNC 0x1 /* adopt the kernel's window on the next ACK */
#define THETA_COUNTED 0x2 /* counted in sock_init; release() counts it out */

/* Per-socket state in icsk_ca_priv (at most 104 bytes). */
struct theta_ca {
	__u64 cwnd;		/* current window, bytes */
	__u64 cwnd_old;		/* window set at the previous update, bytes */
	__s64 power;		/* smoothed normalised power Γ, FP_ONE */
	__u64 prev_ack_us;	/* time of the previous RTT sample */
	__u32 prev_rtt_us;	/* the previous RTT sample */
	__u32 min_rtt_us;	/* minimum srtt seen; 0 = none yet */
	__u32 last_update_seq;	/* snd_nxt at the previous window update */
	__u32 flags;
};

static __always_inline __s64 sdiv64(__s64 a, __u64 b)
{
	/* BPF before cpu v4 (kernel 6.6) has no signed division. */
	if (a < 0)
		return -(__s64)((__u64)(-a) / b);
	return (__s64)((__u64)a / b);
}

static __always_inline __s64 clamp_s64(__s64 v, __s64 lo, __s64 hi)
{
	return v < lo ? lo : (v > hi ? hi : v);
}

static __always_inline struct theta_params *theta_params(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&params, &zero);
}

/* Bandwidth-delay product in bytes for bw bits/s and rtt microseconds. */
static __always_inline __u64 bdp_bytes(__u64 bw_bps, __u32 rtt_us)
{
	return (bw_bps >> 3) * rtt_us / USEC_PER_SEC;
}

/*
 * The time the host needs to send one full GSO burst at host_bw: the
 * floor of a tracked τ. A window smaller than one burst cannot keep the
 * host busy, and a flow whose window is that small sees RTTs of lone
 * packets, far below the RTT of a full window: without the floor, such a
 * flow takes the low RTT as its τ and never leaves the small window.
 */
static __always_inline __u32 theta_burst_us(const struct sock *sk,
					    const struct theta_params *p)
{
	__u64 bw = p->host_bw_bps ?: 1;

	return (__u64)sk->sk_gso_max_size * 8 * USEC_PER_SEC / bw;
}

static __always_inline __u32 theta_tau(const struct theta_params *p,
				       const struct theta_ca *ca, __u32 floor_us)
{
	__u32 tau;

	if (p->base_rtt_us)
		return p->base_rtt_us;
	tau = ca->min_rtt_us ?: THETA_FALLBACK_RTT_US;
	return tau > floor_us ? tau : floor_us;
}

/* Writes cwnd (bytes) to the socket and paces at cwnd / τ. */
static __always_inline void theta_apply(struct sock *sk, __u64 cwnd, __u32 tau)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 mss = tp->mss_cache ?: 1;
	__u64 pkts = cwnd / mss;
	__u64 rate;

	if (pkts < 2)
		pkts = 2;
	if (pkts > tp->snd_cwnd_clamp)
		pkts = tp->snd_cwnd_clamp;
	tp->snd_cwnd = pkts;

	rate = cwnd * USEC_PER_SEC / tau;
	if (rate > sk->sk_max_pacing_rate)
		rate = sk->sk_max_pacing_rate;
	sk->sk_pacing_rate = rate;
}

SEC("struct_ops")
void BPF_PROG(theta_init, struct sock *sk)
{
	struct theta_ca *ca = ca_priv(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	struct theta_params *p = theta_params();
	__u32 tau;
	__u64 cwnd;

	__builtin_memset(ca, 0, sizeof(*ca));
	ca->flags = THETA_COUNTED;
	stat_add(&stats, STAT_SOCK_INIT, 1);
	if (!p)
		return;

	ca->power = FP_ONE;
	ca->last_update_seq = tp->snd_nxt;

	/* The handshake gave an RTT estimate: use it for the first window. */
	tau = p->base_rtt_us;
	if (!tau) {
		tau = (tp->srtt_us >> 3) ?: THETA_FALLBACK_RTT_US;
		if (tau < theta_burst_us(sk, p))
			tau = theta_burst_us(sk, p);
	}
	cwnd = bdp_bytes(p->host_bw_bps, tau);
	ca->cwnd = cwnd;
	ca->cwnd_old = cwnd;

	sk->sk_pacing_status = SK_PACING_NEEDED;
	theta_apply(sk, cwnd, tau);
}

/*
 * Tracks the base RTT when none is configured: the minimum of the kernel's
 * smoothed RTT (srtt, an EWMA with gain 1/8 over per-ACK samples). Single
 * samples are not used for this: on virtual and lightly loaded links some
 * ACKs return in a few microseconds, far below the RTT any full window
 * sees without queueing, and a τ that small shrinks β and the window to a
 * couple of packets.
 */
static __always_inline void theta_track_base_rtt(struct theta_ca *ca,
						 const struct tcp_sock *tp)
{
	__u32 srtt = tp->srtt_us >> 3;

	if (srtt && (!ca->min_rtt_us || srtt < ca->min_rtt_us))
		ca->min_rtt_us = srtt;
}

/* Updates the smoothed normalised power from one per-ACK RTT sample. */
static __always_inline void theta_update_power(struct theta_ca *ca,
					       const struct theta_params *p,
					       __u32 rtt, __u64 now, __u32 tau)
{
	__u64 dt, dtc;
	__s64 grad, sample;

	if (ca->prev_ack_us && now > ca->prev_ack_us) {
		dt = now - ca->prev_ack_us;
		grad = sdiv64(((__s64)rtt - (__s64)ca->prev_rtt_us) * (__s64)FP_ONE, dt);
		grad = clamp_s64(grad, -THETA_GRAD_MAX, THETA_GRAD_MAX);
		sample = sdiv64((grad + (__s64)FP_ONE) * (__s64)rtt, tau);
		sample = clamp_s64(sample, -THETA_SAMPLE_MAX, THETA_SAMPLE_MAX);

		dtc = dt < tau ? dt : tau;
		ca->power = sdiv64(ca->power * (__s64)(tau - dtc) + sample * (__s64)dtc, tau);
		ca->power = clamp_s64(ca->power, THETA_POWER_MIN, THETA_POWER_MAX);
	} else if (ca->prev_ack_us) {
		return; /* same microsecond: no gradient, keep the previous point */
	}
	ca->prev_rtt_us = rtt;
	ca->prev_ack_us = now;
}

static __always_inline void theta_on_ack(struct sock *sk, const struct rate_sample *rs)
{
	struct theta_ca *ca = ca_priv(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	struct theta_params *p = theta_params();
	__u64 beta, target, gamma, cwnd;
	long rtt = rs->rtt_us;
	__u32 mss = tp->mss_cache ?: 1;
	__u32 tau, floor_us;

	stat_add(&stats, STAT_ACKS, 1);
	if (!p)
		return;

	if (ca->flags & THETA_RESYNC) {
		ca->cwnd = (__u64)tp->snd_cwnd * mss;
		ca->cwnd_old = ca->cwnd;
		ca->flags &= ~THETA_RESYNC;
	}

	floor_us = theta_burst_us(sk, p);
	if (rtt > 0 && rtt < THETA_RTT_MAX_US) {
		stat_add(&stats, STAT_RTT_SAMPLES, 1);
		theta_track_base_rtt(ca, tp);
		theta_update_power(ca, p, rtt, tp->tcp_mstamp, theta_tau(p, ca, floor_us));
	}

	/* The window moves once per RTT (Algorithm 2, UPDATEWINDOW). */
	if (seq_before(tp->snd_una, ca->last_update_seq))
		return;

	tau = theta_tau(p, ca, floor_us);
	beta = p->beta_bytes;
	if (!beta)
		beta = bdp_bytes(p->host_bw_bps, tau) / (p->expected_flows ?: 1);
	gamma = p->gamma > FP_ONE ? FP_ONE : p->gamma;

	target = ca->cwnd_old * FP_ONE / (__u64)ca->power + beta;
	cwnd = (gamma * target + (FP_ONE - gamma) * ca->cwnd) >> FP_SHIFT;
	/*
	 * Grow only a window that is used: at most twice the most data in
	 * flight during the last window (tp->max_packets_out), as the kernel's
	 * own cwnd-limited test does in slow start. A flow held back by the
	 * application or the CPU sees low RTTs and Γ < 1, and its window would
	 * otherwise double every RTT without bound.
	 */
	if (cwnd > ca->cwnd)
		cwnd = max_u64(ca->cwnd, min_u64(cwnd, 2ULL * tp->max_packets_out * mss));
	cwnd = max_u64(cwnd, 2ULL * mss);

	ca->cwnd = cwnd;
	ca->cwnd_old = cwnd;
	ca->last_update_seq = tp->snd_nxt;
	stat_add(&stats, STAT_CWND_UPDATES, 1);
	theta_apply(sk, cwnd, tau);
}

/* cong_control as declared by kernels >= 6.10. */
SEC("struct_ops")
void BPF_PROG(theta_cong_control, struct sock *sk, __u32 ack, int flag,
	      const struct rate_sample *rs)
{
	theta_on_ack(sk, rs);
}

/*
 * cong_control as declared by kernels < 6.10. The loader loads exactly one
 * of the two, chosen from the running kernel's BTF (see loader/variant.go).
 */
SEC("struct_ops")
void BPF_PROG(theta_cong_control_legacy, struct sock *sk, const struct rate_sample *rs)
{
	theta_on_ack(sk, rs);
}

SEC("struct_ops")
void BPF_PROG(theta_set_state, struct sock *sk, __u8 new_state)
{
	struct theta_ca *ca = ca_priv(sk);

	if (new_state == TCP_CA_Recovery || new_state == TCP_CA_Loss)
		stat_add(&stats, STAT_LOSS_EVENTS, 1);
	/* After an RTO the kernel has reset the window; start from it. */
	if (new_state == TCP_CA_Loss)
		ca->flags |= THETA_RESYNC;
}

/*
 * Loss is not a control signal for θ-PowerTCP: returning the current
 * ssthresh keeps the kernel from cutting the window on recovery exit.
 */
SEC("struct_ops")
__u32 BPF_PROG(theta_ssthresh, struct sock *sk)
{
	return tcp_sk(sk)->snd_ssthresh;
}

SEC("struct_ops")
__u32 BPF_PROG(theta_undo_cwnd, struct sock *sk)
{
	return tcp_sk(sk)->snd_cwnd;
}

/* Counts out only sockets init() counted in; see dctcp_release. */
SEC("struct_ops")
void BPF_PROG(theta_release, struct sock *sk)
{
	struct theta_ca *ca = ca_priv(sk);

	if (ca->flags & THETA_COUNTED) {
		ca->flags &= ~THETA_COUNTED;
		stat_add(&stats, STAT_SOCK_RELEASE, 1);
	}
}

SEC(".struct_ops.link")
struct tcp_congestion_ops theta_powertcp = {
	.init = (void *)theta_init,
	.release = (void *)theta_release,
	.cong_control = (void *)theta_cong_control,
	.set_state = (void *)theta_set_state,
	.ssthresh = (void *)theta_ssthresh,
	.undo_cwnd = (void *)theta_undo_cwnd,
	.flags = CCLOAD_CC_FLAGS,
	.name = "theta_powertcp",
};
