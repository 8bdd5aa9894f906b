// SPDX-License-Identifier: GPL-2.0
/*
 * int_sockops: carries INT in a TCP option (docs/int-option.md).
 *
 * Sender: data segments to a peer in the configured prefixes get a FORWARD
 * option with empty hop slots, which software INT hops (bpf/int_hop.c)
 * fill in. Receiver: the newest filled records are echoed back, once, in an ECHO
 * option on its ACKs. Sender again: the echo is parsed into the socket's
 * int_store entry, where the congestion control reads it on the same ACK
 * (the kernel parses header options in tcp_validate_incoming, before
 * tcp_ack runs the CC).
 *
 * Nothing is tagged for peers outside the prefixes, so an experimental
 * option never leaves the datacenter.
 */
#include "include/ccload.h"
#include "include/int.h"
#include "include/scope.h"
#include <bpf/bpf_endian.h>

char _license[] SEC("license") = "GPL";

SCOPE_MAPS(int_peers);

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct int_config);
} int_config SEC(".maps");

INT_STORE_MAP;

/* Counters, named in telemetry/sockops (statNames); append only. */
enum int_stat {
	INT_STAT_SCOPED = 0,	/* connections to peers in the prefixes */
	INT_STAT_TAGGED,	/* forward options written */
	INT_STAT_TAG_NOSPACE,	/* data skbs with no room for the option */
	INT_STAT_ECHOED,	/* echo options written */
	INT_STAT_ECHO_NOSPACE,	/* ACKs with no room for the echo */
	INT_STAT_FWD_PARSED,	/* forward options received */
	INT_STAT_ECHO_PARSED,	/* echo options received */
	INT_STAT_MALFORMED,	/* our options that failed validation */
	INT_STAT_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, INT_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} int_stats SEC(".maps");

/* The largest option we read or write. */
struct int_opt {
	__u8 kind;
	__u8 len;
	__be16 exid;
	__be64 hop[INT_MAX_HOPS];
} __attribute__((packed));
_Static_assert(sizeof(struct int_opt) == INT_OPT_LEN(INT_MAX_HOPS),
	       "struct int_opt is the largest INT option");

static __always_inline struct int_config *int_cfg(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&int_config, &zero);
}

static __always_inline struct int_sk *int_sk_get(struct bpf_sock_ops *skops, bool create)
{
	struct bpf_sock *sk = skops->sk;

	if (!sk)
		return NULL;
	return bpf_sk_storage_get(&int_store, sk, NULL, create ? BPF_SK_STORAGE_GET_F_CREATE : 0);
}

static __always_inline void on_established(struct bpf_sock_ops *skops)
{
	struct int_config *cfg = int_cfg();
	struct int_sk *st;

	if (!cfg || !cfg->enabled || !scope_has(&int_peers_v4, &int_peers_v6, skops))
		return;
	st = int_sk_get(skops, true);
	if (!st)
		return;
	st->flags |= INT_SK_SCOPED;
	stat_add(&int_stats, INT_STAT_SCOPED, 1);
	bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags |
				  BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG |
				  BPF_SOCK_OPS_PARSE_UNKNOWN_HDR_OPT_CB_FLAG);
}

static __always_inline __u32 clamp_slots(__u32 n)
{
	if (n < 1)
		return 1;
	return n > INT_MAX_HOPS ? INT_MAX_HOPS : n;
}

/*
 * What this outgoing segment carries: 0 nothing, INT_EXID_FORWARD (data)
 * or INT_EXID_ECHO (no data, and records to echo). *n is the slot count.
 */
static __always_inline __u32 plan(struct bpf_sock_ops *skops, struct int_sk *st,
				  struct int_config *cfg, __u32 *n)
{
	if (skops->skb_len > 0) {
		if (cfg->tso_only && skops->skb_len <= skops->mss_cache)
			return 0;
		if (cfg->tag_every > 1 && st->data_skbs++ % cfg->tag_every)
			return 0;
		*n = clamp_slots(cfg->slots);
		return INT_EXID_FORWARD;
	}
	/* New records only: parse_one sets the flag with fwd_hops >= 1. */
	if (!(st->flags & INT_SK_FWD_NEW))
		return 0;
	*n = clamp_slots(st->fwd_hops);
	return INT_EXID_ECHO;
}

static __always_inline void on_hdr_len(struct bpf_sock_ops *skops)
{
	struct int_config *cfg = int_cfg();
	struct int_sk *st;
	__u32 n = 0, what;

	if (!cfg || !cfg->enabled)
		return;
	/*
	 * The kernel asks without a segment to size the MSS, two to three
	 * times per ACK in a bulk flow: reserve the largest option we write,
	 * so that tagged segments still fit the MTU. This answer skips the
	 * socket storage lookup, which would be most of its cost: the header
	 * callbacks run only on sockets whose flags on_established set, which
	 * are the scoped ones. On a socket where another sockops program
	 * enabled them too, the cost is room reserved and left unused; what
	 * is written is still decided per socket below.
	 */
	if (skops->args[0] & BPF_WRITE_HDR_TCP_CURRENT_MSS) {
		bpf_reserve_hdr_opt(skops, INT_OPT_LEN(clamp_slots(cfg->slots)), 0);
		return;
	}
	st = int_sk_get(skops, false);
	if (!st || !(st->flags & INT_SK_SCOPED))
		return;
	st->planned_exid = 0;
	/* SYNs carry no INT: the established callback turns it on. */
	if (skops->skb_tcp_flags & 0x02)
		return;
	what = plan(skops, st, cfg, &n);
	if (!what)
		return;
	if (bpf_reserve_hdr_opt(skops, INT_OPT_LEN(n), 0)) {
		stat_add(&int_stats, what == INT_EXID_FORWARD ? INT_STAT_TAG_NOSPACE : INT_STAT_ECHO_NOSPACE, 1);
		return;
	}
	st->planned_exid = what;
	st->planned_slots = n;
}

static __always_inline void on_hdr_write(struct bpf_sock_ops *skops)
{
	struct int_sk *st = int_sk_get(skops, false);
	struct int_opt opt = {};
	__u32 n, what, i, len;

	if (!st || !st->planned_exid)
		return;
	what = st->planned_exid;
	n = clamp_slots(st->planned_slots);
	st->planned_exid = 0;
	/* Computed, bounded length: older verifiers lose track of opt.len. */
	len = INT_OPT_LEN(n);
	if (len > sizeof(opt))
		return;
	opt.kind = INT_OPT_KIND;
	opt.len = len;
	opt.exid = bpf_htons(what);
	if (what == INT_EXID_ECHO) {
		for (i = 0; i < INT_MAX_HOPS; i++)
			if (i < n)
				opt.hop[i] = bpf_cpu_to_be64(st->fwd[i]);
	}
	if (bpf_store_hdr_opt(skops, &opt, len, 0))
		return;
	if (what == INT_EXID_ECHO)
		st->flags &= ~INT_SK_FWD_NEW;
	stat_add(&int_stats, what == INT_EXID_FORWARD ? INT_STAT_TAGGED : INT_STAT_ECHOED, 1);
}

/* Loads our option with the given ExID from the incoming segment. */
static __always_inline int load_opt(struct bpf_sock_ops *skops, struct int_opt *opt, __u16 exid)
{
	__builtin_memset(opt, 0, sizeof(*opt));
	opt->kind = INT_OPT_KIND;
	opt->len = 4; /* search an experimental option by its 16-bit ExID */
	opt->exid = bpf_htons(exid);
	return bpf_load_hdr_opt(skops, opt, sizeof(*opt), 0);
}

/*
 * Validates a received option and returns its filled hop count, or -1.
 * Same rules as the Go codec (telemetry/): length 4+8N with 1<=N<=4, no
 * reserved rate codes, no filled slot after an empty one, empty slots
 * all zero.
 */
static __always_inline int parse_hops(struct int_opt *opt, int got, __u64 *out)
{
	int n, i, hops = 0;
	bool empty = false;

	if (got < INT_OPT_LEN(1) || opt->len != got)
		return -1;
	if ((got - INT_OPT_HDR) % INT_HOP_SIZE)
		return -1;
	n = (got - INT_OPT_HDR) / INT_HOP_SIZE;
	if (n > INT_MAX_HOPS)
		return -1;
	for (i = 0; i < INT_MAX_HOPS; i++) {
		__u64 w;

		if (i >= n)
			break;
		w = bpf_be64_to_cpu(opt->hop[i]);
		if (int_hop_rate_code(w) == 0) {
			if (w)
				return -1;
			empty = true;
			continue;
		}
		if (empty || !int_rate_mbps(int_hop_rate_code(w)))
			return -1;
		out[i] = w;
		hops++;
	}
	return hops;
}

/*
 * Parses one of our options in the received segment into *st. Returns
 * false when the segment has no option with that ExID.
 */
static __always_inline bool parse_one(struct bpf_sock_ops *skops, struct int_sk *st, __u16 exid)
{
	__u64 hops[INT_MAX_HOPS] = {};
	struct int_opt opt;
	int got, n, i;

	got = load_opt(skops, &opt, exid);
	if (got <= 0)
		return false;
	n = parse_hops(&opt, got, hops);
	if (n < 0) {
		stat_add(&int_stats, INT_STAT_MALFORMED, 1);
		return true;
	}
	if (exid == INT_EXID_ECHO) {
		for (i = 0; i < INT_MAX_HOPS; i++)
			st->echo[i] = hops[i];
		st->echo_hops = n;
		st->echo_ns = bpf_ktime_get_ns();
		st->echo_seq++;
		stat_add(&int_stats, INT_STAT_ECHO_PARSED, 1);
		return true;
	}
	if (n == 0)
		return true; /* no hop wrote into it: nothing to echo */
	for (i = 0; i < INT_MAX_HOPS; i++)
		st->fwd[i] = hops[i];
	st->fwd_hops = n;
	st->fwd_seq++;
	st->flags |= INT_SK_FWD_NEW;
	stat_add(&int_stats, INT_STAT_FWD_PARSED, 1);
	return true;
}

/*
 * Whether the received segment carries data: its length (skb_len counts
 * the TCP header here) beyond the header's data offset.
 */
static __always_inline bool carries_data(struct bpf_sock_ops *skops)
{
	__u8 *th = (__u8 *)(long)skops->skb_data;
	__u8 *end = (__u8 *)(long)skops->skb_data_end;

	if (th + 13 > end)
		return true;
	return skops->skb_len > (__u32)(th[12] >> 4) * 4;
}

/*
 * Our writer puts FORWARD on data segments and ECHO on pure ACKs, so the
 * segment's kind decides which ExID is looked for first, and the common
 * case costs one search of the options. The other is still looked for, so
 * a foreign or malformed option on either kind of segment is counted.
 */
static __always_inline void on_parse(struct bpf_sock_ops *skops)
{
	struct int_sk *st = int_sk_get(skops, false);
	__u16 first = INT_EXID_ECHO, second = INT_EXID_FORWARD;

	if (!st || !(st->flags & INT_SK_SCOPED))
		return;
	if (carries_data(skops)) {
		first = INT_EXID_FORWARD;
		second = INT_EXID_ECHO;
	}
	if (!parse_one(skops, st, first))
		parse_one(skops, st, second);
}

SEC("sockops")
int int_sockops(struct bpf_sock_ops *skops)
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
