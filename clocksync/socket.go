package clocksync

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/facebook/time/timestamp"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/sockstamp"
)

// socket is the agent's UDP socket, with the kernel's timestamps on every
// packet it sends and receives: software ones (SO_TIMESTAMPING, taken in
// the kernel's transmit path and at netif_receive), or the NIC's with
// hardware timestamping. No user-space clock is read around send or recv.
type socket struct {
	fd int
	hw bool
	// tsFlags are the socket's SO_TIMESTAMPING flags, for restartIDs.
	tsFlags int
	// sendMu serialises sends with the reads of their transmit stamps:
	// the kernel numbers the stamps by datagram (SOF_TIMESTAMPING_OPT_ID),
	// so nextID is the number the next datagram's stamp will carry.
	sendMu   sync.Mutex
	nextID   uint32
	awaiting map[uint32]awaited
}

// recvTimeout bounds a blocking receive, so that the receiving goroutine
// sees a cancelled context within that time.
const recvTimeout = 100 * time.Millisecond

// softwareStamps asks for software transmit stamps, numbered by datagram
// and reported without the packet, and software receive stamps. The
// receive stamps are CLOCK_REALTIME, taken as the packet enters the
// stack; asking for them stamps every packet the host receives, which
// the scrubber keeps out of fq.
const softwareStamps = unix.SOF_TIMESTAMPING_TX_SOFTWARE | unix.SOF_TIMESTAMPING_RX_SOFTWARE |
	unix.SOF_TIMESTAMPING_SOFTWARE | unix.SOF_TIMESTAMPING_OPT_ID | unix.SOF_TIMESTAMPING_OPT_TSONLY

// openSocket binds a dual-stack UDP socket to addr (the unspecified
// address: every address of the network namespace) with timestamps on.
// hwIface, when set, turns on the NIC's hardware timestamps on that
// interface instead of software ones.
func openSocket(addr netip.AddrPort, hwIface string) (_ *socket, err error) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, fmt.Errorf("create the probe socket: %w", err)
	}
	defer func() {
		if err != nil {
			unix.Close(fd)
		}
	}()
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
		return nil, fmt.Errorf("make the probe socket dual-stack: %w", err)
	}
	sa := &unix.SockaddrInet6{Port: int(addr.Port()), Addr: addr.Addr().As16()}
	if err := unix.Bind(fd, sa); err != nil {
		if errors.Is(err, unix.EADDRINUSE) {
			return nil, fmt.Errorf("bind UDP %s: %w: another clock agent (or another program) uses the port in this network namespace; stop it, or pick another with --port", addr, err)
		}
		if errors.Is(err, unix.EADDRNOTAVAIL) {
			return nil, fmt.Errorf("bind UDP %s: %w: the address is not one of this network namespace's; check --listen", addr, err)
		}
		return nil, fmt.Errorf("bind UDP %s: %w", addr, err)
	}
	tv := unix.NsecToTimeval(recvTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return nil, fmt.Errorf("set the probe socket's receive timeout: %w", err)
	}
	s := &socket{fd: fd, hw: hwIface != "", awaiting: map[uint32]awaited{}}
	if s.hw {
		iface, err := net.InterfaceByName(hwIface)
		if err != nil {
			return nil, fmt.Errorf("--iface %s: %w", hwIface, err)
		}
		if err := timestamp.EnableHWTimestamps(fd, iface); err != nil {
			return nil, fmt.Errorf("turn on hardware timestamps on %s: %w (`ethtool -T %s` lists what the NIC can stamp; run without --hw-timestamps for software ones)", hwIface, err, hwIface)
		}
	} else {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPING_NEW, softwareStamps); err != nil {
			return nil, fmt.Errorf("turn on software timestamps (SO_TIMESTAMPING): %w", err)
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SELECT_ERR_QUEUE, 1); err != nil {
			return nil, fmt.Errorf("set SO_SELECT_ERR_QUEUE: %w", err)
		}
	}
	// The flags as the kernel keeps them (the first field of struct
	// so_timestamping), whoever set them.
	if s.tsFlags, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPING); err != nil {
		return nil, fmt.Errorf("read the probe socket's timestamping flags: %w", err)
	}
	return s, nil
}

// restartIDs makes the kernel number this socket's next datagram 0, as
// nextID then says, and forgets the datagrams awaiting a stamp. Call with
// sendMu held, after a failed send: kernels before 6.13 may count a
// datagram that failed (EAGAIN on a full send buffer) and those since
// don't, so after a failure nextID can no longer be trusted to match.
// Turning SOF_TIMESTAMPING_OPT_ID off and on restarts a UDP socket's
// count at 0. A stamp of a datagram sent before the restart may still
// come, with a number the new count reuses; readStamps drops it, because
// it is older than the datagram it would match.
func (s *socket) restartIDs() {
	_ = unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPING_NEW, s.tsFlags&^unix.SOF_TIMESTAMPING_OPT_ID)
	_ = unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPING_NEW, s.tsFlags)
	s.nextID = 0
	clear(s.awaiting)
}

// close closes the socket.
func (s *socket) close() error { return unix.Close(s.fd) }

// port returns the UDP port the socket is bound to.
func (s *socket) port() (uint16, error) {
	sa, err := unix.Getsockname(s.fd)
	if err != nil {
		return 0, fmt.Errorf("read the probe socket's address: %w", err)
	}
	if a, ok := sa.(*unix.SockaddrInet6); ok {
		return uint16(a.Port), nil
	}
	return 0, fmt.Errorf("probe socket bound to %T", sa)
}

func sockaddr(to netip.AddrPort) *unix.SockaddrInet6 {
	return &unix.SockaddrInet6{Port: int(to.Port()), Addr: to.Addr().As16()}
}

// stampFunc receives the transmit stamp of a datagram sent with sendPair:
// idx is its place in the pair.
type stampFunc func(idx int, at time.Time)

// awaited is a datagram whose transmit stamp is expected.
type awaited struct {
	onStamp stampFunc
	idx     int
	sent    time.Time // wall clock: to expire entries, and to tell a stale stamp
}

// stampWait bounds how long a transmit stamp is waited for. A datagram to
// an address whose neighbour never resolves is never transmitted, and so
// never stamped.
const stampWait = 2 * time.Second

// sendPair sends two datagrams to to, back to back, without blocking:
// datagrams to a neighbour that doesn't resolve hold the socket's send
// buffer until they are dropped, and a full buffer fails the send
// (EAGAIN) instead of stalling the probes to every other peer. onStamp, when set,
// gets each one's transmit stamp later, from readStamps: nothing waits
// for a stamp here, so a peer that doesn't answer ARP stalls no one.
func (s *socket) sendPair(to netip.AddrPort, first, second []byte, onStamp stampFunc) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	sa := sockaddr(to)
	now := time.Now()
	for i, b := range [][]byte{first, second} {
		id := s.nextID
		if onStamp != nil {
			s.awaiting[id] = awaited{onStamp: onStamp, idx: i, sent: now}
		}
		if err := unix.Sendto(s.fd, b, unix.MSG_DONTWAIT, sa); err != nil {
			s.restartIDs()
			return fmt.Errorf("send to %s: %w", to, err)
		}
		s.nextID++
	}
	return nil
}

// send sends one datagram whose stamp nobody needs (an edges message).
func (s *socket) send(to netip.AddrPort, b []byte) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if err := unix.Sendto(s.fd, b, unix.MSG_DONTWAIT, sockaddr(to)); err != nil {
		s.restartIDs()
		return fmt.Errorf("send to %s: %w", to, err)
	}
	s.nextID++
	return nil
}

// readStamps reads the error queue until stop is closed, and hands each
// transmit stamp to the onStamp of its datagram.
func (s *socket) readStamps(stop <-chan struct{}) {
	oob := make([]byte, 512)
	fds := []unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLPRI}}
	lastExpiry := time.Now()
	for {
		select {
		case <-stop:
			return
		default:
		}
		// POLLPRI: the error queue has something (SO_SELECT_ERR_QUEUE).
		// POLLERR is reported whatever the events asked.
		if _, err := unix.Poll(fds, int(recvTimeout.Milliseconds())); err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
		for range 256 {
			_, oobn, _, _, err := unix.Recvmsg(s.fd, nil, oob, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
			if err != nil {
				break
			}
			st, ok, err := sockstamp.Parse(oob[:oobn])
			if err != nil || !ok || st.Kind != unix.SCM_TSTAMP_SND {
				continue
			}
			s.sendMu.Lock()
			w, found := s.awaiting[st.ID]
			// A stamp older than the datagram it would match belongs
			// to one sent before a restartIDs.
			found = found && !st.At.Before(w.sent)
			if found {
				delete(s.awaiting, st.ID)
			}
			s.sendMu.Unlock()
			if found {
				w.onStamp(w.idx, st.At)
			}
		}
		if time.Since(lastExpiry) > stampWait {
			lastExpiry = time.Now()
			s.sendMu.Lock()
			for id, w := range s.awaiting {
				if lastExpiry.Sub(w.sent) > stampWait {
					delete(s.awaiting, id)
				}
			}
			s.sendMu.Unlock()
		}
	}
}

// received is one datagram and its receive stamp, CLOCK_REALTIME (or
// the NIC's, which follows it).
type received struct {
	data []byte
	from netip.AddrPort
	at   time.Time
	// local is at on the agent's clock (Agent.rxTime).
	local int64
}

// errRecvTimeout says no datagram came within recvTimeout.
var errRecvTimeout = errors.New("no datagram")

// recv waits up to recvTimeout for a datagram. buf and oob are reused
// between calls; the returned data aliases buf.
func (s *socket) recv(buf, oob []byte) (received, error) {
	n, sa, at, err := timestamp.ReadPacketWithRXTimestampBuf(s.fd, buf, oob)
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
		return received{}, errRecvTimeout
	}
	if err != nil {
		return received{}, err
	}
	var from netip.AddrPort
	switch a := sa.(type) {
	case *unix.SockaddrInet6:
		from = netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port))
	case *unix.SockaddrInet4:
		from = netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	default:
		return received{}, fmt.Errorf("datagram from %T", sa)
	}
	return received{data: buf[:n], from: from, at: at}, nil
}
