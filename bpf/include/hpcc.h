/* SPDX-License-Identifier: GPL-2.0 */
/*
 * hpcc.h: the HPCC-style CC's parameters, per-socket state and arithmetic
 * (HPCC, SIGCOMM'19, Algorithm 1: MEASUREINFLIGHT and COMPUTEWIND), apart
 * from its maps and programs (hpcc.c), so that bench/perack can time the
 * arithmetic alone. Scales: see ccload.h (U and η are FP_ONE-scaled, times
 * in µs, windows in bytes).
 */
#ifndef CCLOAD_HPCC_H
#define CCLOAD_HPCC_H

#include "ccload.h"
#include "int.h"

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

#define HPCC_FALLBACK_RTT_US 100
#define HPCC_U_MIN ((__s64)FP_ONE / 64)	/* bounds one MI step to 64·η */
#define HPCC_U_MAX (1024 * (__s64)FP_ONE)
#define HPCC_COUNTED 0x1
/*
 * U was measured from an echo since W^c last moved. W^c moves once per
 * round and only then: a round that ended on a U it has already used would
 * scale W^c by the same η/U again. With every data skb tagged every round
 * brings an echo; with one in N tagged (ccload int enable --tag nth=N) most
 * rounds on a short path do not, and compounding the stale U cost hpcc a
 * tenth of its utilisation (docs/benchmarks.md).
 */
#define HPCC_FRESH_U 0x2

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

/* T: base_rtt, or the tracked minimum no less than one GSO burst at host_bw. */
static __always_inline __u32 hpcc_t(__u32 gso_max_size, const struct hpcc_params *p,
				    const struct hpcc_ca *ca)
{
	__u32 t, floor_us;

	if (p->base_rtt_us)
		return p->base_rtt_us;
	t = ca->min_rtt_us ?: HPCC_FALLBACK_RTT_US;
	floor_us = cc_gso_burst_us(gso_max_size, p->host_bw_bps);
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
	__s64 best;
	__u64 best_dt;

	INT_WORST_HOP(&ca->prev, st, hop_inflight, t, min_bt, best, best_dt);
	if (best < 0)
		return false;
	ca->u = cc_dt_ewma(ca->u, clamp_s64(best, 0, HPCC_U_MAX), best_dt, t);
	ca->flags |= HPCC_FRESH_U;
	return true;
}

/* COMPUTEWIND; update_wc moves W^c, and uses up HPCC_FRESH_U. */
static __always_inline __u64 hpcc_window(struct hpcc_ca *ca, const struct hpcc_params *p,
					 __u32 t, bool update_wc)
{
	__u64 eta = p->eta > FP_ONE ? FP_ONE : (p->eta ?: 1);
	__u64 wai = hpcc_wai(p, t), w;
	__s64 u = clamp_s64(ca->u, HPCC_U_MIN, HPCC_U_MAX);

	if (update_wc)
		ca->flags &= ~HPCC_FRESH_U;
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

/*
 * An ACK's window: COMPUTEWIND, grown no further than twice what the flow
 * has shown it uses (as PowerTCP's), and at least two packets.
 */
static __always_inline __u64 hpcc_ack_window(struct hpcc_ca *ca, const struct hpcc_params *p,
					     __u32 t, bool update_wc, const struct cc_use *u)
{
	__u64 w = hpcc_window(ca, p, t, update_wc);

	return max_u64(cc_grow_limit(ca->w, w, u, t), 2ULL * u->mss);
}

#endif /* CCLOAD_HPCC_H */
