package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// maxFlowSamples caps FlowResult.Samples.
const maxFlowSamples = 1 << 16

// FlowConfig describes one bulk TCP flow.
type FlowConfig struct {
	// CC is the congestion control set with setsockopt(TCP_CONGESTION)
	// before connect; "" keeps the netns default.
	CC string
	// Bytes is the number of payload bytes, excluding the header. It must
	// be 0 when For is set.
	Bytes int64
	// For, when positive, makes the flow time-bounded instead: it sends
	// pattern bytes until For has passed since the start of connect, then
	// shuts down its write side and waits for the sink as a Bytes flow
	// does. The header declares no length, and the sink verifies the
	// pattern up to EOF (SinkResult.Unbounded). For must be less than
	// Timeout, which must also cover connect and the final drain.
	//
	// For ends the writing, not the delivery: what the socket's send
	// buffer holds at that moment (up to a few MB with the default
	// tcp_wmem) still drains afterwards, and Duration includes that. At
	// 1 Gbit/s this adds milliseconds; at 20 Mbit/s it added 0.6 s here.
	For time.Duration
	// Seed selects the payload pattern.
	Seed uint64
	// Timeout is the overall deadline of the flow and must be positive.
	Timeout time.Duration
	// SampleEvery, when positive, polls TCP_INFO of the sending socket at
	// this interval from connect until the sink's EOF, into
	// FlowResult.Samples. Intervals below a millisecond work (the poller
	// sleeps on a dedicated OS thread), at the cost of a busier core.
	SampleEvery time.Duration
}

func (c FlowConfig) validate() error {
	if c.Timeout <= 0 {
		return fmt.Errorf("timeout must be positive, got %v", c.Timeout)
	}
	if c.Bytes < 0 {
		return fmt.Errorf("negative byte count %d", c.Bytes)
	}
	if c.For < 0 {
		return fmt.Errorf("negative duration For %v", c.For)
	}
	if c.For > 0 && c.Bytes != 0 {
		return fmt.Errorf("set either Bytes (%d) or For (%v), not both", c.Bytes, c.For)
	}
	if c.For > 0 && c.For >= c.Timeout {
		return fmt.Errorf("timeout %v must exceed For %v, leaving time to connect and drain", c.Timeout, c.For)
	}
	if c.SampleEvery < 0 {
		return fmt.Errorf("negative sample interval %v", c.SampleEvery)
	}
	return nil
}

// FlowResult is what the sender observed.
type FlowResult struct {
	// CC is the congestion control read back with getsockopt just before
	// close.
	CC string
	// Bytes is the number of payload bytes sent, excluding the header.
	Bytes int64
	// Duration runs from the start of connect until all bytes were written,
	// the write side was shut down and the sink closed its side (EOF).
	Duration time.Duration
	// AckedIn runs from the start of connect until the kernel took in the
	// ACK of the last byte, by the kernel's own timestamp of that ACK
	// (acktime.go): the flow's completion without the processes' wake-ups
	// that Duration also counts. 0 for a time-bounded flow, or when the
	// kernel gave no timestamp (AckStampErr says why).
	AckedIn     time.Duration
	AckStampErr error
	// Info is a TCP_INFO snapshot taken just before close.
	Info *unix.TCPInfo
	// Throughput is the payload goodput in bits/s: 8*Bytes/Duration.
	Throughput float64
	// Samples are the TCP_INFO readings taken every FlowConfig.SampleEvery,
	// at most 1<<16, ending with one taken from Info; nil when sampling is
	// off.
	Samples []FlowSample
}

// FlowSample is one TCP_INFO reading of a flow's sending socket.
type FlowSample struct {
	// At is the time since the start of connect.
	At time.Duration
	// BytesAcked is tcpi_bytes_acked: the bytes the receiver has
	// acknowledged so far. It counts the 16-byte header (and, at the end,
	// the FIN) as well as the payload.
	BytesAcked uint64
	// Cwnd is the congestion window in segments (tcpi_snd_cwnd).
	Cwnd uint32
	// RTT is the smoothed RTT (tcpi_rtt, microsecond resolution).
	RTT time.Duration
	// DeliveryRate is the kernel's most recent delivery rate estimate in
	// bytes/s (tcpi_delivery_rate).
	DeliveryRate uint64
}

// flowSample converts a TCP_INFO snapshot taken at.
func flowSample(at time.Duration, info *unix.TCPInfo) FlowSample {
	return FlowSample{
		At:           at,
		BytesAcked:   info.Bytes_acked,
		Cwnd:         info.Snd_cwnd,
		RTT:          time.Duration(info.Rtt) * time.Microsecond,
		DeliveryRate: info.Delivery_rate,
	}
}

// SendFlow dials dst from host with cfg.CC and sends the header followed by
// cfg.Bytes of Pattern(cfg.Seed, ...), or, with cfg.For, by pattern bytes
// for that long. The socket is created inside host's netns. It then shuts
// down its write side and waits for the sink to close the connection, so
// that Duration covers delivery.
//
// If the kernel does not know cfg.CC, the returned error names it. The CC
// the socket ran at the end is in FlowResult.CC; it may differ from cfg.CC
// when the CC hands the socket to another one (DCTCP without ECN falls
// back to reno), so callers compare it themselves.
func SendFlow(ctx context.Context, host *Host, dst netip.AddrPort, cfg FlowConfig) (res FlowResult, err error) {
	if err := cfg.validate(); err != nil {
		return res, fmt.Errorf("send flow to %s: %w", dst, err)
	}
	if !dst.IsValid() {
		return res, fmt.Errorf("send flow from netns %s: invalid destination %v", host.Name, dst)
	}
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()

	start := time.Now()
	conn, err := dialCC(ctx, host, dst, cfg.CC)
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := conn.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close flow to %s: %w", dst, cerr)
		}
	}()
	raw, err := conn.SyscallConn()
	if err != nil {
		return res, fmt.Errorf("flow to %s: %w", dst, err)
	}
	stopSampling := func() []FlowSample { return nil }
	if cfg.SampleEvery > 0 {
		// One place is kept for the final snapshot.
		stopSampling = startFlowSampler(ctx, raw, start, cfg.SampleEvery, maxFlowSamples-1)
		// Deferred after conn.Close, so it runs first: the poller is done
		// with the socket before it is closed. When the flow got to its
		// end, the poller was stopped there and this adds nothing.
		defer func() { res.Samples = append(res.Samples, stopSampling()...) }()
	}

	end := start.Add(cfg.For)
	if cfg.For > 0 {
		// Armed before the AfterFunc below, which must win if ctx ends.
		if err := startTimedFlow(conn, cfg.Seed, end); err != nil {
			return res, fmt.Errorf("send flow to %s: %w", dst, err)
		}
	}
	// A deadline in the past aborts blocked I/O as soon as ctx ends.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	if cfg.For > 0 {
		res.Bytes, err = writeTimedFlow(ctx, conn, cfg.Seed, end)
	} else {
		last := func(b byte) error { return sendStamped(raw, b) }
		res.Bytes, err = cfg.Bytes, writeFlow(conn, cfg, last)
	}
	if err != nil {
		return res, fmt.Errorf("send flow to %s: %w", dst, errors.Join(err, ctx.Err()))
	}
	if err := conn.CloseWrite(); err != nil {
		return res, fmt.Errorf("shut down write side of flow to %s: %w", dst, err)
	}
	// The sink sends nothing; wait for its FIN.
	if _, err := io.Copy(io.Discard, conn); err != nil {
		return res, fmt.Errorf("wait for sink to close flow to %s: %w", dst, errors.Join(err, ctx.Err()))
	}
	res.Duration = time.Since(start)
	if cfg.For == 0 {
		var acked time.Time
		res.AckStampErr = controlErr(raw, func(fd int) (err error) {
			acked, err = lastAckStamp(fd)
			return err
		})
		if res.AckStampErr == nil {
			res.AckedIn = acked.Sub(start)
		}
	}
	if s := res.Duration.Seconds(); s > 0 {
		res.Throughput = 8 * float64(res.Bytes) / s
	}
	// Stopped before the final snapshot, so that the samples stay in order.
	res.Samples = stopSampling()

	if res.CC, res.Info, err = ccAndInfo(raw); err != nil {
		return res, fmt.Errorf("flow to %s before close: %w", dst, err)
	}
	if cfg.SampleEvery > 0 {
		res.Samples = append(res.Samples, flowSample(time.Since(start), res.Info))
	}
	return res, nil
}

// ccAndInfo reads the congestion control a socket runs and its TCP_INFO.
func ccAndInfo(raw syscall.RawConn) (cc string, info *unix.TCPInfo, err error) {
	err = controlErr(raw, func(fd int) error {
		var err error
		if cc, err = unix.GetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION); err != nil {
			return fmt.Errorf("get TCP_CONGESTION: %w", err)
		}
		if info, err = unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO); err != nil {
			return fmt.Errorf("get TCP_INFO: %w", err)
		}
		return nil
	})
	return cc, info, err
}

// startFlowSampler polls TCP_INFO of the socket every interval, on a grid
// counted from start, until ctx is done, the returned stop is called, or
// max readings were taken. stop waits for the poller and returns its
// samples; later calls of stop return nil.
func startFlowSampler(ctx context.Context, raw syscall.RawConn, start time.Time, interval time.Duration, max int) (stop func() []FlowSample) {
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan []FlowSample, 1)
	stopped := false
	go func() {
		samples := make([]FlowSample, 0, min(max, 1024))
		defer func() { out <- samples }()
		pollOnGrid(ctx, start, interval, max, func() bool {
			var info *unix.TCPInfo
			err := controlErr(raw, func(fd int) error {
				var err error
				info, err = unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
				return err
			})
			if err != nil {
				return false
			}
			samples = append(samples, flowSample(time.Since(start), info))
			return true
		})
	}()
	return func() []FlowSample {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-out
	}
}

// dialCC connects to dst from host's netns with congestion control cc
// ("" keeps the netns default).
//
// Only the socket is made inside the netns, which is all that binds it
// there; the connect and the wait for it run on an ordinary goroutine.
// Dialing on the thread locked into the netns, as before, parked the
// goroutine on that one thread, and every flow paid for waking that thread
// in its completion time: about a fifth of a millisecond on this host.
func dialCC(ctx context.Context, host *Host, dst netip.AddrPort, cc string) (*net.TCPConn, error) {
	family, sa := unix.AF_INET, unix.Sockaddr(nil)
	if dst.Addr().Is4() {
		sa = &unix.SockaddrInet4{Port: int(dst.Port()), Addr: dst.Addr().As4()}
	} else {
		family = unix.AF_INET6
		sa = &unix.SockaddrInet6{Port: int(dst.Port()), Addr: dst.Addr().As16()}
	}
	fd := -1
	err := host.Do(func() (err error) {
		fd, err = unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("connect from netns %s: socket: %w", host.Name, err)
	}
	f := os.NewFile(uintptr(fd), "tcp")
	defer f.Close() // FileConn holds its own copy of the descriptor
	if err := setCCFd(fd, cc); err != nil {
		return nil, fmt.Errorf("connect from netns %s: %w", host.Name, err)
	}
	if err := unix.Connect(fd, sa); err != nil && !errors.Is(err, unix.EINPROGRESS) {
		return nil, fmt.Errorf("connect from netns %s to %s: %w", host.Name, dst, err)
	}
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("connect from netns %s to %s: %w", host.Name, dst, err)
	}
	conn := c.(*net.TCPConn)
	if err := awaitConnect(ctx, conn); err != nil {
		conn.Close()
		return nil, fmt.Errorf("connect from netns %s to %s: %w", host.Name, dst, err)
	}
	return conn, nil
}

// awaitConnect waits until conn's non-blocking connect has finished, or
// ctx ends, and returns the connect's error.
func awaitConnect(ctx context.Context, conn *net.TCPConn) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetWriteDeadline(dl)
		defer conn.SetWriteDeadline(time.Time{})
	}
	// A deadline in the past wakes the wait below as soon as ctx ends.
	stop := context.AfterFunc(ctx, func() { conn.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	var connErr error
	// The socket turns writable when the handshake ends, either way; until
	// then, and on a spurious wake-up, f returns false and the poller
	// waits.
	if err := raw.Write(func(fd uintptr) bool {
		soErr, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			connErr = err
			return true
		}
		switch e := unix.Errno(soErr); e {
		case 0, unix.EINPROGRESS, unix.EALREADY, unix.EINTR:
		default:
			connErr = e
			return true
		}
		_, err = unix.Getpeername(int(fd))
		return err == nil
	}); err != nil {
		return errors.Join(err, ctx.Err())
	}
	return connErr
}

// SetCC returns a socket control function (net.Dialer.Control,
// net.ListenConfig.Control) that sets congestion control cc, with
// TCP_CONGESTION, before bind or connect, or does nothing when cc is "".
func SetCC(cc string) func(_, _ string, raw syscall.RawConn) error {
	return func(_, _ string, raw syscall.RawConn) error {
		return controlErr(raw, func(fd int) error { return setCCFd(fd, cc) })
	}
}

// setCCFd sets congestion control cc on socket fd, or does nothing when cc
// is "".
func setCCFd(fd int, cc string) error {
	if cc == "" {
		return nil
	}
	if err := unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc); err != nil {
		return fmt.Errorf("set congestion control %q: %w", cc, err)
	}
	return nil
}

// writeFlow writes the header and the payload pattern of a flow of
// cfg.Bytes. lastByte, when not nil, sends the flow's last byte in place
// of w.
func writeFlow(w io.Writer, cfg FlowConfig, lastByte func(b byte) error) error {
	buf := make([]byte, bufferFor(headerLen+cfg.Bytes))
	putHeader(buf, cfg.Seed, cfg.Bytes)
	_, err := writePattern(w, buf, headerLen, newStream(cfg.Seed), 0, cfg.Bytes, lastByte)
	return err
}

// writePattern writes n bytes of pattern, from its offset from, through
// buf. The first used bytes of buf already hold what goes out before them
// (a flow's header). lastByte, when not nil, sends the last byte written
// (the pattern's last, or the header's last when n is 0) in place of w. It
// returns how many of the pattern's bytes went out, the last one counted
// once lastByte took it.
func writePattern(w io.Writer, buf []byte, used int, pattern *stream, from, n int64, lastByte func(b byte) error) (int64, error) {
	// One iteration per buffer: at most n/(len(buf)-used)+1.
	for sent := int64(0); ; {
		k := int(min(int64(len(buf)-used), n-sent))
		pattern.fill(from+sent, buf[used:used+k])
		end, last := used+k, sent+int64(k) == n
		if last && lastByte != nil {
			end--
		}
		if end > 0 {
			if _, err := w.Write(buf[:end]); err != nil {
				return sent, fmt.Errorf("write at payload offset %d: %w", from+sent, err)
			}
		}
		if !last {
			sent += int64(k)
			used = 0
			continue
		}
		if lastByte == nil {
			return n, nil
		}
		if err := lastByte(buf[end]); err != nil {
			return max(n-1, 0), fmt.Errorf("write the last byte: %w", err)
		}
		return n, nil
	}
}

// startTimedFlow writes the header of a time-bounded flow and arms the
// write deadline at which its payload ends. The header goes out on its
// own, before the deadline is armed, so that it is complete however early
// the deadline is: 16 bytes always fit into a fresh socket's send buffer.
func startTimedFlow(conn *net.TCPConn, seed uint64, end time.Time) error {
	var hdr [headerLen]byte
	putHeader(hdr[:], seed, unknownLength)
	if _, err := conn.Write(hdr[:]); err != nil {
		return fmt.Errorf("write header: %w", err)
	}
	if err := conn.SetWriteDeadline(end); err != nil {
		return fmt.Errorf("set end of time-bounded flow: %w", err)
	}
	return nil
}

// writeTimedFlow writes the payload pattern until the write deadline armed
// by startTimedFlow (end) expires, and returns the number of payload bytes
// written. A deadline that expires inside a Write leaves a partial write,
// which the count includes, so the stream stays a prefix of the pattern.
func writeTimedFlow(ctx context.Context, conn *net.TCPConn, seed uint64, end time.Time) (int64, error) {
	buf := make([]byte, chunkSize)
	pattern := newStream(seed)
	// Every Write checks the deadline before it starts and while it
	// blocks, so the loop ends once end has passed: it is bounded in time
	// by For.
	for sent := int64(0); ; {
		pattern.fill(sent, buf)
		n, err := conn.Write(buf)
		sent += int64(n)
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() == nil && !time.Now().Before(end) {
			return sent, nil
		}
		return sent, fmt.Errorf("write at payload offset %d: %w", sent, err)
	}
}

// controlErr runs fn on the socket's file descriptor and returns the error
// of either.
func controlErr(raw syscall.RawConn, fn func(fd int) error) error {
	var fnErr error
	if err := raw.Control(func(fd uintptr) { fnErr = fn(int(fd)) }); err != nil {
		return err
	}
	return fnErr
}
