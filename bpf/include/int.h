/* SPDX-License-Identifier: GPL-2.0 */
/*
 * int.h: the INT TCP option (docs/int-option.md) as the BPF programs see
 * it, and the per-socket telemetry that the sockops program hands to the
 * congestion controls.
 *
 * Option: kind 253 (RFC 6994), length 4 + 8*N, 16-bit ExID, N hop slots.
 * Hop slot, one big-endian 64-bit word:
 *   63..60 rate code (0 = empty slot)   59..36 timestamp, ns mod 2^24
 *   35..16 txBytes, 128 B units mod 2^20  15..0 qlen, 80 B units, saturating
 */
#ifndef CCLOAD_INT_H
#define CCLOAD_INT_H

#define INT_OPT_KIND 253 /* TCP_OPT_EXP of tcpkt.h */
#define INT_EXID_FORWARD 0xCC10
#define INT_EXID_ECHO 0xCC11
#define INT_OPT_HDR 4
#define INT_HOP_SIZE 8
#define INT_MAX_HOPS 4
#define INT_OPT_LEN(n) (INT_OPT_HDR + INT_HOP_SIZE * (n))

/* TCP's 40 bytes of options hold the largest INT option (4 hops)... */
#define TCP_OPTIONS_MAX 40
_Static_assert(INT_OPT_LEN(INT_MAX_HOPS) <= TCP_OPTIONS_MAX, "INT_MAX_HOPS hops do not fit TCP's options");
/* ...and 3 hops beside the timestamps option (NOP, NOP, 10 bytes). */
#define INT_HOPS_BESIDE_TS 3
_Static_assert(INT_OPT_LEN(INT_HOPS_BESIDE_TS) + 12 <= TCP_OPTIONS_MAX, "3 hops do not fit beside TCP timestamps");

#define INT_TS_BITS 24
#define INT_TX_BITS 20
#define INT_QLEN_BITS 16
#define INT_TX_UNIT 128
#define INT_QLEN_UNIT 80

static __always_inline __u32 int_hop_rate_code(__u64 w) { return w >> 60; }
static __always_inline __u32 int_hop_ts(__u64 w) { return (w >> 36) & ((1U << INT_TS_BITS) - 1); }
static __always_inline __u32 int_hop_tx(__u64 w) { return (w >> 16) & ((1U << INT_TX_BITS) - 1); }
static __always_inline __u32 int_hop_qlen(__u64 w) { return w & 0xffff; }

static __always_inline __u64 int_hop_word(__u32 code, __u64 ts_ns, __u64 tx_bytes, __u64 qlen_bytes)
{
	__u64 q = qlen_bytes / INT_QLEN_UNIT;

	if (q > 0xffff)
		q = 0xffff;
	return ((__u64)(code & 0xf) << 60) |
	       ((ts_ns & ((1ULL << INT_TS_BITS) - 1)) << 36) |
	       (((tx_bytes / INT_TX_UNIT) & ((1ULL << INT_TX_BITS) - 1)) << 16) | q;
}

/* Link rate of a rate code, in Mbit/s; 0 for empty or reserved codes. */
static __always_inline __u64 int_rate_mbps(__u32 code)
{
	switch (code) {
	case 1: return 100;
	case 2: return 1000;
	case 3: return 2500;
	case 4: return 5000;
	case 5: return 10000;
	case 6: return 25000;
	case 7: return 40000;
	case 8: return 50000;
	case 9: return 100000;
	case 10: return 200000;
	case 11: return 400000;
	case 12: return 800000;
	}
	return 0;
}

/* Per-socket state in the shared "int_store" BPF_MAP_TYPE_SK_STORAGE map. */
struct int_sk {
	__u32 flags;		/* INT_SK_* */
	__u32 data_skbs;	/* data skbs sent, for every-Nth tagging */
	/*
	 * What the length callback reserved room for on the segment being
	 * sent; the write callback, which follows it for the same segment,
	 * writes exactly that. (Only the length callback can tell a data
	 * segment from an ACK: skb_len counts the header in the other.)
	 */
	__u16 planned_exid;
	__u16 planned_slots;
	/* Receiver side: the newest hop records that arrived, to echo. */
	__u32 fwd_hops;
	__u32 fwd_seq;		/* bumped on every forward option received */
	__u64 fwd[INT_MAX_HOPS];	/* host byte order */
	/* Sender side: the newest echo, for the congestion control. */
	__u32 echo_hops;
	__u32 echo_seq;		/* bumped on every echo parsed */
	__u64 echo_ns;		/* bpf_ktime_get_ns() when it was parsed */
	__u64 echo[INT_MAX_HOPS];	/* host byte order */
};

#define INT_SK_SCOPED 0x1	/* the peer is in the configured prefixes */
/*
 * Receiver side: forward records arrived that no echo has carried yet. The
 * next pure ACK echoes them and clears it, so that each record set is
 * echoed once: with every-Nth or TSO-head tagging, the ACKs in between
 * carry nothing rather than the same records again.
 */
#define INT_SK_FWD_NEW 0x2

/*
 * The queueing delay the echo reports along the path, in µs: Σ qlen_i/b_i.
 * Subtracted from an RTT sample it leaves the base RTT, even for a flow
 * that starts while the path is congested and never sees it empty.
 */
static __always_inline __u64 int_queue_delay_us(const struct int_sk *st)
{
	__u64 us = 0, mbps;
	__u32 i;

	for (i = 0; i < INT_MAX_HOPS; i++) {
		if (i >= st->echo_hops)
			break;
		mbps = int_rate_mbps(int_hop_rate_code(st->echo[i]));
		if (mbps) /* bytes·8 / (Mbit/s) = µs */
			us += (__u64)int_hop_qlen(st->echo[i]) * INT_QLEN_UNIT * 8 / mbps;
	}
	return us;
}

/*
 * Folds an RTT sample, less the queueing delay the echo reports, into a
 * minimum: the base RTT as INT sees it.
 */
static __always_inline void int_track_base_rtt(__u32 *min_rtt_us, long rtt_us,
					       const struct int_sk *st)
{
	__u64 q = int_queue_delay_us(st), base;

	if (rtt_us <= 0 || (__u64)rtt_us <= q)
		return;
	base = rtt_us - q;
	if (!*min_rtt_us || base < *min_rtt_us)
		*min_rtt_us = base;
}

/* A sample older than this may have wrapped the 24-bit ns timestamps. */
#define INT_MAX_GAP_NS 8000000ULL

/* The previous echo a congestion control compares each new one with. */
struct int_prev {
	__u64 hop[INT_MAX_HOPS];
	__u64 echo_ns;		/* when it was parsed */
	__u32 echo_seq;		/* its int_sk.echo_seq; 0 = none yet */
	__u32 hops;
};

/* Whether the new echo can be compared with the previous one at all. */
static __always_inline bool int_pair_usable(const struct int_prev *prev, const struct int_sk *st)
{
	return prev->echo_seq && prev->hops == st->echo_hops &&
	       st->echo_ns - prev->echo_ns < INT_MAX_GAP_NS;
}

/*
 * Whether hop i's txBytes counter may have wrapped since the previous
 * echo: it wraps every 128 MiB, sooner than INT_MAX_GAP_NS at 200 Gbit/s
 * and up; a gap over half its wrap time is not trusted.
 */
static __always_inline bool int_hop_may_wrap(const struct int_prev *prev, const struct int_sk *st, __u32 i)
{
	__u64 mbps = int_rate_mbps(int_hop_rate_code(st->echo[i & (INT_MAX_HOPS - 1)]));

	return mbps && st->echo_ns - prev->echo_ns > (1ULL << 29) * 1000 / mbps;
}

/* Makes the new echo the previous one. */
static __always_inline void int_prev_save(struct int_prev *prev, const struct int_sk *st)
{
	__u32 i;

	for (i = 0; i < INT_MAX_HOPS; i++)
		prev->hop[i] = st->echo[i];
	prev->hops = st->echo_hops;
	prev->echo_seq = st->echo_seq;
	prev->echo_ns = st->echo_ns;
}

/*
 * The worst hop of a new echo against the previous one: the largest
 * HOP_SAMPLE(now, prev, t_us, min_bytes, &dt_us) over the hops that can be
 * compared, into best (-1 when none can: a first echo, a changed path, a
 * gap that may have wrapped) and its Δt into best_dt. The new echo then
 * becomes the previous one. HOP_SAMPLE is a per-hop function of that
 * signature returning __s64 (PowerTCP's hop_power, HPCC's hop_inflight);
 * a macro, so that it stays a direct, inlined call.
 */
#define INT_WORST_HOP(prev, st, HOP_SAMPLE, t_us, min_bytes, best, best_dt)          \
	do {                                                                         \
		bool usable_ = int_pair_usable(prev, st);                            \
		__u64 dt_ = 0;                                                       \
		__s64 s_;                                                            \
		__u32 i_;                                                            \
                                                                                     \
		(best) = -1;                                                         \
		(best_dt) = 0;                                                       \
		for (i_ = 0; i_ < INT_MAX_HOPS && usable_; i_++) {                   \
			if (i_ >= (st)->echo_hops)                                   \
				break;                                               \
			if (int_hop_may_wrap(prev, st, i_))                          \
				continue;                                            \
			s_ = HOP_SAMPLE((st)->echo[i_], (prev)->hop[i_], t_us, min_bytes, &dt_); \
			if (s_ > (best)) {                                           \
				(best) = s_;                                         \
				(best_dt) = dt_;                                     \
			}                                                            \
		}                                                                    \
		int_prev_save(prev, st);                                             \
	} while (0)

/* What one hop did between two of its records. */
struct int_delta {
	__u64 mbps;		/* link rate */
	__u64 dt_ns;		/* time between the records */
	__u64 tx_bytes;		/* bytes sent in between */
	__u64 q_now;		/* queue now, bytes */
	__u64 q_prev;		/* queue then, bytes */
};

/*
 * Fills d from two records of one hop. False when the pair says nothing:
 * an unknown rate, the same timestamp, or a different rate code (a
 * different link: the path changed).
 */
static __always_inline bool int_hop_delta(__u64 now_w, __u64 prev_w, struct int_delta *d)
{
	d->mbps = int_rate_mbps(int_hop_rate_code(now_w));
	d->dt_ns = (int_hop_ts(now_w) - int_hop_ts(prev_w)) & ((1U << INT_TS_BITS) - 1);
	if (!d->mbps || !d->dt_ns || int_hop_rate_code(now_w) != int_hop_rate_code(prev_w))
		return false;
	d->tx_bytes = ((int_hop_tx(now_w) - int_hop_tx(prev_w)) & ((1U << INT_TX_BITS) - 1)) * INT_TX_UNIT;
	d->q_now = (__u64)int_hop_qlen(now_w) * INT_QLEN_UNIT;
	d->q_prev = (__u64)int_hop_qlen(prev_w) * INT_QLEN_UNIT;
	return true;
}

/* The largest hop queue of an echo, in bytes (for traces). */
static __always_inline __u32 int_max_qlen(const struct int_sk *st)
{
	__u32 q = 0, i;

	for (i = 0; i < INT_MAX_HOPS; i++) {
		if (i >= st->echo_hops)
			break;
		if (int_hop_qlen(st->echo[i]) * INT_QLEN_UNIT > q)
			q = int_hop_qlen(st->echo[i]) * INT_QLEN_UNIT;
	}
	return q;
}

/*
 * The map that carries struct int_sk. The sockops object and every CC that
 * reads INT declare it; the one map they share is pinned as
 * /sys/fs/bpf/ccload/shared/int_store (internal/sharedmaps).
 */
#define INT_STORE_MAP                                                        \
	struct {                                                             \
		__uint(type, BPF_MAP_TYPE_SK_STORAGE);                       \
		__uint(map_flags, BPF_F_NO_PREALLOC);                        \
		__type(key, int);                                            \
		__type(value, struct int_sk);                                \
	} int_store SEC(".maps")

/* Run-time configuration of the sockops program (int_config map). */
struct int_config {
	__u32 enabled;		/* 0 = do nothing */
	__u32 slots;		/* hop slots in forward options, 1..INT_MAX_HOPS */
	__u32 tag_every;	/* tag one data skb in tag_every; 1 = all */
	__u32 tso_only;		/* tag only skbs of more than one MSS */
};

#endif /* CCLOAD_INT_H */
