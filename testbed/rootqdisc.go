package testbed

import (
	"encoding/binary"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// rootStatReader reads the root qdisc's statistics of one interface with a
// single RTM_GETQDISC request (not a dump), through a raw rtnetlink socket
// and buffers that are reused, so that a reading allocates nothing. The
// queue sampler reads with it; a dump through vishvananda/netlink parses
// every qdisc of the namespace and costs several times as much.
type rootStatReader struct {
	fd      int
	ifindex int32
	seq     uint32
	req     [unix.SizeofNlMsghdr + sizeofTcMsg]byte
	buf     []byte
	kind    string // the last kind seen, kept to avoid a conversion per read
	where   string // "IFACE in netns NAME", for errors
}

// Netlink layout constants that x/sys/unix does not define (linux/rtnetlink.h,
// linux/gen_stats.h).
const (
	sizeofTcMsg      = 20 // struct tcmsg
	tcaStatsBasic    = 1  // TCA_STATS_BASIC: struct gnet_stats_basic
	tcaStatsQueue    = 3  // TCA_STATS_QUEUE: struct gnet_stats_queue
	tcaStatsPkt64    = 8  // TCA_STATS_PKT64: 64-bit packet count
	sizeofStatsBasic = 12 // bytes (u64) and packets (u32), as used
	sizeofStatsQueue = 20 // qlen, backlog, drops, requeues, overlimits (u32)
	tcHandleRootID   = 0xffffffff
	// rootReadTimeout bounds one wait for the kernel's reply.
	rootReadTimeout = time.Second
	// maxStaleReplies bounds how many unrelated messages one read skips.
	maxStaleReplies = 16
	// rootReplyBuf holds any reply: a qdisc message is well under 4 KiB.
	rootReplyBuf = 32 << 10
)

// newRootStatReader opens the socket inside h's netns for interface index
// ifindex.
func newRootStatReader(h *Host, ifindex int, where string) (*rootStatReader, error) {
	fd := -1
	err := h.Do(func() error {
		var err error
		// The socket belongs to the namespace current at socket() time.
		fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open rtnetlink socket for %s: %w", where, err)
	}
	r := &rootStatReader{fd: fd, ifindex: int32(ifindex), buf: make([]byte, rootReplyBuf), where: where}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		r.close()
		return nil, fmt.Errorf("bind rtnetlink socket for %s: %w", where, err)
	}
	tv := unix.NsecToTimeval(int64(rootReadTimeout))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		r.close()
		return nil, fmt.Errorf("set receive timeout on rtnetlink socket for %s: %w", where, err)
	}

	// The request never changes but for its sequence number. The kernel
	// answers a RTM_GETQDISC for one qdisc as a notification: to the
	// requester only with NLM_F_ECHO, and to RTNLGRP_TC listeners in the
	// namespace (such as `tc monitor`), who see every reading.
	ne := binary.NativeEndian
	ne.PutUint32(r.req[0:4], uint32(len(r.req)))
	ne.PutUint16(r.req[4:6], unix.RTM_GETQDISC)
	ne.PutUint16(r.req[6:8], unix.NLM_F_REQUEST|unix.NLM_F_ECHO)
	tcm := r.req[unix.SizeofNlMsghdr:]
	tcm[0] = unix.AF_UNSPEC
	ne.PutUint32(tcm[4:8], uint32(r.ifindex))
	ne.PutUint32(tcm[12:16], tcHandleRootID) // tcm_parent: the root qdisc
	return r, nil
}

// read fills st with the root qdisc's identity and statistics.
func (r *rootStatReader) read(st *qdiscStat) error {
	r.seq++
	ne := binary.NativeEndian
	ne.PutUint32(r.req[8:12], r.seq)
	if _, err := unix.Write(r.fd, r.req[:]); err != nil {
		return fmt.Errorf("request root qdisc of %s: %w", r.where, err)
	}
	for range maxStaleReplies {
		n, err := unix.Read(r.fd, r.buf)
		if err != nil {
			return fmt.Errorf("read root qdisc of %s: %w", r.where, err)
		}
		msg := r.buf[:n]
		if len(msg) < unix.SizeofNlMsghdr {
			return fmt.Errorf("read root qdisc of %s: short netlink message (%d bytes)", r.where, n)
		}
		mlen := int(ne.Uint32(msg[0:4]))
		if mlen < unix.SizeofNlMsghdr || mlen > len(msg) {
			return fmt.Errorf("read root qdisc of %s: bad netlink message length %d of %d", r.where, mlen, n)
		}
		if ne.Uint32(msg[8:12]) != r.seq {
			continue // a late reply to an earlier request
		}
		switch ne.Uint16(msg[4:6]) {
		case unix.NLMSG_ERROR:
			if mlen < unix.SizeofNlMsghdr+4 {
				return fmt.Errorf("read root qdisc of %s: short netlink error", r.where)
			}
			errno := -int32(ne.Uint32(msg[16:20]))
			if errno == int32(unix.ENOENT) || errno == int32(unix.EINVAL) {
				return fmt.Errorf("read %s: %w (%w)", r.where, errNoRootQdisc, unix.Errno(errno))
			}
			return fmt.Errorf("read root qdisc of %s: %w", r.where, unix.Errno(errno))
		case unix.RTM_NEWQDISC:
			return r.parse(msg[unix.SizeofNlMsghdr:mlen], st)
		}
	}
	return fmt.Errorf("read root qdisc of %s: no reply among %d messages", r.where, maxStaleReplies)
}

// parse decodes a RTM_NEWQDISC payload (tcmsg and attributes).
func (r *rootStatReader) parse(b []byte, st *qdiscStat) error {
	if len(b) < sizeofTcMsg {
		return fmt.Errorf("read root qdisc of %s: short tcmsg", r.where)
	}
	ne := binary.NativeEndian
	*st = qdiscStat{
		Handle: ne.Uint32(b[8:12]),
		Parent: ne.Uint32(b[12:16]),
	}
	haveQueue := false
	// Each attribute advances by at least its 4-byte header, so the loops
	// end within len(b)/4 steps.
	for attrs := b[sizeofTcMsg:]; len(attrs) >= unix.SizeofRtAttr; {
		alen := int(ne.Uint16(attrs[0:2]))
		if alen < unix.SizeofRtAttr || alen > len(attrs) {
			return fmt.Errorf("read root qdisc of %s: bad attribute length %d", r.where, alen)
		}
		typ, val := ne.Uint16(attrs[2:4])&^unix.NLA_F_NESTED, attrs[unix.SizeofRtAttr:alen]
		switch typ {
		case unix.TCA_KIND:
			kind := val
			if i := len(kind) - 1; i >= 0 && kind[i] == 0 {
				kind = kind[:i]
			}
			if string(kind) != r.kind {
				r.kind = string(kind)
			}
			st.Kind = r.kind
		case unix.TCA_STATS2:
			for nested := val; len(nested) >= unix.SizeofRtAttr; {
				nlen := int(ne.Uint16(nested[0:2]))
				if nlen < unix.SizeofRtAttr || nlen > len(nested) {
					return fmt.Errorf("read root qdisc of %s: bad stats attribute length %d", r.where, nlen)
				}
				nv := nested[unix.SizeofRtAttr:nlen]
				switch ne.Uint16(nested[2:4]) {
				case tcaStatsBasic:
					if len(nv) >= sizeofStatsBasic {
						st.Bytes = ne.Uint64(nv[0:8])
						if st.Packets == 0 {
							st.Packets = uint64(ne.Uint32(nv[8:12]))
						}
					}
				case tcaStatsPkt64:
					if len(nv) >= 8 {
						st.Packets = ne.Uint64(nv[0:8])
					}
				case tcaStatsQueue:
					if len(nv) >= sizeofStatsQueue {
						st.Qlen = ne.Uint32(nv[0:4])
						st.Backlog = ne.Uint32(nv[4:8])
						st.Drops = ne.Uint32(nv[8:12])
						st.Requeues = ne.Uint32(nv[12:16])
						st.Overlimits = ne.Uint32(nv[16:20])
						haveQueue = true
					}
				}
				nested = nested[min(rtaAlign(nlen), len(nested)):]
			}
		}
		attrs = attrs[min(rtaAlign(alen), len(attrs)):]
	}
	if !haveQueue {
		return fmt.Errorf("read root qdisc of %s: reply has no queue statistics", r.where)
	}
	return nil
}

// rtaAlign rounds an attribute length up to the 4-byte alignment of
// netlink attributes.
func rtaAlign(n int) int {
	return (n + 3) &^ 3
}

func (r *rootStatReader) close() {
	if r.fd >= 0 {
		_ = unix.Close(r.fd)
		r.fd = -1
	}
}
