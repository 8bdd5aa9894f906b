/* SPDX-License-Identifier: GPL-2.0 */
/*
 * clock.h: the clock map, the API between the clock-offset agent
 * (`ccload clock run`, Go package clocksync) and the BPF programs that
 * subtract one host's timestamp from another's (On-Ramp's one-way delay).
 *
 * Where:   <bpffs>/ccload/clock/ns<inode>/clock_offsets, one map per
 *          network namespace (inode: stat -L -c %i /proc/self/ns/net),
 *          written by the one agent that runs in that namespace.
 * Type:    BPF_MAP_TYPE_HASH, CLOCK_MAX_PEERS entries, with BTF (the value
 *          holds a bpf_spin_lock).
 * Key:     struct clock_peer: the peer's address as 16 bytes in network
 *          order; IPv4 as v4-mapped IPv6 (::ffff:a.b.c.d).
 * Clock:   every time is nanoseconds of CLOCK_TAI, the clock that
 *          bpf_ktime_get_tai_ns() reads (6.1+). The agent converts the
 *          kernel's socket timestamps (CLOCK_REALTIME) to it in one place.
 * Value:   struct clock_offset. The peer's clock reads
 *              here + offset_ns + drift_q32 * (here - ref_ns) / 2^32
 *          when this host's clock reads `here` (clock_offset_at below).
 *          A one-way delay from the peer to here is therefore
 *              rx_here - (tx_peer - offset).
 *          error_ns bounds the offset's error (one standard error from the
 *          probe margins and the loop residuals); entries past
 *          valid_until_ns belong to a peer that went silent and must be
 *          ignored: the agent deletes them at its next window.
 * Reading: take the value's lock (bpf_spin_lock in BPF, BPF_F_LOCK from
 *          user space) while copying, so that no reader sees half of an
 *          update. clock_offset_at does it on every read. A reader that
 *          reads one peer per packet keeps a copy (struct clock_copy,
 *          clock_offset_cached) and takes the lock only when the entry's
 *          version, its seq and updated_ns, is not the copy's: a lock
 *          taken per packet would have every CPU that receives from the
 *          peer write the entry's cache line.
 * Writing: every write changes the version: the agent bumps seq and sets
 *          updated_ns to the time of the write.
 */
#ifndef CCLOAD_CLOCK_H
#define CCLOAD_CLOCK_H

#include "ccload.h"

#define CLOCK_MAX_PEERS 4096

/* clock_offset.flags */
#define CLOCK_F_PROBED 0x1 /* this agent probes the peer itself */

struct clock_peer {
	__u8 addr[16];
};

struct clock_offset {
	struct bpf_spin_lock lock;
	__u32 seq;		/* bumped by every update */
	__s64 offset_ns;	/* peer clock minus this host's, at ref_ns */
	__u64 ref_ns;		/* this host's CLOCK_TAI */
	__s64 drift_q32;	/* d(offset)/d(here), CLOCK_DRIFT_ONE == 1 */
	__u32 error_ns;		/* the offset's standard error */
	__u32 residual_ns;	/* RMS loop residual of the peer's edges */
	__u64 updated_ns;	/* when the agent wrote this (CLOCK_TAI) */
	__u64 valid_until_ns;	/* ignore after this (CLOCK_TAI) */
	__u16 pure_permille;	/* share of pure probe pairs, 0..1000 */
	__u16 flags;		/* CLOCK_F_* */
	__u32 _pad;
};

/*
 * The clock map's definition, for every object that reads it: the loader
 * replaces it with the pinned map of the namespace (cilium/ebpf's
 * MapReplacements), which must match this definition exactly.
 */
#define CLOCK_OFFSETS_MAP                                                    \
	struct {                                                             \
		__uint(type, BPF_MAP_TYPE_HASH);                             \
		__uint(max_entries, CLOCK_MAX_PEERS);                        \
		__type(key, struct clock_peer);                              \
		__type(value, struct clock_offset);                          \
	} clock_offsets SEC(".maps")

/* clock_offset_at's results */
#define CLOCK_OK 0
#define CLOCK_NO_PEER 1		/* no entry for the peer */
#define CLOCK_EXPIRED 2		/* the entry is past valid_until_ns */

/*
 * Bound on how far from ref_ns an offset is extrapolated: the product with
 * drift_q32 stays far inside 64 bits (60 s * 1000 ppm * 2^32 < 2^58).
 */
#define CLOCK_MAX_EXTRAPOLATION_NS (60ULL * 1000000000ULL)

/*
 * A reader's copy of one entry: what clock_offset_at reads, with the
 * version (seq, updated_ns) it was copied at. updated_ns 0: no copy yet.
 */
struct clock_copy {
	__u64 updated_ns;
	__u32 seq;
	__u32 error_ns;
	__s64 offset_ns;
	__u64 ref_ns;
	__s64 drift_q32;
	__u64 valid_until_ns;
};

/*
 * The offset that copy c gives when this host's clock reads now: its
 * offset extrapolated with its drift, no further than
 * CLOCK_MAX_EXTRAPOLATION_NS from ref_ns. CLOCK_OK or CLOCK_EXPIRED.
 */
static __always_inline int clock_extrapolate(const struct clock_copy *c, __u64 now, __s64 *offset)
{
	__s64 dt;

	if (now > c->valid_until_ns)
		return CLOCK_EXPIRED;
	dt = (__s64)(now - c->ref_ns);
	if (dt > (__s64)CLOCK_MAX_EXTRAPOLATION_NS)
		dt = CLOCK_MAX_EXTRAPOLATION_NS;
	if (dt < -(__s64)CLOCK_MAX_EXTRAPOLATION_NS)
		dt = -(__s64)CLOCK_MAX_EXTRAPOLATION_NS;
	/* Arithmetic shift of a signed product: rounds toward -inf. */
	*offset = c->offset_ns + ((dt * c->drift_q32) >> CLOCK_DRIFT_SHIFT);
	return CLOCK_OK;
}

/* Copies entry v into c under v's lock. */
static __always_inline void clock_copy_locked(struct clock_offset *v, struct clock_copy *c)
{
	bpf_spin_lock(&v->lock);
	c->offset_ns = v->offset_ns;
	c->ref_ns = v->ref_ns;
	c->drift_q32 = v->drift_q32;
	c->valid_until_ns = v->valid_until_ns;
	c->error_ns = v->error_ns;
	c->seq = v->seq;
	c->updated_ns = v->updated_ns;
	bpf_spin_unlock(&v->lock);
}

/*
 * clock_offset_at: the peer's offset (peer minus here, ns) when this host's
 * clock reads now (CLOCK_TAI ns), and its error bound. map is the clock
 * map. Returns CLOCK_OK, CLOCK_NO_PEER or CLOCK_EXPIRED.
 */
static __always_inline int clock_offset_at(void *map, const struct clock_peer *peer,
					   __u64 now, __s64 *offset, __u32 *error)
{
	struct clock_offset *v;
	struct clock_copy c;

	v = bpf_map_lookup_elem(map, peer);
	if (!v)
		return CLOCK_NO_PEER;
	clock_copy_locked(v, &c);
	*error = c.error_ns;
	return clock_extrapolate(&c, now, offset);
}

/*
 * clock_offset_cached: clock_offset_at through c, a copy that the caller
 * keeps for the peer (in a map value): the entry is copied into c, under
 * its lock, only when its version is not c's. Reading the version without
 * the lock is sound because it only decides whether to copy: what is used
 * was always copied under the lock, and a version read in the middle of a
 * write at worst copies once more. Copies into one c are serialized by
 * the entry's lock, but a reader on another CPU that reads c while it is
 * being copied may take one offset from a mix of two versions; c's user
 * bounds what one wrong offset can do (On-Ramp: max_pause).
 */
static __always_inline int clock_offset_cached(void *map, const struct clock_peer *peer, struct clock_copy *c,
					       __u64 now, __s64 *offset, __u32 *error)
{
	struct clock_offset *v;

	v = bpf_map_lookup_elem(map, peer);
	if (!v)
		return CLOCK_NO_PEER;
	if (!c->updated_ns || *(volatile __u64 *)&v->updated_ns != c->updated_ns ||
	    *(volatile __u32 *)&v->seq != c->seq)
		clock_copy_locked(v, c);
	*error = c->error_ns;
	return clock_extrapolate(c, now, offset);
}

#endif /* CCLOAD_CLOCK_H */
