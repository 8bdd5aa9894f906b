// SPDX-License-Identifier: GPL-2.0
/*
 * int_hop: a software INT hop. Attached to the egress of a forwarding
 * interface (TCX, or clsact before 6.6), it writes its hop record into the
 * first empty slot of every forward INT option that passes
 * (docs/int-option.md), and keeps the TCP checksum valid.
 *
 * The queue length it reports comes from a model of the shaper it runs
 * beside, a token bucket like htb's and tbf's: tokens accrue at the rate up
 * to a burst; a packet that finds no queue and enough tokens leaves at once,
 * any other joins a virtual queue that drains at the rate, bounded by the
 * buffer (packets that would overflow it count as drops, as the real queue
 * drops them). tc egress runs before the qdisc, so each record describes
 * the queue the packet joins: the bytes in front of it, the bytes sent so
 * far, and the time.
 *
 * Optionally it marks CE, DCTCP style, on ECT packets that find more than
 * ecn_threshold bytes queued.
 *
 * ACK padding (FastTune): int_hop_ack, attached to the ingress of the same
 * interface, sees the receivers' ACKs on their way back. When an ACK carries
 * an ECHO option for a flow this hop wrote into, it overwrites this hop's
 * slot in the echo with the link's state as of now. The sender then learns
 * the queue one queueing delay and one receiver turnaround sooner than from
 * the record the data packet carried. The egress program remembers, per
 * flow, which slot it wrote (hop_flows), because hops fill the first empty
 * slot and the receiver echoes the slots in place.
 */
#include "include/ccload.h"
#include "include/int.h"
#include "include/tcpkt.h"
#include <bpf/bpf_endian.h>

char _license[] SEC("license") = "GPL";

#define INET_ECN_MASK 3
#define INET_ECN_CE 3

/* Configuration, written by the loader (ccload int hop). */
struct hop_config {
	__u64 rate_bps;		/* the shaper's rate */
	__u32 rate_code;	/* the rate's INT code (1..12) */
	__u32 buffer_bytes;	/* the shaper's queue limit */
	__u32 ecn_threshold;	/* mark CE above this many queued bytes; 0 = off */
	__u32 burst_bytes;	/* the shaper's bucket size (htb/tbf burst) */
	__u32 ack_padding;	/* 1: int_hop_ack refreshes echoes (it is attached) */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hop_config);
} hop_config SEC(".maps");

/* The virtual queue, shared by every CPU that transmits on the port. */
struct hop_queue {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 backlog;		/* bytes queued now */
	__u64 enqueued;		/* bytes ever accepted */
	__u64 last_ns;		/* when backlog was last drained */
	__u64 drops;		/* packets the buffer could not take */
	__u64 tokens;		/* bytes the shaper may send at once */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hop_queue);
} hop_queue SEC(".maps");

/* Counters, named in telemetry/hop (Stats, readStats); append only. */
enum hop_stat {
	HOP_STAT_PACKETS = 0,	/* packets seen */
	HOP_STAT_RECORDS,	/* hop records written */
	HOP_STAT_FULL,		/* forward options with no empty slot left */
	HOP_STAT_MALFORMED,	/* forward options not written: bad length or slots */
	HOP_STAT_CE_MARKED,	/* packets marked CE */
	HOP_STAT_ACKS_PADDED,	/* echo slots refreshed on ACKs (ACK padding) */
	HOP_STAT_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, HOP_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} hop_stats SEC(".maps");

/*
 * The slot this hop wrote for a flow, for int_hop_ack; the flow as its data
 * crosses the hop, from src to dst.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct tcp_flow);
	__type(value, __u32);
} hop_flows SEC(".maps");

/* A record of the queue as one packet joins it. */
struct hop_sample {
	__u64 backlog;		/* bytes ahead of the packet */
	__u64 sent;		/* bytes sent so far */
	__u64 now;
};

/* Drains the virtual queue up to now and adds the packet, under the lock. */
static __always_inline void queue_join(struct hop_queue *q, const struct hop_config *cfg,
				       __u32 len, struct hop_sample *s)
{
	__u64 now = bpf_ktime_get_ns(), credit = 0, d;

	bpf_spin_lock(&q->lock);
	if (q->last_ns && now > q->last_ns)
		/* bytes the link could send since the last packet: rate·dt/8 */
		credit = (now - q->last_ns) * (cfg->rate_bps / 8) / 1000000000ULL;
	if (now > q->last_ns)
		q->last_ns = now;
	/* The queue drains first; what is left fills the bucket. */
	d = credit < q->backlog ? credit : q->backlog;
	q->backlog -= d;
	credit -= d;
	q->tokens += credit;
	if (q->tokens > cfg->burst_bytes)
		q->tokens = cfg->burst_bytes;

	s->backlog = q->backlog;
	s->sent = q->enqueued - q->backlog;
	if (q->backlog == 0 && q->tokens >= len) {
		q->tokens -= len;	/* leaves at once, within the burst */
		q->enqueued += len;
	} else if (q->backlog + len > cfg->buffer_bytes) {
		q->drops++;
	} else {
		q->backlog += len;
		q->enqueued += len;
	}
	bpf_spin_unlock(&q->lock);
	s->now = now;
}

/* Sets CE on an ECT packet, fixing the IPv4 header checksum. */
static __always_inline bool mark_ce(struct __sk_buff *skb, __u32 l3, bool v6)
{
	__u8 b[2];

	if (bpf_skb_load_bytes(skb, l3, b, 2))
		return false;
	if (v6) {
		/* traffic class straddles bytes 0 and 1: ECN is bits 4-5 of byte 1 */
		__u8 ecn = (b[1] >> 4) & INET_ECN_MASK;

		if (ecn == 0 || ecn == INET_ECN_CE)
			return false;
		b[1] |= INET_ECN_CE << 4;
		return bpf_skb_store_bytes(skb, l3 + 1, &b[1], 1, 0) == 0;
	}
	if ((b[1] & INET_ECN_MASK) == 0 || (b[1] & INET_ECN_MASK) == INET_ECN_CE)
		return false;
	{
		__be16 old = *(__be16 *)b, new;

		b[1] |= INET_ECN_CE;
		new = *(__be16 *)b;
		if (bpf_l3_csum_replace(skb, l3 + 10, old, new, 2))
			return false;
		return bpf_skb_store_bytes(skb, l3 + 1, &b[1], 1, 0) == 0;
	}
}

/* The number of slots of an option of length len, or 0 if len is bad. */
static __always_inline __u32 opt_slots(__u32 len)
{
	if (len < INT_OPT_LEN(1) || len > INT_OPT_LEN(INT_MAX_HOPS) || (len - INT_OPT_HDR) % INT_HOP_SIZE)
		return 0;
	return (len - INT_OPT_HDR) / INT_HOP_SIZE;
}

/*
 * Replaces the 8-byte slot at off with word, and adjusts the TCP checksum
 * at csum_off by the difference.
 */
static __always_inline bool store_slot(struct __sk_buff *skb, __u32 off, __u32 csum_off, __u64 word)
{
	__u64 new_be = bpf_cpu_to_be64(word);

	return tcp_store_csum(skb, off, csum_off, &new_be, sizeof(new_be));
}

/*
 * Writes word into the first empty slot of the forward option at opt
 * (offset of its kind byte); len is the option's length. Returns the slot
 * written, or -1.
 */
static __always_inline int write_record(struct __sk_buff *skb, __u32 opt, __u32 len,
					__u32 csum_off, __u64 word)
{
	__u32 i, n = opt_slots(len), off;
	__u64 slot_be;

	if (!n) {
		stat_add(&hop_stats, HOP_STAT_MALFORMED, 1);
		return -1;
	}
	for (i = 0; i < INT_MAX_HOPS; i++) {
		if (i >= n)
			break;
		off = opt + INT_OPT_HDR + i * INT_HOP_SIZE;
		if (bpf_skb_load_bytes(skb, off, &slot_be, sizeof(slot_be)))
			return -1;
		if (slot_be)
			continue;
		if (!store_slot(skb, off, csum_off, word)) {
			stat_add(&hop_stats, HOP_STAT_MALFORMED, 1);
			return -1;
		}
		stat_add(&hop_stats, HOP_STAT_RECORDS, 1);
		return i;
	}
	stat_add(&hop_stats, HOP_STAT_FULL, 1);
	return -1;
}

/* Remembers that this hop wrote slot for the flow, if that is news. */
static __always_inline void remember_slot(const struct tcp_flow *key, __u32 slot)
{
	__u32 *old = bpf_map_lookup_elem(&hop_flows, key);

	if (!old || *old != slot)
		bpf_map_update_elem(&hop_flows, key, &slot, BPF_ANY);
}

SEC("tc")
int int_hop(struct __sk_buff *skb)
{
	struct tcp_flow key = {};
	struct hop_config *cfg;
	struct hop_queue *q;
	struct hop_sample s;
	struct tcp_pkt p;
	__u32 zero = 0, optlen, len, opt;
	__s64 found;
	int slot;

	cfg = bpf_map_lookup_elem(&hop_config, &zero);
	q = bpf_map_lookup_elem(&hop_queue, &zero);
	if (!cfg || !q || !cfg->rate_bps)
		return TC_ACT_OK;
	stat_add(&hop_stats, HOP_STAT_PACKETS, 1);

	if (!tcp_parse(skb, &p, &key)) {
		/* Not TCP over IP: it still takes its place in the queue. */
		queue_join(q, cfg, skb->len, &s);
		return TC_ACT_OK;
	}

	/*
	 * The bytes the shaper counts: like qdisc_pkt_len(), a GSO packet
	 * costs its headers once per segment it becomes.
	 */
	len = skb->len;
	if (skb->gso_segs > 1)
		len += (skb->gso_segs - 1) * (p.l4 + p.doff);
	queue_join(q, cfg, len, &s);

	if (cfg->ecn_threshold && s.backlog > cfg->ecn_threshold && mark_ce(skb, p.l3, p.v6))
		stat_add(&hop_stats, HOP_STAT_CE_MARKED, 1);

	if (p.doff <= 20)
		return TC_ACT_OK;
	found = tcp_find_exp_pkt(skb, &p, INT_EXID_FORWARD, 0xff);
	if (found < 0)
		return TC_ACT_OK;
	opt = tcp_exp_off(found);
	optlen = tcp_exp_len(found);
	slot = write_record(skb, opt, optlen, p.l4 + 16,
			    int_hop_word(cfg->rate_code, s.now, s.sent, s.backlog));
	if (slot >= 0)
		remember_slot(&key, slot);
	return TC_ACT_OK;
}

/*
 * ACK padding: on the ingress of the hop's interface, refresh this hop's
 * slot in the ECHO options of ACKs flowing back to senders whose data the
 * egress program stamped.
 */
SEC("tc")
int int_hop_ack(struct __sk_buff *skb)
{
	struct tcp_flow ack = {}, key = {};
	struct hop_config *cfg;
	struct hop_queue *q;
	struct hop_sample s;
	struct tcp_pkt p;
	__u32 zero = 0, optlen, n, off, *slot, opt;
	__s64 found;
	__u64 old_be;

	cfg = bpf_map_lookup_elem(&hop_config, &zero);
	q = bpf_map_lookup_elem(&hop_queue, &zero);
	if (!cfg || !q || !cfg->rate_bps || !cfg->ack_padding)
		return TC_ACT_OK;
	if (!tcp_parse(skb, &p, &ack) || p.doff <= 20)
		return TC_ACT_OK;
	found = tcp_find_exp_pkt(skb, &p, INT_EXID_ECHO, 0xff);
	if (found < 0)
		return TC_ACT_OK;
	opt = tcp_exp_off(found);
	optlen = tcp_exp_len(found);

	/* The ACK's flow, turned around, is the data's. */
	__builtin_memcpy(key.src, ack.dst, sizeof(key.src));
	__builtin_memcpy(key.dst, ack.src, sizeof(key.dst));
	key.sport = ack.dport;
	key.dport = ack.sport;
	key.v6 = ack.v6;
	slot = bpf_map_lookup_elem(&hop_flows, &key);
	n = opt_slots(optlen);
	if (!slot || *slot >= n || *slot >= INT_MAX_HOPS)
		return TC_ACT_OK;
	off = opt + INT_OPT_HDR + *slot * INT_HOP_SIZE;
	if (bpf_skb_load_bytes(skb, off, &old_be, sizeof(old_be)))
		return TC_ACT_OK;
	/* Only a slot that holds a record of this link's rate is ours. */
	if (int_hop_rate_code(bpf_be64_to_cpu(old_be)) != cfg->rate_code)
		return TC_ACT_OK;

	queue_join(q, cfg, 0, &s);	/* drain to now; adds nothing */
	if (store_slot(skb, off, p.l4 + 16, int_hop_word(cfg->rate_code, s.now, s.sent, s.backlog)))
		stat_add(&hop_stats, HOP_STAT_ACKS_PADDED, 1);
	return TC_ACT_OK;
}
