/* SPDX-License-Identifier: GPL-2.0 */
/*
 * tcpkt.h: TCP segments as tc programs see them. One parser of the
 * Ethernet/IP/TCP headers and one walker of the TCP options area, shared by
 * the programs that read or rewrite ccload's experimental options (the INT
 * hop, bpf/int_hop.c; On-Ramp, bpf/onramp.c).
 *
 * Options of ccload's experiments use kind 253 with a 16-bit ExID after
 * the length (RFC 6994): INT 0xCC1x (docs/int-option.md), On-Ramp 0xCC2x
 * (docs/onramp-option.md).
 */
#ifndef CCLOAD_TCPKT_H
#define CCLOAD_TCPKT_H

#include <bpf/bpf_endian.h>

#ifndef TC_ACT_OK
#define TC_ACT_OK 0
#endif
#define ETH_HLEN 14
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define IPPROTO_TCP 6

/* The experimental option kind (RFC 4727) that RFC 6994 ExIDs share. */
#define TCP_OPT_EXP 253
/* Kind, length and ExID: the bytes before an experiment's data. */
#define TCP_OPT_EXP_HDR 4
/* TCP's options area is at most 40 bytes. */
#ifndef TCP_OPTIONS_MAX
#define TCP_OPTIONS_MAX 40
#endif

/* Where a TCP segment's headers are. */
struct tcp_pkt {
	__u32 l3, l4, doff;	/* offsets of IP and TCP; TCP header length */
	bool v6;
};

/*
 * A segment's addresses and ports as it travels: IPv4 in src[0] and dst[0]
 * (the rest zero), ports in network order, as on the wire.
 */
struct tcp_flow {
	__u32 src[4];
	__u32 dst[4];
	__u16 sport;
	__u16 dport;
	__u32 v6;
};

/*
 * Parses an Ethernet frame as TCP over IPv4 or IPv6 (no extension headers,
 * not a fragment). If flow is not NULL it receives the addresses and ports.
 * Returns false for anything else.
 */
static __always_inline bool tcp_parse(struct __sk_buff *skb, struct tcp_pkt *p, struct tcp_flow *flow)
{
	__u8 b[2];

	p->l3 = ETH_HLEN;
	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		__u8 vihl, proto;

		p->v6 = false;
		if (bpf_skb_load_bytes(skb, p->l3, &vihl, 1) || bpf_skb_load_bytes(skb, p->l3 + 9, &proto, 1) ||
		    (vihl >> 4) != 4)
			return false;
		p->l4 = p->l3 + (vihl & 0xf) * 4;
		/* Only the first fragment has the TCP header; skip fragments. */
		if (proto != IPPROTO_TCP || bpf_skb_load_bytes(skb, p->l3 + 6, b, 2) || ((b[0] & 0x3f) | b[1]))
			return false;
		if (flow && (bpf_skb_load_bytes(skb, p->l3 + 12, &flow->src[0], 4) ||
			     bpf_skb_load_bytes(skb, p->l3 + 16, &flow->dst[0], 4)))
			return false;
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		__u8 next;

		p->v6 = true;
		if (bpf_skb_load_bytes(skb, p->l3 + 6, &next, 1) || next != IPPROTO_TCP)
			return false;
		p->l4 = p->l3 + 40;
		if (flow && (bpf_skb_load_bytes(skb, p->l3 + 8, flow->src, 16) ||
			     bpf_skb_load_bytes(skb, p->l3 + 24, flow->dst, 16)))
			return false;
	} else {
		return false;
	}
	if (flow) {
		flow->v6 = p->v6;
		if (bpf_skb_load_bytes(skb, p->l4, &flow->sport, 2) ||
		    bpf_skb_load_bytes(skb, p->l4 + 2, &flow->dport, 2))
			return false;
	}
	if (bpf_skb_load_bytes(skb, p->l4 + 12, b, 1))
		return false;
	p->doff = (b[0] >> 4) * 4;
	return p->doff >= 20;
}

/*
 * Finds the first kind-253 option with an ExID of the family exid/mask:
 * its high byte equal to exid's, and its low byte equal to exid's under
 * mask (0xff: exactly exid; 0xf0: the 16 ExIDs 0xXXY0 to 0xXXYF), in the
 * TCP header at l4. Returns -1 when there is none, or an
 * options area whose TLVs do not walk; else the option's offset in the
 * packet << 32 | its length byte << 16 | its ExID (tcp_exp_off,
 * tcp_exp_len, tcp_exp_id take them apart).
 *
 * A global function, verified once on its own: inlined, the walk's many
 * outcomes made the verifier go through the rest of the program once per
 * outcome (about 450,000 instructions per program); from here the caller
 * gets one unknown, bounded result.
 */
__attribute__((noinline)) __s64 tcp_find_exp(struct __sk_buff *skb, __u32 l4, __u32 exid, __u32 mask)
{
	__u8 opts[TCP_OPTIONS_MAX];
	__u32 doff, optlen, i, next = 0;
	__u8 b;

	if (!skb)
		return -1;
	/*
	 * The header length is read here, not taken from the caller: from the
	 * byte's top four bits the verifier knows its range, and so the load's
	 * size (6.1's verifier cannot bound a length it only gets as an
	 * argument).
	 */
	if (bpf_skb_load_bytes(skb, l4 + 12, &b, 1))
		return -1;
	doff = (b >> 4) * 4;
	if (doff <= 20)
		return -1;
	optlen = doff - 20;
	if (bpf_skb_load_bytes(skb, l4 + 20, opts, optlen))
		return -1;
	/*
	 * The loop visits every byte; an option is read where the previous
	 * one ended (next). Indexing by the loop counter, not by next, keeps
	 * next out of the verifier's precise state, so it prunes.
	 */
	for (i = 0; i < TCP_OPTIONS_MAX; i++) {
		__u32 kind, l;

		if (i >= optlen)
			return -1;
		if (i != next)
			continue;
		kind = opts[i];
		if (kind == 0)
			return -1;
		if (kind == 1) {
			next = i + 1;
			continue;
		}
		if (i + 1 >= TCP_OPTIONS_MAX)
			return -1;
		l = opts[i + 1];
		if (l < 2 || i + l > optlen)
			return -1;
		if (kind == TCP_OPT_EXP && l >= TCP_OPT_EXP_HDR && i + 3 < TCP_OPTIONS_MAX &&
		    opts[i + 2] == ((exid >> 8) & 0xff) && (opts[i + 3] & mask) == (exid & mask))
			return ((__s64)(l4 + 20 + i) << 32) | ((__s64)l << 16) | (((exid & 0xff00) | opts[i + 3]) & 0xffff);
		next = i + l;
	}
	return -1;
}

static __always_inline __u32 tcp_exp_off(__s64 r) { return (__u32)(r >> 32) & 0xffff; }
static __always_inline __u32 tcp_exp_len(__s64 r) { return (r >> 16) & 0xff; }
static __always_inline __u16 tcp_exp_id(__s64 r) { return r & 0xffff; }

/*
 * Replaces n bytes (a multiple of 4, at most 16) at off, which hold old,
 * with new, and adjusts the TCP checksum at csum_off by the difference.
 * 16-bit checksum arithmetic needs an even offset: an odd one is refused.
 */
static __always_inline bool tcp_store_csum(struct __sk_buff *skb, __u32 off, __u32 csum_off,
					   void *old, void *new, __u32 n)
{
	__s64 diff;

	if ((off & 1) || n == 0 || n > 16 || (n & 3))
		return false;
	diff = bpf_csum_diff(old, n, new, n, 0);
	if (diff < 0)
		return false;
	if (bpf_skb_store_bytes(skb, off, new, n, 0))
		return false;
	return bpf_l4_csum_replace(skb, csum_off, 0, diff, 0) == 0;
}

#endif /* CCLOAD_TCPKT_H */
