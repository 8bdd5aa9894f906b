// SPDX-License-Identifier: GPL-2.0
/*
 * edt_delay: a tc program that gives every packet an earliest departure
 * time (EDT) a fixed delay in the future:
 *
 *     skb->tstamp = max(skb->tstamp, now + delay)
 *
 * now is bpf_ktime_get_ns(), CLOCK_MONOTONIC, the clock sch_fq compares
 * skb->tstamp against. The program only stamps packets; the delay happens
 * in an fq root qdisc on the same interface, which holds each packet until
 * its departure time. Without fq (or etf) the stamp is ignored and packets
 * leave at once.
 *
 * Attach it on egress (TCX, or clsact with cls_bpf in direct-action
 * mode). It never drops, redirects or changes a packet's bytes: it always
 * returns TC_ACT_OK.
 *
 * Ordering: fq keeps each flow's packets sorted by departure time, so a
 * flow whose departure times went backwards would be reordered. They do
 * not go backwards here: TCP's own departure times (its pacing,
 * tp->tcp_wstamp_ns) never decrease within a socket, now + delay never
 * decreases while delay is constant, and the maximum of two
 * non-decreasing sequences does not decrease either. Two limits:
 *   - lowering the delay at run time can make later packets depart before
 *     earlier ones: change it only while the path is idle;
 *   - bpf_ktime_get_ns() is ktime_get_mono_fast_ns(), which may read a
 *     few nanoseconds early while the timekeeper is being updated.
 * Both go away with a per-flow last departure time kept in a map, which
 * On-Ramp needs for its per-flow pauses anyway; departure_time() below is
 * the seam for it.
 *
 * Only a departure time that is a CLOCK_MONOTONIC delivery time
 * (skb->tstamp_type == EDT_TSTAMP_MONO) is kept. Anything else in
 * skb->tstamp (a receive timestamp, a TAI transmit time) is on another
 * clock and cannot be compared with now; it is replaced.
 *
 * Config: the one-entry array "edt_config" (struct edt_config), written by
 * the Go side (qdisc/edt.go). delay_ns == 0 passes packets through
 * untouched. Counters: the per-CPU array "edt_stats", one u64 per
 * enum edt_stat, named in the same order by qdisc/edt.go.
 */
#include "include/ccload.h"

char _license[] SEC("license") = "GPL";

/* Not in vmlinux.h: these are #defines in the kernel's headers. */
#define TC_ACT_OK 0

/*
 * __sk_buff->tstamp_type of a CLOCK_MONOTONIC delivery time:
 * BPF_SKB_TSTAMP_DELIVERY_MONO (5.18) and BPF_SKB_CLOCK_MONOTONIC (6.11)
 * are both 1. Spelled out, because 6.1's UAPI only has the first name and
 * 6.11+ the second as well.
 */
#define EDT_TSTAMP_MONO 1

/*
 * Run-time configuration. Append fields only: the Go side writes the whole
 * struct in one map update, and checks its layout against this object's
 * BTF.
 */
struct edt_config {
	__u64 delay_ns;		/* added to now; 0 = pass through */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct edt_config);
} edt_config SEC(".maps");

/* Counters. Append only: the index is the ABI. */
enum edt_stat {
	EDT_STAT_PACKETS = 0,	/* packets seen while delay_ns > 0 */
	EDT_STAT_DELAYED,	/* departure time set to now + delay */
	EDT_STAT_KEPT,		/* a later departure time already set was kept */
	EDT_STAT_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EDT_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} edt_stats SEC(".maps");

static __always_inline void edt_count(__u32 key)
{
	__u64 *v = bpf_map_lookup_elem(&edt_stats, &key);

	if (v)
		*v += 1;
}

/*
 * The departure time already on the packet, or 0 when it has none on
 * CLOCK_MONOTONIC.
 */
static __always_inline __u64 current_departure(const struct __sk_buff *skb)
{
	if (skb->tstamp_type != EDT_TSTAMP_MONO)
		return 0;
	return skb->tstamp;
}

/*
 * The departure time the packet should get: never earlier than the one it
 * has, never earlier than now + delay.
 */
static __always_inline __u64 departure_time(__u64 delay_ns, __u64 now,
					    __u64 current)
{
	return max_u64(current, now + delay_ns);
}

SEC("tc")
int edt_delay(struct __sk_buff *skb)
{
	struct edt_config *cfg;
	__u64 delay, current, t;
	__u32 zero = 0;

	cfg = bpf_map_lookup_elem(&edt_config, &zero);
	if (!cfg)
		return TC_ACT_OK;
	/* One read: the Go side may rewrite the config at any time. */
	delay = cfg->delay_ns;
	if (!delay)
		return TC_ACT_OK;
	edt_count(EDT_STAT_PACKETS);

	current = current_departure(skb);
	t = departure_time(delay, bpf_ktime_get_ns(), current);
	if (t == current) {
		edt_count(EDT_STAT_KEPT);
		return TC_ACT_OK;
	}

	/*
	 * The helper also marks the stamp as a monotonic delivery time, so
	 * the stack does not take it for a receive timestamp. It handles IPv4
	 * and IPv6 only; other packets (ARP) get the plain store, which fq
	 * honours just the same.
	 */
	if (bpf_skb_set_tstamp(skb, t, EDT_TSTAMP_MONO))
		skb->tstamp = t;
	edt_count(EDT_STAT_DELAYED);
	return TC_ACT_OK;
}
