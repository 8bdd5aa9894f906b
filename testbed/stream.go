package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Stream is one long-lived connection from a host to a Sink on which the
// sender sends a series of messages, one at a time: a server that keeps
// its connection to a client open and answers each request on it, as RPC
// servers do, instead of opening a connection per response. The
// connection carries one unbounded flow (a header that declares no
// length, then the pattern of its seed), and each message is the next
// bytes of that pattern, so the sink verifies every byte of every message
// (SinkResult.Unbounded) with no framing of its own.
//
// Each message's last byte asks for the kernel's timestamp of its ACK
// (acktime.go), so that Send times a message the way SendFlow times a
// flow, without the processes' wake-ups. Send waits for that timestamp
// before it returns, so one message is in flight at a time and the error
// queue never holds a timestamp while the socket is neither readable nor
// writable. A Stream is not safe for concurrent use.
type Stream struct {
	host    *Host
	dst     netip.AddrPort
	conn    *net.TCPConn
	raw     syscall.RawConn
	pattern *stream
	buf     []byte
	// sent counts the payload bytes written so far.
	sent   int64
	closed bool
}

// StreamMessage is what the sender observed of one message.
type StreamMessage struct {
	// Bytes is the message's length.
	Bytes int64
	// Start is when Send began to write it, and AckedIn the time from
	// Start until the kernel took in the ACK of its last byte, by the
	// kernel's own timestamp of that ACK.
	Start   time.Time
	AckedIn time.Duration
	// Retrans and RTOs are the segments the connection retransmitted and
	// the retransmission timeouts it took while the message was in
	// flight: the growth of tcpi_total_retrans and tcpi_total_rto.
	Retrans, RTOs uint32
}

// OpenStream connects to dst from host with congestion control cc (""
// keeps the netns default), turns on ACK timestamps numbered from the
// first byte, and writes the stream's header. Close it when done.
func OpenStream(ctx context.Context, host *Host, dst netip.AddrPort, cc string, seed uint64) (_ *Stream, err error) {
	if !dst.IsValid() {
		return nil, fmt.Errorf("open stream from netns %s: invalid destination %v", host.Name, dst)
	}
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	conn, err := dialCC(ctx, host, dst, cc)
	if err != nil {
		return nil, fmt.Errorf("open stream: %w", err)
	}
	defer func() {
		if err != nil {
			conn.Close()
		}
	}()
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("open stream to %s: %w", dst, err)
	}
	// Turned on before the first byte leaves, so that a timestamp's ID
	// is the offset in the stream of the byte it stamps.
	if err := controlErr(raw, func(fd int) error {
		return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPING, ackStampReport)
	}); err != nil {
		return nil, fmt.Errorf("open stream to %s: set SO_TIMESTAMPING (ACK timestamps): %w", dst, err)
	}
	var hdr [headerLen]byte
	putHeader(hdr[:], seed, unknownLength)
	stop := context.AfterFunc(ctx, func() { conn.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := conn.Write(hdr[:]); err != nil {
		return nil, fmt.Errorf("open stream to %s: write header: %w", dst, errors.Join(err, ctx.Err()))
	}
	return &Stream{host: host, dst: dst, conn: conn, raw: raw, pattern: newStream(seed)}, nil
}

// Send writes the stream's next n bytes, n ≥ 1, and waits until the
// kernel took in the ACK of the last of them, or ctx ends. A failed Send
// leaves the stream unusable: Close it.
func (s *Stream) Send(ctx context.Context, n int64) (m StreamMessage, err error) {
	if s.closed {
		return m, fmt.Errorf("send on stream to %s: stream closed", s.dst)
	}
	if n < 1 {
		return m, fmt.Errorf("send on stream to %s: message of %d bytes, want at least 1", s.dst, n)
	}
	m.Bytes, m.Start = n, time.Now()
	before, err := s.info()
	if err != nil {
		return m, fmt.Errorf("send on stream to %s: %w", s.dst, err)
	}
	stop := context.AfterFunc(ctx, func() { s.conn.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()

	if want := bufferFor(n); len(s.buf) < want {
		s.buf = make([]byte, want)
	}
	stamp := func(b byte) error { return sendStamped(s.raw, b) }
	sent, err := writePattern(s.conn, s.buf, 0, s.pattern, s.sent, n, stamp)
	s.sent += sent
	if err != nil {
		return m, fmt.Errorf("send on stream to %s: %w", s.dst, errors.Join(err, ctx.Err()))
	}

	// The stamped byte's offset in the stream, header included.
	id := uint32(headerLen + s.sent - 1)
	acked, err := s.awaitAckStamp(id)
	if err != nil {
		return m, fmt.Errorf("send on stream to %s: wait for the ACK of the message's last byte: %w", s.dst, errors.Join(err, ctx.Err()))
	}
	m.AckedIn = acked.Sub(m.Start)
	after, err := s.info()
	if err != nil {
		return m, fmt.Errorf("send on stream to %s: %w", s.dst, err)
	}
	m.Retrans = after.Total_retrans - before.Total_retrans
	m.RTOs = uint32(after.Total_rto - before.Total_rto)
	return m, nil
}

// awaitAckStamp waits for the ACK timestamp of the byte at offset id and
// returns its time. The timestamp comes when every byte is acknowledged,
// and so with the socket writable, which is what wakes the wait (an
// error-queue message is EPOLLERR, which the poller reports to writers).
// Timestamps of other offsets, which this Stream never asks for, are
// skipped.
func (s *Stream) awaitAckStamp(id uint32) (time.Time, error) {
	var (
		at    time.Time
		found bool
		rerr  error
		oob   = make([]byte, 512)
	)
	err := s.raw.Write(func(fd uintptr) bool {
		for range maxAckStamps {
			t, got, ok, err := recvAckStamp(int(fd), oob)
			if errors.Is(err, unix.EAGAIN) {
				return false
			}
			if err != nil {
				rerr = err
				return true
			}
			if ok && got == id {
				at, found = t, true
				return true
			}
		}
		rerr = fmt.Errorf("%d messages in the error queue without the ACK timestamp of offset %d", maxAckStamps, id)
		return true
	})
	if err != nil {
		return time.Time{}, err
	}
	if rerr != nil {
		return time.Time{}, rerr
	}
	if !found {
		return time.Time{}, errNoAckStamp
	}
	return at, nil
}

// info reads the connection's TCP_INFO.
func (s *Stream) info() (*unix.TCPInfo, error) {
	var info *unix.TCPInfo
	err := controlErr(s.raw, func(fd int) (err error) {
		info, err = unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get TCP_INFO: %w", err)
	}
	return info, nil
}

// Close shuts the stream's write side, waits until the sink has read it
// all and closed its side, or ctx ends, and closes the connection. The
// result covers the whole connection: Bytes, the CC it ran at the end
// and its last TCP_INFO (nil when the connection failed before it could
// be read); Duration and the timestamps stay zero. Close always closes
// the connection; a second call does nothing.
func (s *Stream) Close(ctx context.Context) (res FlowResult, err error) {
	if s.closed {
		return res, nil
	}
	s.closed = true
	res.Bytes = s.sent
	defer func() {
		if cerr := s.conn.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close stream to %s: %w", s.dst, cerr)
		}
	}()
	// The last TCP_INFO is read before the shutdown and the sink's FIN,
	// so that it is there even when they fail; they add no data.
	if res.CC, res.Info, err = ccAndInfo(s.raw); err != nil {
		return res, fmt.Errorf("stream to %s before close: %w", s.dst, err)
	}
	stop := context.AfterFunc(ctx, func() { s.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := s.conn.CloseWrite(); err != nil {
		return res, fmt.Errorf("shut down write side of stream to %s: %w", s.dst, err)
	}
	// The sink sends nothing; wait for its FIN.
	if _, err := io.Copy(io.Discard, s.conn); err != nil {
		return res, fmt.Errorf("wait for sink to close stream to %s: %w", s.dst, errors.Join(err, ctx.Err()))
	}
	return res, nil
}
