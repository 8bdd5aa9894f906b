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

/* Where a TCP segment's headers are, and its flags. */
struct tcp_pkt {
	__u32 l3, l4, doff;	/* offsets of IP and TCP; TCP header length */
	bool v6;
	__u8 flags;		/* the TCP header's flags byte (FIN 0x01) */
};

#define TCP_PKT_FIN 0x01

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
 * The headers are read and written in place (direct packet access), not
 * through bpf_skb_load_bytes and friends: a helper call per field cost
 * more than everything else On-Ramp does per packet (docs/benchmarks.md,
 * "What the programs cost on this host").
 * tcp_parse_linear reads them from the skb's linear part; when they are
 * not all there, tcp_parse pulls in as many bytes as the longest headers
 * take (TCP_PKT_HDRS_MAX, or the whole frame if it is shorter) and reads
 * again: one pull, because a parse that stops at a short IP header cannot
 * yet know how long the TCP header is. A TCP sender's segments have every
 * header in the linear part (only a GSO packet's payload is in fragments),
 * so the pull is for what a driver delivers split; telemetry/hop's
 * TestHopOnSplitHeaders makes such frames with a tap device.
 */

/* Ethernet, the longest IPv4 header and the longest TCP header. */
#define TCP_PKT_HDRS_MAX (ETH_HLEN + 60 + 60)

/*
 * Parses the headers in the linear part. Returns 0 for TCP over IPv4 or
 * IPv6 (no extension headers, not a fragment), 1 for anything else, or the
 * length of linear data it needs to tell (always > 1).
 */
static __noinline __u32 tcp_parse_linear(struct __sk_buff *skb, struct tcp_pkt *p, struct tcp_flow *flow)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	__u8 *l3 = data + ETH_HLEN, *l4;
	__u32 doff;

	p->l3 = ETH_HLEN;
	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		__u32 ihl;

		if (l3 + 20 > (__u8 *)end)
			return ETH_HLEN + 20;
		/* Only the first fragment has the TCP header; skip fragments. */
		if ((l3[0] >> 4) != 4 || l3[9] != IPPROTO_TCP || ((l3[6] & 0x3f) | l3[7]))
			return 1;
		ihl = (l3[0] & 0xf) * 4;
		if (ihl < 20)
			return 1;
		p->v6 = false;
		p->l4 = ETH_HLEN + ihl;
		__builtin_memcpy(&flow->src[0], l3 + 12, 4);
		__builtin_memcpy(&flow->dst[0], l3 + 16, 4);
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		if (l3 + 40 > (__u8 *)end)
			return ETH_HLEN + 40;
		if ((l3[0] >> 4) != 6 || l3[6] != IPPROTO_TCP)
			return 1;
		p->v6 = true;
		p->l4 = ETH_HLEN + 40;
		__builtin_memcpy(flow->src, l3 + 8, 16);
		__builtin_memcpy(flow->dst, l3 + 24, 16);
	} else {
		return 1;
	}
	flow->v6 = p->v6;
	l4 = data + (p->l4 & 0x7f);	/* at most ETH_HLEN + 60: the mask bounds it for the verifier */
	if (l4 + 20 > (__u8 *)end)
		return p->l4 + 20;
	__builtin_memcpy(&flow->sport, l4, 2);
	__builtin_memcpy(&flow->dport, l4 + 2, 2);
	doff = (l4[12] >> 4) * 4;
	if (doff < 20)
		return 1;
	p->doff = doff;
	p->flags = l4[13];
	if (l4 + doff > (__u8 *)end)
		return p->l4 + doff;
	return 0;
}

/*
 * Parses an Ethernet frame as TCP over IPv4 or IPv6 (no extension headers,
 * not a fragment), and makes its headers, options included, linear: they
 * can be read and written in place from skb->data. flow receives the
 * addresses and ports. Returns false for anything else.
 */
static __always_inline bool tcp_parse(struct __sk_buff *skb, struct tcp_pkt *p, struct tcp_flow *flow)
{
	__u32 need = tcp_parse_linear(skb, p, flow);

	if (need <= 1)
		return need == 0;
	if (need > skb->len)
		return false;
	if (bpf_skb_pull_data(skb, skb->len < TCP_PKT_HDRS_MAX ? skb->len : TCP_PKT_HDRS_MAX))
		return false;
	return tcp_parse_linear(skb, p, flow) == 0;
}

/*
 * Finds the first kind-253 option with an ExID of the family exid/mask:
 * its high byte equal to exid's, and its low byte equal to exid's under
 * mask (0xff: exactly exid; 0xf0: the 16 ExIDs 0xXXY0 to 0xXXYF), in the
 * TCP header at l4, doff bytes long (struct tcp_pkt's). Returns -1 when
 * there is none, or an options area whose TLVs do not walk; else the
 * option's offset in the packet << 32 | its length byte << 16 | its ExID
 * (tcp_exp_off, tcp_exp_len, tcp_exp_id take them apart).
 *
 * A global function, verified once on its own: inlined, the walk's many
 * outcomes made the verifier go through the rest of the program once per
 * outcome (about 450,000 instructions per program); from here the caller
 * gets one unknown, bounded result.
 */
__attribute__((noinline)) __s64 tcp_find_exp(struct __sk_buff *skb, __u32 l4, __u32 doff, __u32 exid, __u32 mask)
{
	__u8 opts[TCP_OPTIONS_MAX];
	__u32 optlen, i, next = 0;

	if (!skb)
		return -1;
	/*
	 * The mask gives the verifier doff's range, and so the load's size:
	 * it cannot bound an argument otherwise. A header length is a
	 * multiple of 4 up to 60, so the mask changes no valid value.
	 */
	doff &= 0x3c;
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

/*
 * tcp_find_exp on a segment tcp_parse made linear, reading in place where a
 * sender puts an option it adds: first in the options area, or right
 * after the NOP, NOP, timestamps that Linux writes first (BPF-written
 * options follow the kernel's). Any other layout, and an option there of
 * another family, takes tcp_find_exp's walk, whose answer it is: in both
 * places no option comes before. The walk copies the options out and
 * visits them byte by byte; this costs a few compares.
 */
static __always_inline __s64 tcp_find_exp_pkt(struct __sk_buff *skb, const struct tcp_pkt *p, __u32 exid, __u32 mask)
{
	__u8 *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	__u32 optlen = p->doff - 20, at = 0, l;
	__u8 *o;

	if (p->doff <= 20 || p->doff > 60)
		return -1;
	/* tcp_parse_linear bounds l4 the same way. */
	o = data + (p->l4 & 0x7f) + 20;
	if (o + TCP_OPT_EXP_HDR > end)
		goto walk;
	if (o[0] == 1 && o[1] == 1 && o[2] == 8 && o[3] == 10) {
		if (optlen < 12 + TCP_OPT_EXP_HDR || o + 12 + TCP_OPT_EXP_HDR > end)
			goto walk;
		at = 12;
		o += 12;
	}
	if (o[0] != TCP_OPT_EXP || o[2] != ((exid >> 8) & 0xff) || (o[3] & mask) != (exid & mask))
		goto walk;
	l = o[1];
	if (l < TCP_OPT_EXP_HDR || at + l > optlen)
		goto walk;
	return ((__s64)((p->l4 & 0x7f) + 20 + at) << 32) | ((__s64)l << 16) | (((exid & 0xff00) | o[3]) & 0xffff);
walk:
	return tcp_find_exp(skb, p->l4, p->doff, exid, mask);
}

static __always_inline __u32 tcp_exp_off(__s64 r) { return (__u32)(r >> 32) & 0xffff; }
static __always_inline __u32 tcp_exp_len(__s64 r) { return (r >> 16) & 0xff; }
static __always_inline __u16 tcp_exp_id(__s64 r) { return r & 0xffff; }

/*
 * Replaces the n bytes at off (n a multiple of 4, at most 16; off even,
 * inside the headers tcp_parse made linear) with new, in place, and
 * adjusts the TCP checksum at csum_off by the difference. The difference
 * is the one's-complement sum of the new words and the old words'
 * complements; bpf_l4_csum_replace applies it as the skb's checksum state
 * requires (not at all for CHECKSUM_PARTIAL, whose sum is computed after
 * us). Returns false where the bytes are not all in the linear part (and
 * then changes nothing), or where the checksum helper fails, which it does
 * not for an offset inside headers that are linear and writable.
 */
static __always_inline bool tcp_store_csum(struct __sk_buff *skb, __u32 off, __u32 csum_off, const void *new, const __u32 n)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	const __u32 *w = new;
	__u32 *at, i;
	__u64 diff = 0;

	if ((off & 1) || n == 0 || n > 16 || (n & 3))
		return false;
	at = data + (off & 0xfff);
	if ((void *)at + n > end)
		return false;
	/* n is a constant at every call: the loop unrolls, its offsets fixed. */
	for (i = 0; i < 4; i++) {
		if (i * 4 >= n)
			break;
		diff += (__u32)~at[i];
		diff += w[i];
		at[i] = w[i];
	}
	diff = (diff & 0xffffffff) + (diff >> 32);
	diff = (diff & 0xffffffff) + (diff >> 32);
	return bpf_l4_csum_replace(skb, csum_off, 0, (__u32)diff, 0) == 0;
}

#endif /* CCLOAD_TCPKT_H */
