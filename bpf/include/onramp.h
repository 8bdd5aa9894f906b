/* SPDX-License-Identifier: GPL-2.0 */
/*
 * onramp.h: On-Ramp (bpf/onramp.c) as its programs and the Go package
 * onramp share it: the TCP options (docs/onramp-option.md), the run-time
 * configuration, per-flow and per-peer state, counters and trace records.
 *
 * Clocks: departure times (t_next, last_dep) are CLOCK_MONOTONIC ns, the
 * clock sch_fq compares skb->tstamp against; every time that crosses hosts
 * (the options' tx, the one-way delay) is CLOCK_TAI ns, the clock map's
 * (clock.h). The two are converted in one place, stamp() in onramp.c.
 * Scales: beta and gain are FP_ONE (2^16) fractions (ccload.h).
 */
#ifndef CCLOAD_ONRAMP_H
#define CCLOAD_ONRAMP_H

#include "ccload.h"
#include "clock.h"

/* RFC 6994 ExIDs under kind 253 (TCP_OPT_EXP). */
#define ONRAMP_EXID_STAMP 0xCC20	/* data: tx time and cumulative pause */
#define ONRAMP_EXID_ECHO 0xCC21		/* ACK: one-way delay, tx and pause echoed */
#define ONRAMP_EXID_PAD 0xCC2F		/* room reserved by sockops, not (yet) filled */
#define ONRAMP_EXID_FAMILY 0xCC20	/* the three share 0xCC2X */
#define ONRAMP_EXID_MASK 0xF0
#define ONRAMP_STAMP_LEN 12
#define ONRAMP_ECHO_LEN 16
/* An echoed one-way delay that says: the receiver has no clock offset for us. */
#define ONRAMP_NO_CLOCK ((__s32)0x80000000)

/* onramp_config.flags */
#define ONRAMP_F_AUTO_T 0x1	/* T = minOWD + 2 sigma_clk per peer */
#define ONRAMP_F_STRAWMAN 0x2	/* pause O - T, without lag compensation (§3.1) */
/*
 * Observe: stamp, measure and echo as usual, but assert no pause (no new
 * flow starts paused either), so that an operator can see the one-way
 * delays and how often On-Ramp would pause before it holds any packet.
 */
#define ONRAMP_F_OBSERVE 0x4
/* Stamp every data segment, as the paper does (see ONRAMP_SPARSE_*). */
#define ONRAMP_F_STAMP_EVERY 0x8

/*
 * Sparse stamps. A flow whose newest echo's one-way delay was below
 * T / ONRAMP_SPARSE_BELOW is stamped at most once per T / ONRAMP_SPARSE_EVERY
 * (its other data segments leave with no option: "Room only where it is
 * used" below); any other flow has every data segment stamped. A queue that
 * builds behind such a flow is seen at most T / ONRAMP_SPARSE_EVERY later,
 * and had to grow by T / 2 before it asked for a pause. The CCs that keep
 * their queues short, whose delays stay far below T, send small packets:
 * θ-PowerTCP had 445 stamped per MB where cubic had 145
 * (docs/benchmarks.md), each of which took a stamp and an echo. They are
 * spared the stamp's and the echo's part of that work; each packet's own
 * (parse, flow lookup, departure time) stays.
 */
#define ONRAMP_SPARSE_BELOW 2
#define ONRAMP_SPARSE_EVERY 4

/*
 * Run-time configuration, written whole by the Go side in one map update.
 * Append fields only.
 */
struct onramp_config {
	__u64 threshold_ns;	/* T; with ONRAMP_F_AUTO_T the fallback */
	__u64 max_pause_ns;	/* longest single pause */
	__u64 min_window_ns;	/* minOWD is the least over one to two of these */
	__u32 gain;		/* EWMA gain g of beta, FP_ONE */
	__u32 flags;		/* ONRAMP_F_* */
};

/* A TCP connection from this host's point of view; ports in network order. */
struct onramp_flow_key {
	__u32 local[4];		/* IPv4 in [0], the rest zero */
	__u32 remote[4];
	__u16 lport;
	__u16 rport;
	__u32 v6;
};

/* One connection's state: its sending side, then its receiving side. */
struct onramp_flow {
	__u64 t_next;		/* MONO: no packet departs before */
	__u64 last_dep;		/* MONO: latest departure time given */
	__u64 pause_total;	/* ns of pause asserted, ever (the options carry it mod 2^32) */
	__u64 pauses;		/* pauses asserted */
	__u64 last_echo;	/* MONO: the last echo used */
	__s64 beta;		/* FP_ONE */
	__s32 prev_owd;		/* O_B: the previous sample's one-way delay */
	__u32 prev_pause;	/* the previous sample's pause at its tx */
	__u32 prev_tx;		/* the previous sample's tx (TAI mod 2^32) */
	__u32 srtt_ns;		/* EWMA (1/8) of the samples' RTTs */
	__u32 samples;		/* echoes used */
	__u32 have_prev;
	__u32 sparse_gap_ns;	/* non-zero: stamp at most once per this (ONRAMP_SPARSE_*) */
	__u32 room_stale;	/* the gap changed since the socket's onramp_room was written */
	__u64 stamped_at;	/* MONO: the newest STAMP */
	/* receiving side */
	__s32 rx_owd;		/* the newest stamp's one-way delay, or ONRAMP_NO_CLOCK */
	__u32 rx_tx;		/* its tx */
	__u32 rx_pause;		/* its pause */
	__u32 rx_fresh;		/* 1 until an ACK echoes it */
	/* the peer's clock entry, as last copied (clock_offset_cached) */
	struct clock_copy clk;
};

/*
 * Holds, per socket, for the CCs that read the RTT (θ-PowerTCP). TCP takes
 * a segment's RTT sample from the departure time TCP gave it, so a segment
 * On-Ramp held back has its hold in its sample. The egress records, in the
 * socket's storage of the map "onramp_holds", the newest
 * ONRAMP_HOLD_MARKS marks, in a ring: a segment whose TCP time was own_us
 * got the later departure dep_us. A held segment writes a mark when its
 * hold starts after the newest mark's ended, or when its TCP time is at
 * least a grain (max_pause / ONRAMP_HOLD_GRAINS) after the newest mark's:
 * a flow whose pause is extended on every echo then has its last
 * 2 max_pause of holds in the ring, and its samples keep at most about a
 * grain of the hold, while a mark per extension would cover the last few
 * echoes only.
 *
 * What a reader may conclude: departures never go backwards within a flow
 * and TCP's times rise in the order it sends, so a segment that TCP timed
 * at or after a mark's own_us left no earlier than its dep_us. Its RTT
 * sample, less (dep_us - its time) for the best such mark where that is
 * positive, is still no shorter than the path's. Times are
 * CLOCK_MONOTONIC µs, as TCP's own (tcp_mstamp).
 */
#define ONRAMP_HOLD_MARKS 16	/* a power of two (indexes are masked) */
#define ONRAMP_HOLD_GRAINS 8	/* marks per max_pause of a pause held on and on */

struct onramp_hold_mark {
	__u64 own_us;		/* TCP's departure time of the first segment held */
	__u64 dep_us;		/* the departure On-Ramp gave it */
};

struct onramp_holds {
	__u64 n;		/* marks written; the newest is mark[(n - 1) % ONRAMP_HOLD_MARKS] */
	struct onramp_hold_mark mark[ONRAMP_HOLD_MARKS];
};

/*
 * The map that carries struct onramp_holds. On-Ramp's tc object and the CCs
 * that read it declare it; the one map they share is pinned as
 * <pin root>/shared/onramp_holds while any of them holds it
 * (internal/sharedmaps). A CC loaded without it gets a map of its own that
 * nothing writes.
 */
#define ONRAMP_HOLDS_MAP                                                     \
	struct {                                                             \
		__uint(type, BPF_MAP_TYPE_SK_STORAGE);                       \
		__uint(map_flags, BPF_F_NO_PREALLOC);                        \
		__type(key, int);                                            \
		__type(value, struct onramp_holds);                          \
	} onramp_holds SEC(".maps")

/*
 * Room only where it is used. The sockops program reserves a data
 * segment's 12 bytes, and a pure ACK's 16, only when the tc programs will
 * fill them: a segment with an On-Ramp option (even a PAD) misses TCP's
 * header prediction at the other end, and the room shortens every
 * segment. Each socket's entry of the map "onramp_room" says when:
 *
 *   quiet_until  the sender's egress writes it: a quiet flow
 *                (ONRAMP_SPARSE_*) needs no STAMP on data that leaves
 *                before this time (CLOCK_MONOTONIC ns; 0: stamp every
 *                data segment). The egress writes it when it stamps a
 *                quiet flow, and on the flow's next segment after an
 *                echo changed the flow's gap (onramp_flow.room_stale);
 *                a change reaches the sockets one segment late.
 *   echo_due     the receiver's sockops program sets it when a STAMP
 *                arrives (the parse callback for unknown options) and
 *                clears it when it makes room on a pure ACK for the
 *                ECHO of it.
 *
 * A socket with no entry, or set up by a build without it, gets room on
 * every data segment and every pure ACK, as before. On-Ramp's tc objects
 * and its sockops object declare the map; the one map they share is
 * pinned as <pin root>/shared/onramp_room while any of them holds it
 * (internal/sharedmaps).
 */
struct onramp_room {
	__u64 quiet_until;
	__u32 echo_due;
	__u32 unused;
};

#define ONRAMP_ROOM_MAP                                                      \
	struct {                                                             \
		__uint(type, BPF_MAP_TYPE_SK_STORAGE);                       \
		__uint(map_flags, BPF_F_NO_PREALLOC);                        \
		__type(key, int);                                            \
		__type(value, struct onramp_room);                           \
	} onramp_room SEC(".maps")

/*
 * How long a segment TCP timed at sent_us (µs, CLOCK_MONOTONIC) was at
 * least held, by the marks at or before it; 0 when none says.
 */
static __always_inline __u64 onramp_held_us(const struct onramp_holds *h, __u64 sent_us)
{
	__u64 held = 0;
	int i;

#pragma clang loop unroll(full)
	for (i = 0; i < ONRAMP_HOLD_MARKS; i++) {
		const struct onramp_hold_mark *m = &h->mark[i];

		if (m->own_us <= sent_us && m->dep_us > sent_us + held)
			held = m->dep_us - sent_us;
	}
	return held;
}

/*
 * One-way delay histogram per peer: log-linear, 8 buckets per power of two
 * (relative width 1/8). Bucket of v ns: 0 for v < 16; else with b the bit
 * length of v, (b - 4) * 8 + the 3 bits after the leading one. The Go side
 * (onramp.owdBucketRange) inverts it.
 */
/*
 * A new connection to a peer whose newest echo, at most this many max
 * pauses old, was over the threshold starts paused for that excess (the
 * paper's §5.2.1: a new request uses the delay its predecessors measured,
 * rather than spend its first round trip blind).
 */
#define ONRAMP_HISTORY_MAX_PAUSES 4

#define ONRAMP_HIST_SUB_BITS 3
#define ONRAMP_HIST_BUCKETS 256	/* a power of two (indexes are masked); the last holds 2^35 ns and more */

/*
 * A peer's histogram and counters take at most one echo per this many ns
 * (onramp_peer.sampled_at): every CPU that receives the peer's echoes
 * would otherwise write its entry on every echo, and each such write
 * takes the entry's cache lines from the other CPUs
 * (BenchmarkFromOnePeer in onramp). The least delay, for the automatic
 * threshold, still sees every echo; the newest excess over T, which new
 * flows start from, is written when it turns zero or non-zero, and
 * otherwise at most as often (or once per max_pause, if that is shorter).
 */
#define ONRAMP_PEER_SAMPLE_NS (100 * 1000)
/*
 * The histogram weighs each echo it takes by the time since the one before,
 * in ONRAMP_PEER_SAMPLE_NS, from 1 to ONRAMP_PEER_WEIGHT_MAX: it counts
 * time, not echoes, so that the sparse echoes of quiet flows
 * (ONRAMP_SPARSE_*) count for the time they stand for. A gap longer than
 * the most is taken as idle.
 */
#define ONRAMP_PEER_WEIGHT_MAX 16

struct onramp_peer {
	__u64 samples;		/* echoes the histogram took (ONRAMP_PEER_SAMPLE_NS) */
	__u64 no_clock;		/* ... of them, those that said the receiver had no offset for us */
	__u64 pauses;
	__u64 pause_ns;
	__u64 negative;		/* ... samples below zero (clock error) */
	__s64 min_owd;		/* least one-way delay in the current window */
	__s64 min_owd_prev;	/* ... and in the previous one */
	__u64 min_start;	/* MONO: when the current window began */
	__s64 last_owd;		/* the newest one-way delay an echo brought (ONRAMP_PEER_SAMPLE_NS) */
	__u64 last_owd_at;	/* MONO: when */
	__u64 last_excess;	/* its excess over the peer's threshold, ns (0: none) */
	__u64 sampled_at;	/* MONO: when the histogram last took an echo (beside last_owd_at: one cache line) */
	__u32 hist[ONRAMP_HIST_BUCKETS];	/* ONRAMP_PEER_SAMPLE_NS of time per count (ONRAMP_PEER_WEIGHT_MAX) */
};

/* Counters, named in onramp (statNames); append only. */
enum onramp_stat {
	ONRAMP_STAT_SCOPED = 0,		/* connections to peers in the prefixes */
	ONRAMP_STAT_STAMP_NO_SPACE,	/* data segments sockops found no room on */
	ONRAMP_STAT_ECHO_NO_SPACE,	/* pure ACKs sockops found no room on */
	ONRAMP_STAT_STAMPED,		/* stamps written at egress */
	ONRAMP_STAT_STAMP_FAILED,	/* reserved room the egress could not fill */
	ONRAMP_STAT_ECHOED,		/* echoes written at egress */
	ONRAMP_STAT_ECHO_EMPTY,		/* reserved echo room with no new sample: left as PAD */
	ONRAMP_STAT_RX_STAMPS,		/* stamps received */
	ONRAMP_STAT_RX_NO_CLOCK,	/* ... from a sender the clock map has no offset for */
	ONRAMP_STAT_ECHOES,		/* echoes received */
	ONRAMP_STAT_NO_CLOCK,		/* ... not acted on for want of a clock: the receiver had no
					 * offset for us, or ours for the peer errs by more than T/2 */
	ONRAMP_STAT_STALE,		/* ... ignored: older than one RTT, or repeated */
	ONRAMP_STAT_UNKNOWN_FLOW,	/* ... for a connection this interface never stamped */
	ONRAMP_STAT_PAUSES,		/* pauses asserted */
	ONRAMP_STAT_PAUSE_NS,		/* ns of pause asserted */
	ONRAMP_STAT_CLAMPED,		/* pauses cut to max_pause_ns */
	ONRAMP_STAT_DELAYED,		/* packets given a later departure time */
	ONRAMP_STAT_MALFORMED,		/* our options with a wrong length */
	ONRAMP_STAT_BETA_SAMPLES,	/* beta measurements (P_BG > 0) */
	ONRAMP_STAT_START_PAUSED,	/* new flows paused from their peer's recent delay */
	ONRAMP_STAT_SPARED,		/* data segments left unstamped: the flow's delay far below T (ONRAMP_SPARSE_*) */
	ONRAMP_STAT_MAX,
};

/* onramp_trace_event.flags */
#define ONRAMP_TRACE_PAUSED 0x1		/* this echo asserted a pause */
#define ONRAMP_TRACE_CLAMPED 0x2	/* ... cut to max_pause_ns */
#define ONRAMP_TRACE_BETA 0x4		/* this echo measured beta */
#define ONRAMP_TRACE_STALE 0x8		/* ignored: older than one RTT */
#define ONRAMP_TRACE_NO_CLOCK 0x10	/* ignored: the receiver had no offset */
#define ONRAMP_TRACE_OBSERVED 0x20	/* observe mode: would have paused for pause_ns, did not */
#define ONRAMP_TRACE_COARSE_CLOCK 0x40	/* ignored: this host's clock error for the peer is over T/2 */

/* A record per echo the sender handles, while tracing is on. */
struct onramp_trace_event {
	__u64 ts_ns;		/* MONO */
	struct onramp_flow_key flow;
	__s32 owd_ns;		/* O */
	__u32 p_last_ns;	/* P_LastPktRTT */
	__s64 beta;		/* FP_ONE, after this echo */
	__u64 t_next;		/* MONO, after this echo */
	__u64 threshold_ns;	/* T used */
	__u64 pause_ns;		/* pause added by this echo (observe: that it would have added) */
	__u32 rtt_ns;		/* the sample's RTT: now - its tx */
	__u32 flags;		/* ONRAMP_TRACE_* */
};

#endif /* CCLOAD_ONRAMP_H */
