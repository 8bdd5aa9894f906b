// SPDX-License-Identifier: GPL-2.0
/*
 * clock: the clock map (include/clock.h), the object the clock-offset
 * agent creates it from, so that the map carries the BTF its spin lock
 * needs; clock_scrub, which keeps the receive stamps the agent turns on
 * out of fq; and clock_read, a reader of the map run by the agent's tests
 * under BPF_PROG_TEST_RUN. It reads as a data-path program would, through
 * clock_offset_at, which proves that the layout the agent writes is the one
 * the C side reads.
 */
#include "include/ccload.h"
#include "include/clock.h"

char _license[] SEC("license") = "GPL";

#define TC_NEXT -1 /* TC_ACT_UNSPEC, TCX_NEXT: let the next program run */

/*
 * How old a wall-clock receive stamp may be, plus how far CLOCK_TAI may run
 * ahead of CLOCK_REALTIME (the TAI offset, 37 s since 2017): a receive stamp
 * lies within this span before bpf_ktime_get_tai_ns().
 */
#define SCRUB_SPAN_NS (128ULL * 1000000000ULL)

/*
 * clock_scrub, at the egress of every interface of the agent's network
 * namespace. The agent asks for software receive timestamps
 * (SOF_TIMESTAMPING_RX_SOFTWARE), which turns on the kernel's global
 * netstamp: from then on every packet the host receives carries a
 * CLOCK_REALTIME receive stamp in skb->tstamp. fq reads skb->tstamp as a
 * CLOCK_MONOTONIC departure time, so a received packet that some path sends
 * on with its stamp (multicast routing, tc mirred mirror) lies decades
 * beyond fq's horizon and is dropped. This program clears such a stamp
 * before the packet reaches the root qdisc.
 *
 * It clears only what is certainly a receive stamp: a realtime stamp
 * (tstamp_type 0, never a delivery time the stack set) that lies in the
 * past on the wall clock, within SCRUB_SPAN_NS. A CLOCK_MONOTONIC
 * departure time is far older than that, and a SO_TXTIME launch time
 * lies in the future. No qdisc can use a past wall-clock time as a
 * departure time, so clearing it changes nothing but the drop.
 */
SEC("tc")
int clock_scrub(struct __sk_buff *skb)
{
	__u64 stamp = skb->tstamp;
	__u64 now;

	if (!stamp || skb->tstamp_type != 0)
		return TC_NEXT;
	now = bpf_ktime_get_tai_ns();
	if (stamp <= now && now - stamp <= SCRUB_SPAN_NS)
		skb->tstamp = 0;
	return TC_NEXT;
}

CLOCK_OFFSETS_MAP;

/* clock_read's input, after a 14-byte Ethernet header in the test packet. */
struct clock_read_in {
	struct clock_peer peer;
	__u64 now_ns;
};

/* clock_read's output: the one entry of clock_read_out. */
struct clock_read_result {
	__s64 offset_ns;
	__u32 error_ns;
	__u32 status;		/* CLOCK_OK, CLOCK_NO_PEER, CLOCK_EXPIRED */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct clock_read_result);
} clock_read_out SEC(".maps");

#define CLOCK_READ_BAD_INPUT 255

SEC("tc")
int clock_read(struct __sk_buff *skb)
{
	struct clock_read_result *out;
	struct clock_read_in in;
	__u32 zero = 0;

	out = bpf_map_lookup_elem(&clock_read_out, &zero);
	if (!out)
		return 0;
	if (bpf_skb_load_bytes(skb, 14, &in, sizeof(in)) < 0) {
		out->status = CLOCK_READ_BAD_INPUT;
		return 0;
	}
	out->offset_ns = 0;
	out->error_ns = 0;
	out->status = clock_offset_at(&clock_offsets, &in.peer, in.now_ns,
				      &out->offset_ns, &out->error_ns);
	return 0;
}
