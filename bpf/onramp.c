// SPDX-License-Identifier: GPL-2.0
/*
 * onramp: On-Ramp (NSDI'21) at tc, for any congestion control. When the
 * one-way delay (OWD) of a flow's packets exceeds a threshold T, the sender
 * holds the flow's next packets back, with earliest departure times that
 * sch_fq enforces, while fq keeps serving the other flows.
 *
 * One object per interface, attached to both sides of it; every host of a
 * flow runs it (the sender's side of one flow is the receiver's of another):
 *
 *   onramp_egress   data segment with a 12-byte PAD (reserved by
 *                   bpf/onramp_sockops.c): give it its departure time,
 *                   max(its own, the flow's t_next, the flow's last one),
 *                   and turn the PAD into a STAMP: that departure time
 *                   (TAI) and the flow's cumulative pause. A held
 *                   segment marks its socket's holds (onramp.h), so that
 *                   a CC can take its RTT sample without the hold.
 *                   pure ACK with a 16-byte PAD: turn it into an ECHO of
 *                   the newest stamp received on the flow, if any.
 *                   data or FIN with no PAD: the same departure time
 *                   rule, so that it does not overtake the held segments.
 *   onramp_ingress  STAMP: OWD = rx - (tx - offset), offset the sender's
 *                   from the clock map; kept for the next ACK's ECHO.
 *                   ECHO: the sender's control (control() below, the
 *                   paper's §3.2), which moves the flow's t_next.
 *
 * The options' formats are in docs/onramp-option.md. Rewriting an option in
 * place keeps the header's length, so GSO packets stay sound: every
 * segment of one carries the same stamp.
 */
#include "include/ccload.h"
#include "include/clock.h"
#include "include/onramp.h"
#include "include/tcpkt.h"

char _license[] SEC("license") = "GPL";

/* __sk_buff->tstamp_type of a CLOCK_MONOTONIC delivery time (see edt_delay.c). */
#define EDT_TSTAMP_MONO 1

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct onramp_config);
} onramp_params SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct onramp_flow_key);
	__type(value, struct onramp_flow);
} onramp_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, struct clock_peer);
	__type(value, struct onramp_peer);
} onramp_peers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ONRAMP_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} onramp_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} onramp_trace SEC(".maps");

/* Non-zero while `ccload trace onramp` reads onramp_trace. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} onramp_trace_on SEC(".maps");

/* Unused: it puts the trace record into the object's BTF, for bpf2go. */
const struct onramp_trace_event *onramp_trace_event_btf __attribute__((unused));

CLOCK_OFFSETS_MAP;

ONRAMP_HOLDS_MAP;

ONRAMP_ROOM_MAP;

/* A new peer's first value: too large for the stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct onramp_peer);
} onramp_peer_init SEC(".maps");

/* The option's bytes, as on the wire. */
struct onramp_opt {
	__u8 kind;
	__u8 len;
	__be16 exid;
	__be32 a;	/* STAMP: tx.    ECHO: owd */
	__be32 b;	/* STAMP: pause. ECHO: tx */
	__be32 c;	/* ECHO: pause */
} __attribute__((packed, aligned(4)));	/* tcp_store_csum reads it as words */

static __always_inline struct onramp_config *onramp_cfg(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&onramp_params, &zero);
}

/* The flow of a segment this host sends (from), or receives. */
static __always_inline void flow_key(const struct tcp_flow *f, bool from, struct onramp_flow_key *k)
{
	if (from) {
		__builtin_memcpy(k->local, f->src, sizeof(k->local));
		__builtin_memcpy(k->remote, f->dst, sizeof(k->remote));
		k->lport = f->sport;
		k->rport = f->dport;
	} else {
		__builtin_memcpy(k->local, f->dst, sizeof(k->local));
		__builtin_memcpy(k->remote, f->src, sizeof(k->remote));
		k->lport = f->dport;
		k->rport = f->sport;
	}
	k->v6 = f->v6;
}

/* The remote end as the clock map names peers: IPv4 as ::ffff:a.b.c.d. */
static __always_inline void peer_of(const struct onramp_flow_key *k, struct clock_peer *p)
{
	if (k->v6) {
		__builtin_memcpy(p->addr, k->remote, sizeof(p->addr));
		return;
	}
	__builtin_memset(p->addr, 0, 10);
	p->addr[10] = 0xff;
	p->addr[11] = 0xff;
	__builtin_memcpy(&p->addr[12], &k->remote[0], 4);
}

/* Payload bytes after the TCP header (a GSO packet's whole payload). */
static __always_inline __u32 payload(const struct __sk_buff *skb, const struct tcp_pkt *p)
{
	__u32 hdr = p->l4 + p->doff;

	return skb->len > hdr ? skb->len - hdr : 0;
}

/* Bit length of v (0 for 0), in six bounded steps. */
static __always_inline __u32 bit_length(__u64 v)
{
	__u32 n = 0;

	if (v >> 32) { v >>= 32; n += 32; }
	if (v >> 16) { v >>= 16; n += 16; }
	if (v >> 8) { v >>= 8; n += 8; }
	if (v >> 4) { v >>= 4; n += 4; }
	if (v >> 2) { v >>= 2; n += 2; }
	if (v >> 1) { v >>= 1; n += 1; }
	return n + (__u32)v;
}

/* The histogram bucket of a one-way delay of v ns (onramp.h). */
static __always_inline __u32 owd_bucket(__u64 v)
{
	__u32 b = bit_length(v), i;

	if (b <= ONRAMP_HIST_SUB_BITS + 1)
		return 0;
	i = (b - ONRAMP_HIST_SUB_BITS - 1) * (1 << ONRAMP_HIST_SUB_BITS) +
	    ((v >> (b - ONRAMP_HIST_SUB_BITS - 1)) & ((1 << ONRAMP_HIST_SUB_BITS) - 1));
	return i < ONRAMP_HIST_BUCKETS ? i : ONRAMP_HIST_BUCKETS - 1;
}

/*
 * Turns the reserved PAD at off into opt and keeps the checksum valid.
 * n is the option's length, 12 or 16.
 */
static __always_inline bool fill(struct __sk_buff *skb, __u32 off, __u32 csum_off, const struct onramp_opt *opt, __u32 n)
{
	if (n == ONRAMP_STAMP_LEN)
		return tcp_store_csum(skb, off, csum_off, opt, ONRAMP_STAMP_LEN);
	if (n == ONRAMP_ECHO_LEN)
		return tcp_store_csum(skb, off, csum_off, opt, ONRAMP_ECHO_LEN);
	return false;
}

/*
 * A new connection starts paused when its peer's newest echo, fresh (at
 * most ONRAMP_HISTORY_MAX_PAUSES max pauses old), was over the threshold:
 * for that excess, at most max_pause, counted as pause asserted; in
 * observe mode it starts as it would without On-Ramp.
 */
static __always_inline void start_from_peer(const struct onramp_flow_key *k, struct onramp_flow *fl, __u64 now)
{
	struct onramp_config *cfg = onramp_cfg();
	struct onramp_peer *pr;
	struct clock_peer peer;
	__u64 pause;

	if (!cfg || (cfg->flags & ONRAMP_F_OBSERVE))
		return;
	peer_of(k, &peer);
	pr = bpf_map_lookup_elem(&onramp_peers, &peer);
	if (!pr || !pr->last_excess || now - pr->last_owd_at > ONRAMP_HISTORY_MAX_PAUSES * cfg->max_pause_ns)
		return;
	pause = min_u64(pr->last_excess, cfg->max_pause_ns);
	fl->t_next = now + pause;
	fl->pause_total = pause;
	fl->pauses = 1;
	stat_add(&onramp_stats, ONRAMP_STAT_START_PAUSED, 1);
	stat_add(&onramp_stats, ONRAMP_STAT_PAUSES, 1);
	stat_add(&onramp_stats, ONRAMP_STAT_PAUSE_NS, pause);
}

/*
 * A segment held from TCP's time own to dep (ns): marked in its socket's
 * holds when the newest mark does not already cover it (onramp.h).
 */
static __always_inline void mark_hold(struct __sk_buff *skb, __u64 own, __u64 dep)
{
	struct onramp_config *cfg = onramp_cfg();
	struct onramp_hold_mark *m;
	struct onramp_holds *h;
	struct bpf_sock *sk;
	__u64 own_us = own / 1000, grain_us;

	sk = skb->sk;
	if (!sk || !own || !cfg)
		return;
	sk = bpf_sk_fullsock(sk);
	if (!sk)
		return;
	h = bpf_sk_storage_get(&onramp_holds, sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (!h)
		return;
	if (h->n) {
		m = &h->mark[(h->n - 1) & (ONRAMP_HOLD_MARKS - 1)];
		grain_us = cfg->max_pause_ns / (1000 * ONRAMP_HOLD_GRAINS);
		if (own_us < m->dep_us && own_us < m->own_us + grain_us)
			return;
	}
	m = &h->mark[h->n & (ONRAMP_HOLD_MARKS - 1)];
	m->own_us = own_us;
	m->dep_us = dep / 1000;
	h->n++;
}

/*
 * The departure time of a segment of flow fl leaving now: the latest of
 * its own, the flow's t_next and the last one given, so that it never
 * goes backwards within a flow. Sets it whenever that is later than its
 * own, also once it has passed: fq orders a flow's packets by departure
 * time, not by arrival, and a held segment can still wait in fq after its
 * time (fq's timer, its per-flow maxrate). A segment whose own time is
 * earlier than that one's, because TCP read its clock before the pause
 * ended and the segment reached this program after, would overtake it.
 * Counts and marks a hold only when the time is still ahead. Returns it.
 */
static __always_inline __u64 depart(struct __sk_buff *skb, struct onramp_flow *fl, __u64 now)
{
	__u64 own = 0, dep;

	if (skb->tstamp_type == EDT_TSTAMP_MONO)
		own = skb->tstamp;
	dep = max_u64(max_u64(own, fl->t_next), fl->last_dep);
	if (dep > own) {
		if (bpf_skb_set_tstamp(skb, dep, EDT_TSTAMP_MONO))
			skb->tstamp = dep;
		if (dep > now) {
			stat_add(&onramp_stats, ONRAMP_STAT_DELAYED, 1);
			mark_hold(skb, own, dep);
		}
	}
	if (dep > fl->last_dep)
		fl->last_dep = dep;
	return dep;
}

/*
 * Whether a data segment of fl leaving now goes without a STAMP: its flow's
 * newest echo was far below T and it was stamped less than a sparse gap
 * ago (ONRAMP_SPARSE_* in onramp.h).
 */
static __always_inline bool sparse(const struct onramp_flow *fl, __u64 now)
{
	struct onramp_config *cfg;

	if (!fl->sparse_gap_ns || now - fl->stamped_at >= fl->sparse_gap_ns)
		return false;
	cfg = onramp_cfg();
	return cfg && !(cfg->flags & ONRAMP_F_STAMP_EVERY);
}

/*
 * When fl's data next needs room for a STAMP, for its socket's sockops
 * program: the end of the quiet gap of a quiet flow, 0 for any other
 * (onramp.h, "Room only where it is used").
 */
static __always_inline __u64 quiet_until(const struct onramp_flow *fl)
{
	struct onramp_config *cfg;

	if (!fl->sparse_gap_ns)
		return 0;
	cfg = onramp_cfg();
	if (!cfg || (cfg->flags & ONRAMP_F_STAMP_EVERY))
		return 0;
	return fl->stamped_at + fl->sparse_gap_ns;
}

/* Writes quiet_until(fl) into the sending socket's onramp_room. */
static __always_inline void tell_room(struct __sk_buff *skb, struct onramp_flow *fl)
{
	struct onramp_room *r;
	struct bpf_sock *sk;

	sk = skb->sk;
	if (!sk)
		return;
	sk = bpf_sk_fullsock(sk);
	if (!sk)
		return;
	r = bpf_sk_storage_get(&onramp_room, sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (!r)
		return;
	r->quiet_until = quiet_until(fl);
	fl->room_stale = 0;
}

/*
 * A data segment leaving: its departure time and its STAMP. The departure
 * time never goes backwards within a flow: it is at least the last one
 * given, and only ever moved later than the segment's own.
 */
static __always_inline void stamp(struct __sk_buff *skb, const struct tcp_pkt *p, const struct tcp_flow *f, __u32 off)
{
	struct onramp_flow_key k = {};
	struct onramp_flow *fl, init = {};
	struct onramp_opt opt;
	__u64 now, tai, dep;

	flow_key(f, true, &k);
	now = bpf_ktime_get_ns();
	fl = bpf_map_lookup_elem(&onramp_flows, &k);
	if (!fl) {
		init.beta = FP_ONE;
		start_from_peer(&k, &init, now);
		bpf_map_update_elem(&onramp_flows, &k, &init, BPF_NOEXIST);
		fl = bpf_map_lookup_elem(&onramp_flows, &k);
		if (!fl) {
			stat_add(&onramp_stats, ONRAMP_STAT_STAMP_FAILED, 1);
			return;
		}
	}
	if (sparse(fl, now)) {
		/* Room that sockops should not have made: tell it when. */
		depart(skb, fl, now);
		tell_room(skb, fl);
		stat_add(&onramp_stats, ONRAMP_STAT_SPARED, 1);
		return;
	}
	fl->stamped_at = now;
	if (fl->sparse_gap_ns || fl->room_stale)
		tell_room(skb, fl);
	tai = bpf_ktime_get_tai_ns();
	dep = depart(skb, fl, now);

	/* The departure on CLOCK_TAI: now's TAI reading plus the wait. */
	opt.kind = TCP_OPT_EXP;
	opt.len = ONRAMP_STAMP_LEN;
	opt.exid = bpf_htons(ONRAMP_EXID_STAMP);
	opt.a = bpf_htonl((__u32)(tai + (dep > now ? dep - now : 0)));
	opt.b = bpf_htonl((__u32)fl->pause_total);
	opt.c = 0;
	if (fill(skb, off, p->l4 + 16, &opt, ONRAMP_STAMP_LEN))
		stat_add(&onramp_stats, ONRAMP_STAT_STAMPED, 1);
	else
		stat_add(&onramp_stats, ONRAMP_STAT_STAMP_FAILED, 1);
}

/* A pure ACK leaving: the newest stamp received on its flow, echoed once. */
static __always_inline void echo(struct __sk_buff *skb, const struct tcp_pkt *p, const struct tcp_flow *f, __u32 off)
{
	struct onramp_flow_key k = {};
	struct onramp_flow *fl;
	struct onramp_opt opt;

	flow_key(f, true, &k);
	fl = bpf_map_lookup_elem(&onramp_flows, &k);
	if (!fl || !fl->rx_fresh) {
		stat_add(&onramp_stats, ONRAMP_STAT_ECHO_EMPTY, 1);
		return;
	}
	opt.kind = TCP_OPT_EXP;
	opt.len = ONRAMP_ECHO_LEN;
	opt.exid = bpf_htons(ONRAMP_EXID_ECHO);
	opt.a = bpf_htonl((__u32)fl->rx_owd);
	opt.b = bpf_htonl(fl->rx_tx);
	opt.c = bpf_htonl(fl->rx_pause);
	if (fill(skb, off, p->l4 + 16, &opt, ONRAMP_ECHO_LEN)) {
		fl->rx_fresh = 0;
		stat_add(&onramp_stats, ONRAMP_STAT_ECHOED, 1);
	} else {
		stat_add(&onramp_stats, ONRAMP_STAT_STAMP_FAILED, 1);
	}
}

/*
 * A segment with no room for a STAMP that still carries the flow's data or
 * its FIN: sockops leaves FINs without room (and finds none when the
 * options are full). It leaves no earlier than the flow's held segments:
 * fq sends a flow's packets in order of departure time, and one let
 * through at its own time would overtake them. The receiver would then
 * see a hole, and the sender, told of it, would take the held segments
 * for lost. A flow this interface never stamped is left alone.
 */
static __always_inline void keep_place(struct __sk_buff *skb, const struct tcp_flow *f)
{
	struct onramp_flow_key k = {};
	struct onramp_flow *fl;

	flow_key(f, true, &k);
	fl = bpf_map_lookup_elem(&onramp_flows, &k);
	if (!fl)
		return;
	depart(skb, fl, bpf_ktime_get_ns());
	if (fl->room_stale)
		tell_room(skb, fl);
}

SEC("tc")
int onramp_egress(struct __sk_buff *skb)
{
	struct tcp_flow f = {};
	struct tcp_pkt p;
	__u32 off, len, data;
	__s64 found = -1;

	if (!tcp_parse(skb, &p, &f))
		return TC_ACT_OK;
	data = payload(skb, &p);
	if (p.doff > 20)
		found = tcp_find_exp_pkt(skb, &p, ONRAMP_EXID_FAMILY, ONRAMP_EXID_MASK);
	if (found < 0 || tcp_exp_id(found) != ONRAMP_EXID_PAD) {
		if (data > 0 || (p.flags & TCP_PKT_FIN))
			keep_place(skb, &f);
		return TC_ACT_OK;
	}
	off = tcp_exp_off(found);
	len = tcp_exp_len(found);
	if (data > 0 && len == ONRAMP_STAMP_LEN)
		stamp(skb, &p, &f, off);
	else if (data == 0 && len == ONRAMP_ECHO_LEN)
		echo(skb, &p, &f, off);
	return TC_ACT_OK;
}

/* A STAMP received: its one-way delay, kept for the next ACK. */
static __always_inline void receive_stamp(const struct onramp_flow_key *k, const struct onramp_opt *opt)
{
	struct onramp_flow *fl, init = {};
	struct clock_peer peer;
	__u64 rx = bpf_ktime_get_tai_ns();
	__s64 offset = 0;
	__u32 err = 0, tx = bpf_ntohl(opt->a);
	__s32 owd;

	stat_add(&onramp_stats, ONRAMP_STAT_RX_STAMPS, 1);
	fl = bpf_map_lookup_elem(&onramp_flows, k);
	if (!fl) {
		init.beta = FP_ONE;
		bpf_map_update_elem(&onramp_flows, k, &init, BPF_NOEXIST);
		fl = bpf_map_lookup_elem(&onramp_flows, k);
		if (!fl)
			return;
	}
	peer_of(k, &peer);
	if (clock_offset_cached(&clock_offsets, &peer, &fl->clk, rx, &offset, &err) != CLOCK_OK) {
		owd = ONRAMP_NO_CLOCK;
		stat_add(&onramp_stats, ONRAMP_STAT_RX_NO_CLOCK, 1);
	} else {
		/* rx - (tx - offset), mod 2^32: tx is TAI mod 2^32. */
		owd = (__s32)((__u32)rx - tx + (__u32)offset);
		if (owd == ONRAMP_NO_CLOCK)
			owd++;
	}
	fl->rx_owd = owd;
	fl->rx_tx = tx;
	fl->rx_pause = bpf_ntohl(opt->b);
	fl->rx_fresh = 1;
}

/* The peer's one-way delay statistics, and its least delay of late. */
static __always_inline struct onramp_peer *peer_sample(const struct onramp_flow_key *k, __s32 owd, __u64 now,
						      const struct onramp_config *cfg)
{
	struct onramp_peer *pr, *init;
	struct clock_peer peer;
	__u32 b, weight, zero = 0;
	__u64 last;

	peer_of(k, &peer);
	pr = bpf_map_lookup_elem(&onramp_peers, &peer);
	if (!pr) {
		init = bpf_map_lookup_elem(&onramp_peer_init, &zero);
		if (!init)
			return NULL;
		init->min_owd = init->min_owd_prev = 0x7fffffff;
		init->min_start = now;
		bpf_map_update_elem(&onramp_peers, &peer, init, BPF_NOEXIST);
		pr = bpf_map_lookup_elem(&onramp_peers, &peer);
		if (!pr)
			return NULL;
	}
	if (owd != ONRAMP_NO_CLOCK) {
		if (cfg->min_window_ns && now - pr->min_start > cfg->min_window_ns) {
			pr->min_owd_prev = pr->min_owd;
			pr->min_owd = 0x7fffffff;
			pr->min_start = now;
		}
		if (owd < pr->min_owd)
			pr->min_owd = owd;
	}
	/*
	 * At most one echo per ONRAMP_PEER_SAMPLE_NS into the histogram and
	 * counters. Signed: a time another CPU just wrote may be ahead of
	 * this one's now.
	 */
	last = *(volatile __u64 *)&pr->sampled_at;
	if ((__s64)(now - last) < ONRAMP_PEER_SAMPLE_NS)
		return pr;
	/*
	 * The weight: the time since the histogram's previous echo, read
	 * once with the check above, so at least one ONRAMP_PEER_SAMPLE_NS
	 * (onramp.h). A first echo weighs one.
	 */
	weight = last ? (__u32)min_u64((now - last) / ONRAMP_PEER_SAMPLE_NS, ONRAMP_PEER_WEIGHT_MAX) : 1;
	pr->sampled_at = now;
	if (owd == ONRAMP_NO_CLOCK) {
		__sync_fetch_and_add(&pr->no_clock, 1);
		return pr;
	}
	__sync_fetch_and_add(&pr->samples, 1);
	if (owd < 0) {
		__sync_fetch_and_add(&pr->negative, 1);
		b = 0;
	} else {
		b = owd_bucket(owd);
	}
	/* The mask, not a compare, is what every verifier keeps as a bound. */
	__sync_fetch_and_add(&pr->hist[b & (ONRAMP_HIST_BUCKETS - 1)], weight);
	return pr;
}

/*
 * The threshold T for a peer: the configured one, or with ONRAMP_F_AUTO_T
 * the least one-way delay of late plus twice the clock's error (§7.1), the
 * error being this host's estimate of its offset to the peer, which it
 * stores in *err (0 when the clock map has none).
 */
static __always_inline __u64 threshold(const struct onramp_config *cfg, const struct onramp_peer *pr,
				       const struct onramp_flow_key *k, struct onramp_flow *fl, __u64 tai,
				       __u32 *err)
{
	struct clock_peer peer;
	__s64 least, offset;

	peer_of(k, &peer);
	if (clock_offset_cached(&clock_offsets, &peer, &fl->clk, tai, &offset, err) != CLOCK_OK)
		*err = 0;
	if (!(cfg->flags & ONRAMP_F_AUTO_T) || !pr)
		return cfg->threshold_ns;
	least = pr->min_owd < pr->min_owd_prev ? pr->min_owd : pr->min_owd_prev;
	if (least < 0 || least >= 0x7fffffff)
		return cfg->threshold_ns;
	return (__u64)least + 2 * (__u64)*err;
}

/*
 * β's EWMA: β_m = (O_B - O_G) / P_BG, clamped to [0, 1], taken only when the
 * flow paused between the two packets' departures (P_BG > 0).
 */
static __always_inline __s64 beta_update(__s64 beta, __s32 o_b, __s32 o_g, __u32 p_bg, __u32 gain)
{
	__s64 d = (__s64)o_b - o_g, m;

	if (d <= 0)
		m = 0;
	else if ((__u64)d >= p_bg)
		m = FP_ONE;
	else
		m = (__s64)(((__u64)d << FP_SHIFT) / p_bg);
	return beta + (((m - beta) * (__s64)gain) >> FP_SHIFT);
}

/*
 * The pause an echo asks for (§3.2): with O the echoed one-way delay and
 * P the pause asserted since the echoed packet left, pause for
 * O - T - β·P when that is positive. The strawman (§3.1) ignores P.
 * Returns the pause in ns, at most max_pause.
 */
static __always_inline __u64 pause_for(__s32 owd, __u32 p_last, __s64 beta, __u64 t, const struct onramp_config *cfg)
{
	__s64 excess = owd;

	if (!(cfg->flags & ONRAMP_F_STRAWMAN))
		excess -= (__s64)(((__u64)p_last * (__u64)beta) >> FP_SHIFT);
	if (excess <= (__s64)t)
		return 0;
	return (__u64)excess - t;
}

/*
 * The flow's pause that has elapsed by now, mod 2^32: what it asserted,
 * less what is still ahead of it. P_LastPktRTT is the pause asserted
 * during the echoed packet's round trip (§3.2); the part of a pause that
 * lies in the future has not drained anything yet, and subtracting it
 * would stop a flow from pausing again while the queue is still there.
 * A STAMP carries the same quantity: a packet leaves no earlier than
 * t_next, when all the pause asserted before it has elapsed.
 */
static __always_inline __u32 elapsed_pause(const struct onramp_flow *fl, __u64 now)
{
	__u64 ahead = fl->t_next > now ? fl->t_next - now : 0;

	return (__u32)(fl->pause_total - ahead);
}

/* An ECHO received: the sender's control. */
static __always_inline void control(struct __sk_buff *skb, const struct onramp_flow_key *k,
				    const struct onramp_opt *opt)
{
	struct onramp_config *cfg = onramp_cfg();
	struct onramp_trace_event *ev;
	struct onramp_flow *fl;
	__u32 zero = 0, *on;
	struct onramp_peer *pr;
	__s32 owd = (__s32)bpf_ntohl(opt->a);
	__u32 tx = bpf_ntohl(opt->b), pause = bpf_ntohl(opt->c), rtt, age, p_last, flags = 0, gap, clk_err = 0;
	__u64 now, tai, t = 0, want = 0, until, added = 0, excess;

	if (!cfg)
		return;
	stat_add(&onramp_stats, ONRAMP_STAT_ECHOES, 1);
	fl = bpf_map_lookup_elem(&onramp_flows, k);
	if (!fl) {
		stat_add(&onramp_stats, ONRAMP_STAT_UNKNOWN_FLOW, 1);
		return;
	}
	now = bpf_ktime_get_ns();
	tai = bpf_ktime_get_tai_ns();
	pr = peer_sample(k, owd, now, cfg);
	if (owd == ONRAMP_NO_CLOCK) {
		stat_add(&onramp_stats, ONRAMP_STAT_NO_CLOCK, 1);
		flags |= ONRAMP_TRACE_NO_CLOCK;
		goto trace;
	}
	/*
	 * A clock whose error for the peer exceeds T/2 can put the one-way
	 * delay on either side of T: it is no clock to act on. With
	 * ONRAMP_F_AUTO_T, T already holds twice the error (threshold()).
	 */
	t = threshold(cfg, pr, k, fl, tai, &clk_err);
	if (2 * (__u64)clk_err > t) {
		stat_add(&onramp_stats, ONRAMP_STAT_NO_CLOCK, 1);
		flags |= ONRAMP_TRACE_COARSE_CLOCK;
		goto trace;
	}

	/*
	 * The packet's RTT on this host's clock alone, and how long ago the
	 * receiver measured it (the RTT less the one-way delay). A sample
	 * measured more than one smoothed RTT ago, or one already used, says
	 * nothing about the queue now.
	 */
	rtt = (__u32)tai - tx;
	age = rtt - (__u32)owd;
	if ((fl->have_prev && tx == fl->prev_tx) || (fl->srtt_ns && (__s32)age > 0 && age > fl->srtt_ns)) {
		stat_add(&onramp_stats, ONRAMP_STAT_STALE, 1);
		flags |= ONRAMP_TRACE_STALE;
		goto trace;
	}
	if ((__s32)rtt > 0)
		fl->srtt_ns = fl->srtt_ns ? fl->srtt_ns - (fl->srtt_ns >> 3) + (rtt >> 3) : rtt;

	if (fl->have_prev && pause != fl->prev_pause) {
		fl->beta = beta_update(fl->beta, fl->prev_owd, owd, pause - fl->prev_pause, cfg->gain);
		stat_add(&onramp_stats, ONRAMP_STAT_BETA_SAMPLES, 1);
		flags |= ONRAMP_TRACE_BETA;
	}
	p_last = elapsed_pause(fl, now) - pause;
	excess = owd > (__s64)t ? (__u64)owd - t : 0;
	/*
	 * The peer's newest excess, for new flows (start_from_peer): at once
	 * when it turns zero or non-zero, otherwise at most once per
	 * ONRAMP_PEER_SAMPLE_NS, or per max_pause if that is shorter, so that
	 * it never looks older than start_from_peer takes; a zero excess that
	 * stays zero needs no write.
	 */
	if (pr && ((!excess != !pr->last_excess) ||
		   (excess && (__s64)(now - pr->last_owd_at) >=
				      (__s64)min_u64(ONRAMP_PEER_SAMPLE_NS, cfg->max_pause_ns)))) {
		pr->last_owd = owd;
		pr->last_owd_at = now;
		pr->last_excess = excess;
	}
	/*
	 * Quiet: the flow's data needs stamps only now and then. A change
	 * reaches the socket's sockops program with the flow's next segment
	 * (tell_room).
	 */
	gap = owd >= 0 && (__u64)owd < t / ONRAMP_SPARSE_BELOW ? (__u32)min_u64(t / ONRAMP_SPARSE_EVERY, 0xffffffff) : 0;
	if (gap != fl->sparse_gap_ns) {
		fl->sparse_gap_ns = gap;
		fl->room_stale = 1;
	}
	want = pause_for(owd, p_last, fl->beta, t, cfg);
	if (want > cfg->max_pause_ns) {
		want = cfg->max_pause_ns;
		flags |= ONRAMP_TRACE_CLAMPED;
		if (!(cfg->flags & ONRAMP_F_OBSERVE))
			stat_add(&onramp_stats, ONRAMP_STAT_CLAMPED, 1);
	}
	if (want && (cfg->flags & ONRAMP_F_OBSERVE)) {
		/* Only the trace says what this echo would have done. */
		added = want;
		want = 0;
		flags |= ONRAMP_TRACE_OBSERVED;
	}
	until = now + want;
	if (want && until > fl->t_next) {
		added = until - max_u64(fl->t_next, now);
		fl->t_next = until;
		fl->pause_total += added;
		fl->pauses++;
		stat_add(&onramp_stats, ONRAMP_STAT_PAUSES, 1);
		stat_add(&onramp_stats, ONRAMP_STAT_PAUSE_NS, added);
		if (pr) {
			__sync_fetch_and_add(&pr->pauses, 1);
			__sync_fetch_and_add(&pr->pause_ns, added);
		}
		flags |= ONRAMP_TRACE_PAUSED;
	}
	fl->prev_owd = owd;
	fl->prev_pause = pause;
	fl->prev_tx = tx;
	fl->have_prev = 1;
	fl->samples++;
	fl->last_echo = now;

trace:
	on = bpf_map_lookup_elem(&onramp_trace_on, &zero);
	if (!on || !*on)
		return;
	ev = bpf_ringbuf_reserve(&onramp_trace, sizeof(*ev), 0);
	if (!ev)
		return;
	ev->ts_ns = now;
	ev->flow = *k;
	ev->owd_ns = owd;
	ev->p_last_ns = elapsed_pause(fl, now) - pause;
	ev->beta = fl->beta;
	ev->t_next = fl->t_next;
	ev->threshold_ns = t;
	ev->pause_ns = added;
	ev->rtt_ns = (__u32)tai - tx;
	ev->flags = flags;
	bpf_ringbuf_submit(ev, 0);
}

SEC("tc")
int onramp_ingress(struct __sk_buff *skb)
{
	struct onramp_flow_key k = {};
	struct onramp_opt opt = {};
	struct tcp_flow f = {};
	struct tcp_pkt p;
	__u32 off, len;
	__s64 found;
	__u16 exid;
	__u8 *o;

	if (!tcp_parse(skb, &p, &f) || p.doff <= 20)
		return TC_ACT_OK;
	found = tcp_find_exp_pkt(skb, &p, ONRAMP_EXID_FAMILY, ONRAMP_EXID_MASK);
	if (found < 0)
		return TC_ACT_OK;
	off = tcp_exp_off(found);
	len = tcp_exp_len(found);
	exid = tcp_exp_id(found);
	if (exid == ONRAMP_EXID_PAD)
		return TC_ACT_OK;
	if ((exid == ONRAMP_EXID_STAMP && len != ONRAMP_STAMP_LEN) ||
	    (exid == ONRAMP_EXID_ECHO && len != ONRAMP_ECHO_LEN) ||
	    (exid != ONRAMP_EXID_STAMP && exid != ONRAMP_EXID_ECHO)) {
		stat_add(&onramp_stats, ONRAMP_STAT_MALFORMED, 1);
		return TC_ACT_OK;
	}
	/* Read in place: tcp_parse made the headers linear. */
	o = (__u8 *)(long)skb->data + (off & 0xff); /* off < ETH_HLEN + 120: the mask bounds it */
	if (len == ONRAMP_STAMP_LEN) {
		if (o + ONRAMP_STAMP_LEN > (__u8 *)(long)skb->data_end)
			return TC_ACT_OK;
		__builtin_memcpy(&opt, o, ONRAMP_STAMP_LEN);
	} else {
		if (o + ONRAMP_ECHO_LEN > (__u8 *)(long)skb->data_end)
			return TC_ACT_OK;
		__builtin_memcpy(&opt, o, ONRAMP_ECHO_LEN);
	}
	flow_key(&f, false, &k);
	if (exid == ONRAMP_EXID_STAMP)
		receive_stamp(&k, &opt);
	else
		control(skb, &k, &opt);
	return TC_ACT_OK;
}
