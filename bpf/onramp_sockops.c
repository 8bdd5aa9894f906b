// SPDX-License-Identifier: GPL-2.0
/*
 * onramp_sockops: makes room for On-Ramp's TCP options
 * (docs/onramp-option.md) on connections to peers in the configured
 * prefixes. It writes a PAD option, all zero, in that room: 12 bytes on
 * data segments, which the sender's tc program (bpf/onramp.c) turns into a
 * STAMP, and 16 on pure ACKs, which the receiver's tc program turns into
 * an ECHO when it has a sample to return. Growing a TCP header at tc is not
 * sound for GSO packets; rewriting room that TCP made is.
 *
 * It makes room only where the tc programs will fill it (onramp.h, "Room
 * only where it is used"): on data unless the socket's onramp_room says
 * the flow is quiet until later, and on a pure ACK once a STAMP has
 * arrived since the last ECHO room, which the parse callback for unknown
 * options sees.
 *
 * It keeps no flow state: one program per cgroup serves every network
 * namespace whose sockets are in it, while the tc programs, one set per
 * interface, keep the state and read their namespace's clock map.
 */
#include "include/ccload.h"
#include "include/onramp.h"
#include "include/scope.h"
#include "include/tcpkt.h"

char _license[] SEC("license") = "GPL";

SCOPE_MAPS(onramp_peers);

ONRAMP_ROOM_MAP;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ONRAMP_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} onramp_sockops_stats SEC(".maps");

/* What a socket's next header gets: 0, or the PAD's length. */
struct onramp_sk {
	__u32 scoped;
	__u32 planned;
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct onramp_sk);
} onramp_sk SEC(".maps");

static __always_inline struct onramp_sk *sk_get(struct bpf_sock_ops *skops, bool create)
{
	struct bpf_sock *sk = skops->sk;

	if (!sk)
		return NULL;
	return bpf_sk_storage_get(&onramp_sk, sk, NULL, create ? BPF_SK_STORAGE_GET_F_CREATE : 0);
}

static __always_inline void on_established(struct bpf_sock_ops *skops)
{
	struct onramp_sk *st;

	if (!scope_has(&onramp_peers_v4, &onramp_peers_v6, skops))
		return;
	st = sk_get(skops, true);
	if (!st)
		return;
	st->scoped = 1;
	stat_add(&onramp_sockops_stats, ONRAMP_STAT_SCOPED, 1);
	bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG |
					 BPF_SOCK_OPS_PARSE_UNKNOWN_HDR_OPT_CB_FLAG);
}

/*
 * Whether the segment being sized, data or a pure ACK, will carry an
 * On-Ramp option. A connection established under an earlier build has no
 * parse callback for unknown options: its first pure ACK turns it on, and
 * gets room as every pure ACK did then.
 */
static __always_inline bool room_wanted(struct bpf_sock_ops *skops)
{
	struct bpf_sock *sk = skops->sk;
	struct onramp_room *r;

	if (!sk)
		return false;
	if (skops->skb_len > 0) {
		r = bpf_sk_storage_get(&onramp_room, sk, NULL, 0);
		return !r || bpf_ktime_get_ns() >= r->quiet_until;
	}
	if (!(skops->bpf_sock_ops_cb_flags & BPF_SOCK_OPS_PARSE_UNKNOWN_HDR_OPT_CB_FLAG)) {
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_PARSE_UNKNOWN_HDR_OPT_CB_FLAG);
		return true;
	}
	r = bpf_sk_storage_get(&onramp_room, sk, NULL, 0);
	if (!r || !r->echo_due)
		return false;
	r->echo_due = 0;
	return true;
}

static __always_inline void on_hdr_len(struct bpf_sock_ops *skops)
{
	struct onramp_sk *st;
	__u32 n;

	/*
	 * Sizing the MSS: data segments carry the 12-byte STAMP, so the MSS
	 * must leave room for it. The header callbacks run only on sockets
	 * that on_established turned them on for (or another program did:
	 * then the room is reserved and left unused).
	 */
	if (skops->args[0] & BPF_WRITE_HDR_TCP_CURRENT_MSS) {
		bpf_reserve_hdr_opt(skops, ONRAMP_STAMP_LEN, 0);
		return;
	}
	st = sk_get(skops, false);
	if (!st || !st->scoped)
		return;
	st->planned = 0;
	/* Nothing on SYNs, FINs or RSTs. */
	if (skops->skb_tcp_flags & 0x07)
		return;
	if (!room_wanted(skops))
		return;
	n = skops->skb_len > 0 ? ONRAMP_STAMP_LEN : ONRAMP_ECHO_LEN;
	if (bpf_reserve_hdr_opt(skops, n, 0)) {
		stat_add(&onramp_sockops_stats, n == ONRAMP_STAMP_LEN ? ONRAMP_STAT_STAMP_NO_SPACE : ONRAMP_STAT_ECHO_NO_SPACE, 1);
		return;
	}
	st->planned = n;
}

static __always_inline void on_hdr_write(struct bpf_sock_ops *skops)
{
	struct onramp_sk *st = sk_get(skops, false);
	__u8 pad[ONRAMP_ECHO_LEN] = {};
	__u32 n;

	if (!st || !st->planned)
		return;
	n = st->planned == ONRAMP_STAMP_LEN ? ONRAMP_STAMP_LEN : ONRAMP_ECHO_LEN;
	st->planned = 0;
	pad[0] = TCP_OPT_EXP;
	pad[1] = n;
	pad[2] = ONRAMP_EXID_PAD >> 8;
	pad[3] = ONRAMP_EXID_PAD & 0xff;
	if (bpf_store_hdr_opt(skops, pad, n, 0))
		stat_add(&onramp_sockops_stats, n == ONRAMP_STAMP_LEN ? ONRAMP_STAT_STAMP_NO_SPACE : ONRAMP_STAT_ECHO_NO_SPACE, 1);
}

/* A segment with an option TCP does not know: a STAMP wants an ECHO. */
static __always_inline void on_parse(struct bpf_sock_ops *skops)
{
	struct bpf_sock *sk = skops->sk;
	__u8 opt[ONRAMP_STAMP_LEN] = {};
	struct onramp_room *r;

	if (!sk)
		return;
	/* Search by kind and ExID (the first 4 bytes). */
	opt[0] = TCP_OPT_EXP;
	opt[1] = TCP_OPT_EXP_HDR;
	opt[2] = ONRAMP_EXID_STAMP >> 8;
	opt[3] = ONRAMP_EXID_STAMP & 0xff;
	if (bpf_load_hdr_opt(skops, opt, sizeof(opt), 0) < 0)
		return;
	r = bpf_sk_storage_get(&onramp_room, sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
	if (r)
		r->echo_due = 1;
}

SEC("sockops")
int onramp_sockops(struct bpf_sock_ops *skops)
{
	switch (skops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		on_established(skops);
		break;
	case BPF_SOCK_OPS_HDR_OPT_LEN_CB:
		on_hdr_len(skops);
		break;
	case BPF_SOCK_OPS_WRITE_HDR_OPT_CB:
		on_hdr_write(skops);
		break;
	case BPF_SOCK_OPS_PARSE_HDR_OPT_CB:
		on_parse(skops);
		break;
	}
	return 1;
}
