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
#include "onramp.h"

/* Run-time parameters, written by the loader (ccload attach/set). */
struct power_params {
	__u64 host_bw_bps;	/* host NIC bandwidth, bits/s */
	__u32 gamma;		/* EWMA weight γ, FP_ONE scale, (0, 1] */
	__u32 base_rtt_us;	/* τ; 0 = track the flow's minimum RTT */
	__u32 expected_flows;	/* N in β = host_bw·τ/N */
	__u32 beta_bytes;	/* β override in bytes; 0 = host_bw·τ/N */
	/*
	 * Derived by the loader from the fields above on every write
	 * (loader.derivePower), so that the per-ACK path multiplies where it
	 * would divide. Scales: FP_ONE and RECIP_ONE, see ccload.h.
	 */
	__u64 host_Bpus_fp;	/* host_bw in bytes per µs, FP_ONE scale */
	__u64 beta_Bpus_fp;	/* host_bw/expected_flows in bytes per µs, FP_ONE scale */
	__u64 us_per_B_recip;	/* µs per byte at host_bw, RECIP_ONE scale */
	__u32 onramp_holds;	/* θ: 1 = take On-Ramp's holds out of RTT samples (theta_rtt) */
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct power_params);
} params SEC(".maps");

CCLOAD_STATS_MAP;
CCLOAD_TRACE_MAPS;
/* On-Ramp's holds, which θ's RTT samples may leave out (theta_rtt). */
ONRAMP_HOLDS_MAP;

/*
 * What recent flows from one network namespace to one destination learned,
 * like the kernel's tcp_metrics: the delivery rate of their last round and
 * the least base RTT they tracked. A new flow to the same destination from
 * the same netns starts from that rate rather than at line rate, and from
 * that base RTT rather than from its own handshake's, which a queue may
 * have inflated (power_init); where nothing recent is known it starts at
 * line rate, as the paper's flows do. The netns is part of the
 * key so that the netns hosts of one kernel (a testbed, or pods) don't
 * share a history that separate hosts wouldn't have.
 */
struct power_hist_key {
	__u64 netns;		/* the sender's netns cookie */
	__u32 daddr[4];		/* destination; IPv4 as ::ffff:a.b.c.d */
};

struct power_hist {
	__u64 rate_Bps;		/* delivery rate of the last round, bytes/s */
	__u64 stamp_ns;		/* when it was measured, bpf_ktime_get_ns() */
	__u32 min_rtt_us;	/* the least base RTT recent flows tracked; 0 = none */
	__u32 pad;
};

/* Entries older than this are ignored: the path may have changed since. */
#define POWER_HIST_MAX_AGE_NS (500ULL * 1000 * 1000)

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct power_hist_key);
	__type(value, struct power_hist);
} power_hist SEC(".maps");

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
	__u32 cwnd;		/* current window, bytes */
	__u32 cwnd_old;		/* window set at the previous update, bytes */
	__s64 power;		/* smoothed normalised power Γ, FP_ONE */
	__u32 prev_ack_us;	/* θ: time of the previous power update
				 * (tcp_mstamp, low 32 bits) */
	__u32 prev_rtt_us;	/* θ: mean RTT of the round before it */
	__u32 min_rtt_us;	/* base RTT: least RTT sample seen; 0 = none yet */
	__u32 last_update_seq;	/* θ: snd_nxt at the previous window update;
				 * INT: snd_nxt when cwnd_old was remembered */
	__u32 flags;
	__u32 rtt_sum_us;	/* θ: sum of this round's RTT samples */
	__u32 rtt_n;		/* θ: how many there were */
	/* PowerTCP (INT) only. */
	struct int_prev prev;	/* the previous echo */
	__u32 old_stamp_us;	/* when cwnd_old was remembered (tcp_mstamp, low bits) */
	__u32 hist_us;		/* when power_hist_record last wrote (tcp_mstamp, low bits) */
};
CCLOAD_CA_FITS(struct power_ca);

static __always_inline struct power_params *power_params(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&params, &zero);
}


/*
 * The floor of a tracked τ: the time one GSO burst takes at host_bw (see
 * cc_gso_burst_us, which divides where this multiplies).
 */
static __always_inline __u32 power_burst_us(__u32 gso_max_size, const struct power_params *p)
{
	return ((__u64)gso_max_size * p->us_per_B_recip) >> RECIP_SHIFT;
}

/* host_bw·τ in bytes: the window that sends at host_bw for τ µs. */
static __always_inline __u64 power_bdp(const struct power_params *p, __u32 tau)
{
	return (p->host_Bpus_fp * tau) >> FP_SHIFT;
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


/* The history key of sk's flow: its netns and its destination. */
static __always_inline void power_hist_key_of(const struct sock *sk, struct power_hist_key *k)
{
	__builtin_memset(k, 0, sizeof(*k));
	k->netns = sk->__sk_common.skc_net.net->net_cookie;
	if (sk->__sk_common.skc_family == AF_INET6) {
		k->daddr[0] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[0];
		k->daddr[1] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[1];
		k->daddr[2] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[2];
		k->daddr[3] = sk->__sk_common.skc_v6_daddr.in6_u.u6_addr32[3];
	} else {
		k->daddr[2] = __builtin_bswap32(0xffff);
		k->daddr[3] = sk->__sk_common.skc_daddr;
	}
}

/* The fresh history entry of sk's path, or NULL. */
static __always_inline struct power_hist *power_hist_of(const struct sock *sk)
{
	struct power_hist_key k;
	struct power_hist *h;

	power_hist_key_of(sk, &k);
	h = bpf_map_lookup_elem(&power_hist, &k);
	if (!h || bpf_ktime_get_ns() - h->stamp_ns > POWER_HIST_MAX_AGE_NS)
		return NULL;
	return h;
}

/*
 * A new flow's first window: line (host_bw·τ) unless a recent flow to the
 * same destination from the same netns delivered less, in which case that
 * rate times τ, but no less than TCP's initial window of ten segments.
 */
static __always_inline __u64 power_start_window(const struct sock *sk, const struct power_hist *h,
						__u64 line, __u32 tau)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	__u64 w, floor = 10ULL * (tp->mss_cache ?: 1);

	if (!h)
		return line;
	stat_add(&stats, STAT_HIST_STARTS, 1);
	w = h->rate_Bps * tau / USEC_PER_SEC;
	return w < floor ? floor : (w < line ? w : line);
}

/*
 * How often a flow records its rate: an LRU hash update costs several times
 * a whole round's arithmetic, so it is spread over many rounds.
 */
#define POWER_HIST_EVERY_US 10000

/*
 * Records the delivery rate of the round that rs ends, for new flows, at
 * most once per POWER_HIST_EVERY_US.
 */
static __always_inline void power_hist_record(const struct sock *sk, struct power_ca *ca,
					      const struct rate_sample *rs)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	struct power_hist_key k;
	struct power_hist h, *old;

	if (rs->delivered <= 0 || rs->interval_us <= 0 ||
	    (__u32)tp->tcp_mstamp - ca->hist_us < POWER_HIST_EVERY_US)
		return;
	ca->hist_us = (__u32)tp->tcp_mstamp;
	h.rate_Bps = (__u64)rs->delivered * (tp->mss_cache ?: 1) * USEC_PER_SEC / (__u64)rs->interval_us;
	h.stamp_ns = bpf_ktime_get_ns();
	h.min_rtt_us = ca->min_rtt_us;
	h.pad = 0;
	power_hist_key_of(sk, &k);
	old = bpf_map_lookup_elem(&power_hist, &k);
	if (old && h.stamp_ns - old->stamp_ns < POWER_HIST_MAX_AGE_NS && old->min_rtt_us &&
	    (!h.min_rtt_us || old->min_rtt_us < h.min_rtt_us))
		h.min_rtt_us = old->min_rtt_us;
	bpf_map_update_elem(&power_hist, &k, &h, BPF_ANY);
}

static __always_inline void power_init(struct sock *sk)
{
	struct power_ca *ca = inet_csk_ca(sk);
	struct tcp_sock *tp = tcp_sk(sk);
	struct power_params *p = power_params();
	struct power_hist *h;
	__u32 tau;
	__u64 cwnd;

	__builtin_memset(ca, 0, sizeof(*ca));
	ca->flags = POWER_COUNTED;
	CC_COUNT_SOCK_INIT();
	if (!p)
		return;

	ca->power = FP_ONE;
	ca->last_update_seq = tp->snd_nxt;

	/*
	 * The first window's τ: base_rtt, or the least base RTT recent flows
	 * on this path tracked, or the handshake's RTT.
	 */
	h = power_hist_of(sk);
	if (h && h->min_rtt_us)
		ca->min_rtt_us = h->min_rtt_us;
	tau = p->base_rtt_us;
	if (!tau) {
		__u32 floor_us = power_burst_us(sk->sk_gso_max_size, p);

		tau = ca->min_rtt_us ?: (tp->srtt_us >> 3) ?: POWER_FALLBACK_RTT_US;
		if (tau < floor_us)
			tau = floor_us;
	}
	cwnd = power_start_window(sk, h, power_bdp(p, tau), tau);
	ca->cwnd = cwnd;
	ca->cwnd_old = cwnd;

	sk->sk_pacing_status = SK_PACING_NEEDED;
	cc_set_window(sk, cwnd, tau);
}

/*
 * Tracks the base RTT when none is configured: the least RTT sample the
 * flow has seen. Every flow on a path can see that minimum, whenever it
 * joined: the queue empties now and then, if only for a packet. The
 * minimum smoothed RTT, used before, could not: a flow that joined while
 * others held a standing queue kept an srtt inflated by it, and with it a
 * larger τ, β and cap than the flows before it, and took two to three
 * times their share for as long as it ran (docs/measurements.md). A few
 * ACKs on virtual links come back in microseconds; the GSO floor of τ
 * (power_tau) keeps such a sample from shrinking the window.
 */
static __always_inline void power_track_base_rtt(struct power_ca *ca, __u32 rtt_us)
{
	cc_track_min(&ca->min_rtt_us, rtt_us);
}

/*
 * θ-PowerTCP's power, once per round, from the round's RTT samples: their
 * mean RTT and its gradient against the previous round's,
 *     Γ_norm = (dRTT/dt + 1) · RTT / τ,
 * smoothed in with weight Δt/τ, Δt = min(t − t_prev, τ). A per-ACK
 * gradient would compare ACKs microseconds apart, whose RTTs differ by
 * scheduling noise as much as by queueing; over a round the noise
 * averages out, and each ACK costs only two additions.
 */
static __always_inline void theta_round_power(struct power_ca *ca, __u32 now, __u32 tau)
{
	__u32 rtt, dt;
	__s64 grad, sample;

	if (!ca->rtt_n)
		return;
	rtt = ca->rtt_n == 1 ? ca->rtt_sum_us : ca->rtt_sum_us / ca->rtt_n;
	ca->rtt_sum_us = 0;
	ca->rtt_n = 0;
	dt = now - ca->prev_ack_us;
	if (ca->prev_rtt_us && dt && dt < POWER_RTT_MAX_US) {
		grad = sdiv64(((__s64)rtt - (__s64)ca->prev_rtt_us) * (__s64)FP_ONE, dt);
		grad = clamp_s64(grad, -POWER_GRAD_MAX, POWER_GRAD_MAX);
		sample = sdiv64((grad + (__s64)FP_ONE) * (__s64)rtt, tau);
		sample = clamp_s64(sample, -POWER_SAMPLE_MAX, POWER_SAMPLE_MAX);

		ca->power = clamp_s64(cc_dt_ewma(ca->power, sample, dt, tau), POWER_MIN, POWER_MAX);
	}
	ca->prev_rtt_us = rtt;
	ca->prev_ack_us = now;
}

/* PowerTCP's power from INT (Algorithm 1, NORMPOWER), for powertcp. */

/*
 * The τ in powertcp's β = host_bw·τ/N: base_rtt, or the base RTT INT
 * measured (the RTT less the queueing the echo reports), without the GSO
 * floor that τ has elsewhere. At equilibrium the queue holds about Σβ
 * over the flows, and the floor, one GSO burst at host_bw (524 µs at
 * 1 Gbit/s), can exceed the path's RTT many times over: with it β alone
 * kept a standing queue of about host_bw·524 µs. power_window keeps β at
 * least one MSS.
 */
static __always_inline __u32 power_int_beta_tau(const struct power_params *p,
						 const struct power_ca *ca, __u32 tau)
{
	return p->base_rtt_us ?: (ca->min_rtt_us ?: tau);
}

#define POWER_CURRENT_MAX (16 * (__s64)FP_ONE)

/*
 * Normalised power of one hop between two of its records, FP_ONE-scaled,
 * or -1 when the pair says nothing. *dt_us gets the time between them.
 */
static __always_inline __s64 hop_power(__u64 now_w, __u64 prev_w, __u32 tau_us,
				       __u64 min_bdp, __u64 *dt_us)
{
	struct int_delta d;
	__u64 bdp, denom;
	__s64 current, voltage;

	if (!int_hop_delta(now_w, prev_w, &d))
		return -1;
	/* λ/b: bytes that arrived in dt over the bytes the link can send in dt. */
	denom = d.mbps * d.dt_ns / 8000; /* b·dt in bytes: Mbit/s · ns / 8000 */
	current = sdiv64(((__s64)d.q_now - (__s64)d.q_prev + (__s64)d.tx_bytes) * (__s64)FP_ONE,
			 denom ?: 1);
	current = clamp_s64(current, -POWER_CURRENT_MAX, POWER_CURRENT_MAX);

	/*
	 * v/(b·τ): queue plus BDP over the BDP. The BDP is at least one GSO
	 * packet: a hop that forwards whole GSO packets (veth, a software
	 * router) cannot keep its link busy with less queued, so a smaller
	 * BDP would read that packet as congestion.
	 */
	bdp = d.mbps * tau_us / 8; /* b·τ in bytes */
	if (bdp < min_bdp)
		bdp = min_bdp;
	voltage = (__s64)((d.q_now + bdp) * FP_ONE / (bdp ?: 1));
	voltage = clamp_s64(voltage, 0, POWER_SAMPLE_MAX);

	*dt_us = d.dt_ns / 1000;
	return (current * voltage) >> FP_SHIFT;
}

/*
 * NORMPOWER over the hops of a new echo. Returns false when it could not
 * be used (first echo, a changed path, or a gap that may have wrapped).
 */
static __always_inline bool int_power(struct power_ca *ca, const struct int_sk *st,
				      __u32 tau, __u64 min_bdp)
{
	__s64 best, sample;
	__u64 best_dt;

	INT_WORST_HOP(&ca->prev, st, hop_power, tau, min_bdp, best, best_dt);
	if (best < 0)
		return false;

	sample = clamp_s64(best, 0, POWER_SAMPLE_MAX);
	ca->power = clamp_s64(cc_dt_ewma(ca->power, sample, best_dt, tau), POWER_MIN, POWER_MAX);
	return true;
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
 * Folds an ACK's RTT sample into the round's (θ-PowerTCP, Algorithm 2,
 * NORMPOWER, evaluated once per round by theta_round_power) and into the
 * base RTT. Returns whether the sample was usable.
 */
static __always_inline bool theta_fold_rtt(struct power_ca *ca, long rtt)
{
	if (rtt <= 0 || rtt >= POWER_RTT_MAX_US)
		return false;
	power_track_base_rtt(ca, rtt);
	if (ca->rtt_sum_us + (__u32)rtt > ca->rtt_sum_us) {
		ca->rtt_sum_us += rtt;
		ca->rtt_n++;
	}
	return true;
}

/*
 * UPDATEWINDOW: cwnd = γ·(cwnd_old/Γ + β) + (1−γ)·cwnd, in bytes, from the
 * socket's state alone (u: what the ACK showed of the flow's use), with
 * β = beta_bytes or host_bw·beta_tau/N, at least one MSS. The caller
 * decides how often (θ: once per RTT; INT: per ACK), when cwnd_old moves
 * on, and beta_tau (θ: τ; INT: power_int_beta_tau).
 */
static __always_inline __u64 power_window(const struct power_ca *ca, const struct power_params *p,
					  __u32 tau, __u32 beta_tau, const struct cc_use *u)
{
	__u64 beta, target, gamma, cwnd;

	beta = p->beta_bytes;
	if (!beta)
		beta = max_u64((p->beta_Bpus_fp * beta_tau) >> FP_SHIFT, u->mss); /* host_bw·τ/N */
	gamma = p->gamma > FP_ONE ? FP_ONE : p->gamma;

	target = ca->cwnd_old * FP_ONE / (__u64)ca->power + beta;
	cwnd = (gamma * target + (FP_ONE - gamma) * ca->cwnd) >> FP_SHIFT;
	/*
	 * Grow only a window that is used (cc_used_bytes): a flow held back
	 * by the application or the CPU sees low RTTs and Γ < 1, and its
	 * window would otherwise double every RTT without bound.
	 */
	cwnd = cc_grow_limit(ca->cwnd, cwnd, u, tau);
	/*
	 * No more than the host can send in τ: paced at cwnd/τ, a larger
	 * window would ask for more than host_bw, and could only become
	 * queue. At the same host_bw and base_rtt this bounds the standing
	 * queue at host_bw·τ less the path's BDP.
	 */
	cwnd = min_u64(cwnd, power_bdp(p, tau));
	return max_u64(cwnd, 2ULL * u->mss);
}

/* power_window, written to the socket: window and pacing at cwnd/τ. */
static __always_inline void power_update_window(struct sock *sk, struct power_ca *ca,
						const struct power_params *p,
						const struct rate_sample *rs, __u32 tau, __u32 beta_tau)
{
	struct cc_use u;

	cc_use_of(sk, rs, &u);
	ca->cwnd = power_window(ca, p, tau, beta_tau, &u);
	stat_add(&stats, STAT_CWND_UPDATES, 1);
	cc_set_window(sk, ca->cwnd, tau);
}

/*
 * The ACK's RTT sample, with onramp_holds set without the time On-Ramp held
 * its segment back (onramp.h, struct onramp_holds). By default θ takes the
 * sample as TCP does, hold included, and so backs off for a pause as for a
 * queue, as On-Ramp's paper has its CCs do. With onramp_holds, θ leaves
 * the transient to On-Ramp: a corrected sample never goes below the
 * flow's base RTT, so that τ does not move on account of it, and one
 * within 1.5 times the base RTT is taken as it is, without the lookup
 * (what hold it may carry is under half a base RTT).
 */
static __always_inline long theta_rtt(struct sock *sk, const struct power_ca *ca, const struct power_params *p,
				      long rtt)
{
	struct onramp_holds *h;
	__u64 held;

	if (!p->onramp_holds || rtt <= (long)(ca->min_rtt_us + (ca->min_rtt_us >> 1)))
		return rtt;
	h = bpf_sk_storage_get(&onramp_holds, sk, NULL, 0);
	if (!h)
		return rtt;
	held = onramp_held_us(h, tcp_sk(sk)->tcp_mstamp - (__u64)rtt);
	if (!held)
		return rtt;
	stat_add(&stats, STAT_RTT_HELD, 1);
	rtt = held < (__u64)rtt ? rtt - (long)held : 0;
	return rtt > (long)ca->min_rtt_us ? rtt : (long)ca->min_rtt_us;
}

/*
 * θ-PowerTCP's ACK after power_ack_begin: the RTT sample into the round's
 * sums; once per round (when the ACK covers what was sent at the previous
 * update), power, window and cwnd_old (Algorithm 2), and the round's
 * delivery rate into the history for new flows.
 */
static __always_inline void theta_ack(struct sock *sk, struct power_ca *ca, const struct power_params *p,
				      const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	long rtt = theta_rtt(sk, ca, p, rs->rtt_us);

	if (theta_fold_rtt(ca, rtt))
		stat_add(&stats, STAT_RTT_SAMPLES, 1);
	if (!seq_before(tp->snd_una, ca->last_update_seq)) {
		__u32 tau = power_tau(p, ca, power_burst_us(sk->sk_gso_max_size, p));

		theta_round_power(ca, (__u32)tp->tcp_mstamp, tau);
		power_update_window(sk, ca, p, rs, tau, tau);
		ca->cwnd_old = ca->cwnd;
		ca->last_update_seq = tp->snd_nxt;
		power_hist_record(sk, ca, rs);
	}
	TRACE_ACK(sk, ca->cwnd, ca->power, 0, rtt > 0 ? rtt : 0, TRACE_MODE_RTT);
}

/* θ-PowerTCP's ACK handler. */
static __always_inline void theta_on_ack(struct sock *sk, const struct rate_sample *rs)
{
	struct power_ca *ca = inet_csk_ca(sk);
	struct power_params *p = power_ack_begin(sk, ca);

	if (p)
		theta_ack(sk, ca, p, rs);
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
