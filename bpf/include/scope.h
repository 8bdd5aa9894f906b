/* SPDX-License-Identifier: GPL-2.0 */
/*
 * scope.h: which peers a sockops program acts on. The datacenter's
 * prefixes sit in two LPM tries, one per address family, that the Go side
 * fills (internal/scope); a connection is in scope when its peer is in one
 * of them. Experimental TCP options go only to peers in scope, so they
 * never leave the datacenter.
 */
#ifndef CCLOAD_SCOPE_H
#define CCLOAD_SCOPE_H

#include <bpf/bpf_endian.h>

struct lpm_v4 {
	__u32 prefixlen;
	__u32 addr;		/* network order */
};

struct lpm_v6 {
	__u32 prefixlen;
	__u32 addr[4];		/* network order */
};

/* The two tries, NAME_v4 and NAME_v6. */
#define SCOPE_MAPS(name)                                                     \
	struct {                                                             \
		__uint(type, BPF_MAP_TYPE_LPM_TRIE);                         \
		__uint(map_flags, BPF_F_NO_PREALLOC);                        \
		__uint(max_entries, 256);                                    \
		__type(key, struct lpm_v4);                                  \
		__type(value, __u8);                                         \
	} name##_v4 SEC(".maps");                                            \
	struct {                                                             \
		__uint(type, BPF_MAP_TYPE_LPM_TRIE);                         \
		__uint(map_flags, BPF_F_NO_PREALLOC);                        \
		__uint(max_entries, 256);                                    \
		__type(key, struct lpm_v6);                                  \
		__type(value, __u8);                                         \
	} name##_v6 SEC(".maps")

static __always_inline bool scope_has_v4(void *v4, __u32 addr)
{
	struct lpm_v4 k = { .prefixlen = 32, .addr = addr };

	return bpf_map_lookup_elem(v4, &k) != NULL;
}

/*
 * scope_has reports whether the connection's peer is in the prefixes of
 * the tries v4 and v6. An AF_INET6 socket whose peer is ::ffff:a.b.c.d
 * (v4-mapped: what a dual-stack listener on [::] sees of an IPv4 client)
 * has an IPv4 peer, looked up among the IPv4 prefixes, so dual-stack
 * servers are covered too. The address words are copied out of the context
 * first: the verifier allows only fixed-offset context reads.
 */
static __always_inline bool scope_has(void *v4, void *v6, struct bpf_sock_ops *skops)
{
	if (skops->family == 2 /* AF_INET */)
		return scope_has_v4(v4, skops->remote_ip4);
	if (skops->family == 10 /* AF_INET6 */) {
		struct lpm_v6 k = { .prefixlen = 128 };

		k.addr[0] = skops->remote_ip6[0];
		k.addr[1] = skops->remote_ip6[1];
		k.addr[2] = skops->remote_ip6[2];
		k.addr[3] = skops->remote_ip6[3];
		if (k.addr[0] == 0 && k.addr[1] == 0 && k.addr[2] == bpf_htonl(0x0000ffff))
			return scope_has_v4(v4, k.addr[3]);
		return bpf_map_lookup_elem(v6, &k) != NULL;
	}
	return false;
}

#endif /* CCLOAD_SCOPE_H */
