/* SPDX-License-Identifier: GPL-2.0 */
/*
 * ccload.h: definitions shared by every ccload congestion control.
 *
 * Fixed-point scales
 * ------------------
 * BPF has no floating point, so every non-integer quantity is an integer
 * scaled by one of the factors below. This is the only place they are
 * defined; the Go loader (loader/params.go, with internal/units) converts
 * user input with the same scales, and checks them against the object's BTF
 * at load time.
 *
 *   FP_ONE (2^16)        dimensionless ratios: normalised power, the RTT
 *                        gradient d(RTT)/dt, PowerTCP's gamma, and
 *                        On-Ramp's beta and its EWMA gain (onramp.h).
 *                        1.0 == 65536.
 *   DCTCP_ALPHA_ONE      DCTCP's alpha, 1.0 == 1024, the scale the
 *   (2^10)               kernel's own tcp_dctcp uses, so the arithmetic
 *                        (and its rounding) matches it exactly.
 *   RECIP_ONE (2^32)     reciprocals the loader precomputes, so that the
 *                        per-ACK path multiplies instead of dividing
 *                        (struct power_params: µs per byte at host_bw).
 *   CLOCK_DRIFT_ONE      a clock's drift against another, ns per ns:
 *   (2^32)               1 ppm == 4295 (struct clock_offset, clock.h).
 *
 * Units that are plain integers, not scaled:
 *   time                 microseconds (us), as in tcp_sock->tcp_mstamp
 *                        and rate_sample->rtt_us; the clock map's times
 *                        and offsets are nanoseconds of CLOCK_TAI
 *                        (bpf_ktime_get_tai_ns), see clock.h;
 *   windows              bytes inside the algorithms, converted to
 *                        packets (tp->mss_cache) only when written to
 *                        tp->snd_cwnd;
 *   bandwidth            bits per second (u64) in parameters, bytes per
 *                        second in sk_pacing_rate.
 */
#ifndef CCLOAD_H
#define CCLOAD_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#define FP_SHIFT 16
#define FP_ONE (1ULL << FP_SHIFT)

#define RECIP_SHIFT 32
#define RECIP_ONE (1ULL << RECIP_SHIFT)

#define CLOCK_DRIFT_SHIFT 32
#define CLOCK_DRIFT_ONE (1ULL << CLOCK_DRIFT_SHIFT)

#define DCTCP_ALPHA_SHIFT 10
#define DCTCP_ALPHA_ONE (1U << DCTCP_ALPHA_SHIFT)

#define USEC_PER_SEC 1000000ULL

/* Not in vmlinux.h: these are #defines in the kernel headers. */
#define TCP_CONG_NON_RESTRICTED 0x1
#define TCP_CONG_NEEDS_ECN 0x2
#define TCP_ECN_OK 1
#define TCP_ECN_QUEUE_CWR 2
#define TCP_ECN_DEMAND_CWR 4
#define ICSK_ACK_TIMER 2
#define ICSK_ACK_NOW 8
#define SOL_TCP 6
#define TCP_CONGESTION 13
#define TCP_INFINITE_SSTHRESH 0x7fffffff
#define AF_INET 2
#define AF_INET6 10

/*
 * Every ccload CC sets TCP_CONG_NON_RESTRICTED: without it, selecting the
 * CC with the sysctl inside a non-init netns (a pod or container) fails
 * with EPERM.
 */
#define CCLOAD_CC_FLAGS TCP_CONG_NON_RESTRICTED

/*
 * Counters every CC keeps in its "stats" map (BPF_MAP_TYPE_PERCPU_ARRAY,
 * one u64 per key). The Go side (loader/stats.go) names them in the same
 * order. Append only: the index is the ABI.
 */
enum ccload_stat {
	STAT_SOCK_INIT = 0,	/* init() calls: sockets that picked this CC */
	STAT_SOCK_RELEASE,	/* release() calls: sockets that left it */
	STAT_ACKS,		/* ACKs the CC processed */
	STAT_RTT_SAMPLES,	/* ACKs that carried a usable RTT sample */
	STAT_CWND_UPDATES,	/* window recomputations */
	STAT_LOSS_EVENTS,	/* entries into recovery or RTO */
	STAT_ECN_CE_ACKS,	/* ACK rounds that reported CE marks (DCTCP) */
	STAT_FALLBACKS,		/* sockets handed to the fallback CC (DCTCP) */
	STAT_INT_SAMPLES,	/* ACKs that brought new INT records (PowerTCP, HPCC) */
	STAT_NO_INT_ACKS,	/* ACKs handled without INT: θ mode (PowerTCP) */
	STAT_HIST_STARTS,	/* flows that started from a recent flow's rate (PowerTCP) */
	STAT_REPAIRS,		/* windows repaired after a callback the kernel skipped (DCTCP) */
	STAT_BUILD_INITS,	/* init() calls of an object loaded with ccload_build != 0 */
	STAT_RTT_HELD,		/* RTT samples taken without On-Ramp's hold (θ-PowerTCP) */
	STAT_REF_UPDATES,	/* rounds that moved the reference window W^c (HPCC) */
	STAT_MAX,
};

/*
 * CCLOAD_STATS_MAP declares the "stats" map and ccload_build, a constant
 * the loader may set before load (0 unless it does). The loader counts the
 * constant in an object's identity (the hash in a CC's "meta" pin), so two
 * loads with different values are different builds of the CC: the upgrade
 * tests swap one in for the other and tell their sockets apart by
 * STAT_BUILD_INITS, which only a build with a non-zero value counts.
 */
#define CCLOAD_STATS_MAP                                                     \
	struct {                                                             \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);                     \
		__uint(max_entries, STAT_MAX);                               \
		__type(key, __u32);                                          \
		__type(value, __u64);                                        \
	} stats SEC(".maps");                                                \
	volatile const __u32 ccload_build = 0

/* Counts a socket into the CC (STAT_SOCK_INIT). Needs CCLOAD_STATS_MAP. */
#define CC_COUNT_SOCK_INIT()                                                 \
	do {                                                                 \
		stat_add(&stats, STAT_SOCK_INIT, 1);                         \
		if (ccload_build)                                            \
			stat_add(&stats, STAT_BUILD_INITS, 1);               \
	} while (0)

/*
 * Per-ACK trace records for `ccload trace`, written only while trace_on[0]
 * is non-zero (ccload trace sets it while it reads). The layout is the
 * ABI with loader/trace.go, which decodes it through the Go type bpf2go
 * writes from this struct: append fields only.
 */
struct cc_trace_event {
	__u64 ts_ns;		/* bpf_ktime_get_ns() */
	__u32 saddr;		/* IPv4 source address, or 0 (network order) */
	__u32 daddr;		/* IPv4 destination address, or 0 (network order) */
	__u16 sport;		/* local port, host order */
	__u16 dport;		/* remote port, host order */
	__u32 snd_cwnd;		/* packets */
	__u64 cwnd_bytes;	/* the CC's window */
	__s64 signal;		/* normalised power Γ or HPCC's U, FP_ONE scale */
	__u32 qlen_bytes;	/* largest hop queue in the INT echo; 0 without INT */
	__u32 rtt_us;		/* the ACK's RTT sample; 0 if none */
	__u32 pacing_mbps;	/* sk_pacing_rate in Mbit/s */
	__u32 mode;		/* TRACE_MODE_* */
};

#define TRACE_MODE_RTT 1	/* RTT-based (θ-PowerTCP, or PowerTCP without INT) */
#define TRACE_MODE_INT 2	/* INT-based */

#define CCLOAD_TRACE_MAPS                                                    \
	struct {                                                             \
		__uint(type, BPF_MAP_TYPE_RINGBUF);                          \
		__uint(max_entries, 1 << 20);                                \
	} events SEC(".maps");                                               \
	struct {                                                             \
		__uint(type, BPF_MAP_TYPE_ARRAY);                            \
		__uint(max_entries, 1);                                      \
		__type(key, __u32);                                          \
		__type(value, __u32);                                        \
	} trace_on SEC(".maps");                                             \
	/* Unused: it puts struct cc_trace_event into the object's BTF,   \
	 * from which bpf2go writes the Go type of the record. */         \
	const struct cc_trace_event *cc_trace_event_btf __attribute__((unused))

/* Emits a trace record if tracing is on. Needs CCLOAD_TRACE_MAPS. */
#define TRACE_ACK(sk, cwnd, sig, qlen, rtt, md)                              \
	do {                                                                 \
		__u32 __z = 0, *__on = bpf_map_lookup_elem(&trace_on, &__z); \
		struct cc_trace_event *__e;                                     \
		if (!__on || !*__on)                                         \
			break;                                               \
		__e = bpf_ringbuf_reserve(&events, sizeof(*__e), 0);         \
		if (!__e)                                                    \
			break;                                               \
		trace_fill(__e, sk, cwnd, sig, qlen, rtt, md);               \
		bpf_ringbuf_submit(__e, 0);                                  \
	} while (0)

static __always_inline void trace_fill(struct cc_trace_event *e, struct sock *sk, __u64 cwnd,
				       __s64 sig, __u32 qlen, __u32 rtt, __u32 mode)
{
	e->ts_ns = bpf_ktime_get_ns();
	e->saddr = sk->__sk_common.skc_rcv_saddr;
	e->daddr = sk->__sk_common.skc_daddr;
	e->sport = sk->__sk_common.skc_num;
	e->dport = __builtin_bswap16(sk->__sk_common.skc_dport);
	e->snd_cwnd = ((struct tcp_sock *)sk)->snd_cwnd;
	e->cwnd_bytes = cwnd;
	e->signal = sig;
	e->qlen_bytes = qlen;
	e->rtt_us = rtt;
	e->pacing_mbps = sk->sk_pacing_rate / 125000;
	e->mode = mode;
}

static __always_inline void stat_add(void *map, __u32 key, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(map, &key);

	if (v)
		*v += n;
}

static __always_inline struct tcp_sock *tcp_sk(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct inet_connection_sock *inet_csk(const struct sock *sk)
{
	return (struct inet_connection_sock *)sk;
}

/* The CC's private per-socket state, as the kernel's inet_csk_ca(). */
static __always_inline void *inet_csk_ca(const struct sock *sk)
{
	return (void *)inet_csk(sk)->icsk_ca_priv;
}

/*
 * CCLOAD_CA_FITS(type) fails the build when a CC's per-socket state does
 * not fit icsk_ca_priv (13 u64s, 104 bytes, on 6.1 to 6.18); anything more
 * belongs in a BPF_MAP_TYPE_SK_STORAGE map.
 */
#define CCLOAD_CA_FITS(type)                                                 \
	_Static_assert(sizeof(type) <=                                       \
			       sizeof(((struct inet_connection_sock *)0)->icsk_ca_priv), \
		       #type " does not fit icsk_ca_priv")

/* Sequence-number comparisons with wrap-around, as in the kernel. */
static __always_inline bool seq_before(__u32 a, __u32 b)
{
	return (__s32)(a - b) < 0;
}

static __always_inline __u64 min_u64(__u64 a, __u64 b)
{
	return a < b ? a : b;
}

static __always_inline __u64 max_u64(__u64 a, __u64 b)
{
	return a > b ? a : b;
}

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

/*
 * PowerTCP's and HPCC's smoothing of a signal over time: the sample is
 * weighed in by dt/tau, so that samples dt apart move the average as much
 * per unit of time however often they come; a sample dt ≥ tau replaces it.
 */
static __always_inline __s64 cc_dt_ewma(__s64 avg, __s64 sample, __u64 dt, __u32 tau)
{
	if (dt >= tau)
		return sample;
	return sdiv64(avg * (__s64)(tau - dt) + sample * (__s64)dt, tau);
}

/* Lowers *min to v; 0 in *min means none yet, and v = 0 is no sample. */
static __always_inline void cc_track_min(__u32 *min, __u32 v)
{
	if (v && (!*min || v < *min))
		*min = v;
}

/* Bandwidth-delay product in bytes for bw bits/s and rtt microseconds. */
static __always_inline __u64 bdp_bytes(__u64 bw_bps, __u32 rtt_us)
{
	return (bw_bps >> 3) * rtt_us / USEC_PER_SEC;
}

/*
 * The time the host needs to send one full GSO burst at bw_bps, in µs:
 * the floor of a tracked τ (powertcp, theta_powertcp, hpcc). A window
 * smaller than one burst cannot keep the host busy, and a flow whose
 * window is that small sees RTTs of lone packets, far below the RTT of a
 * full window: without the floor, such a flow takes the low RTT as its τ
 * and never leaves the small window.
 */
static __always_inline __u32 cc_gso_burst_us(__u32 gso_max_size, __u64 bw_bps)
{
	return (__u64)gso_max_size * 8 * USEC_PER_SEC / (bw_bps ?: 1);
}

/*
 * What cc_used_bytes needs to know of an ACK, read from the socket and the
 * rate sample (cc_use_of), so that the arithmetic itself touches neither
 * and can be timed alone (bench/perack's arithmetic programs).
 */
struct cc_use {
	__u32 mss;		/* tp->mss_cache, at least 1 */
	__u32 max_packets_out;	/* tp->max_packets_out */
	__s64 delivered;	/* rs->delivered, packets */
	__s64 interval_us;	/* rs->interval_us */
};

static __always_inline void cc_use_of(const struct sock *sk, const struct rate_sample *rs,
				      struct cc_use *u)
{
	const struct tcp_sock *tp = tcp_sk(sk);

	u->mss = tp->mss_cache ?: 1;
	u->max_packets_out = tp->max_packets_out;
	u->delivered = rs->delivered;
	u->interval_us = rs->interval_us;
}

/*
 * The largest window, in bytes, that a flow has shown it can use: the most
 * data it had in flight during the last window (tp->max_packets_out), or
 * what it delivers in tau_us at the delivery rate this ACK measured,
 * whichever is larger. The CCs let a window grow to at most twice this,
 * as the kernel's own cwnd-limited test does in slow start, so a flow held
 * back by the application or the CPU cannot double its window every RTT
 * without bound. The rate term matters for paced flows whose τ is longer
 * than the RTT (τ floored at one GSO burst): such a flow has only
 * rate·RTT in flight, far below its window, yet uses all of rate = cwnd/τ.
 */
static __always_inline __u64 cc_used_bytes(const struct cc_use *u, __u32 tau_us)
{
	__u64 used = (__u64)u->max_packets_out * u->mss, paced;

	if (u->delivered > 0 && u->interval_us > 0) {
		paced = (__u64)u->delivered * u->mss * tau_us / (__u64)u->interval_us;
		if (paced > used)
			used = paced;
	}
	return used;
}

/*
 * A window that may grow to want, but no further than twice what the flow
 * has shown it uses (cc_used_bytes); a shrinking window is not held back.
 */
static __always_inline __u64 cc_grow_limit(__u64 cur, __u64 want, const struct cc_use *u,
					   __u32 tau_us)
{
	if (want <= cur)
		return want;
	return max_u64(cur, min_u64(want, 2 * cc_used_bytes(u, tau_us)));
}

/* A window of cwnd bytes in packets of mss: at least 2, at most clamp. */
static __always_inline __u32 cc_window_pkts(__u64 cwnd, __u32 mss, __u32 clamp)
{
	__u64 pkts = cwnd / (mss ?: 1);

	if (pkts < 2)
		pkts = 2;
	if (pkts > clamp)
		pkts = clamp;
	return pkts;
}

/* The pacing rate, bytes/s, that sends cwnd bytes per τ, at most max_Bps. */
static __always_inline __u64 cc_pacing_Bps(__u64 cwnd, __u32 tau_us, __u64 max_Bps)
{
	__u64 rate = cwnd * USEC_PER_SEC / (tau_us ?: 1);

	return rate > max_Bps ? max_Bps : rate;
}

/*
 * Writes a window of cwnd bytes to the socket (at least 2 packets, at most
 * snd_cwnd_clamp) and paces at cwnd/τ, capped by SO_MAX_PACING_RATE. For
 * CCs with cong_control, which the kernel leaves to set pacing themselves.
 */
static __always_inline void cc_set_window(struct sock *sk, __u64 cwnd, __u32 tau_us)
{
	struct tcp_sock *tp = tcp_sk(sk);

	tp->snd_cwnd = cc_window_pkts(cwnd, tp->mss_cache, tp->snd_cwnd_clamp);
	sk->sk_pacing_rate = cc_pacing_Bps(cwnd, tau_us, sk->sk_max_pacing_rate);
}

#endif /* CCLOAD_H */
