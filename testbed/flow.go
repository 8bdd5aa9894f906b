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

// FlowConfig describes one bulk TCP flow.
type FlowConfig struct {
	// CC is the congestion control set with setsockopt(TCP_CONGESTION)
	// before connect; "" keeps the netns default.
	CC string
	// Bytes is the number of payload bytes, excluding the header.
	Bytes int64
	// Seed selects the payload pattern.
	Seed uint64
	// Timeout is the overall deadline of the flow and must be positive.
	Timeout time.Duration
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
	// Info is a TCP_INFO snapshot taken just before close.
	Info *unix.TCPInfo
	// Throughput is the payload goodput in bits/s: 8*Bytes/Duration.
	Throughput float64
}

// SendFlow dials dst from host with cfg.CC and sends the header followed by
// cfg.Bytes of Pattern(cfg.Seed, ...). The socket is created inside host's
// netns. It then shuts down its write side and waits for the sink to close
// the connection, so that Duration covers delivery.
//
// If the kernel does not know cfg.CC, the returned error names it. The CC
// the socket ran at the end is in FlowResult.CC; it may differ from cfg.CC
// when the CC hands the socket to another one (DCTCP without ECN falls
// back to reno), so callers compare it themselves.
func SendFlow(ctx context.Context, host *Host, dst netip.AddrPort, cfg FlowConfig) (res FlowResult, err error) {
	if cfg.Timeout <= 0 {
		return res, fmt.Errorf("send flow to %s: timeout must be positive, got %v", dst, cfg.Timeout)
	}
	if cfg.Bytes < 0 {
		return res, fmt.Errorf("send flow to %s: negative byte count %d", dst, cfg.Bytes)
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
	// A deadline in the past aborts blocked I/O as soon as ctx ends.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	raw, err := conn.SyscallConn()
	if err != nil {
		return res, fmt.Errorf("flow to %s: %w", dst, err)
	}
	if err := writeFlow(conn, cfg); err != nil {
		return res, fmt.Errorf("send flow to %s: %w", dst, errors.Join(err, ctx.Err()))
	}
	res.Bytes = cfg.Bytes
	if err := conn.CloseWrite(); err != nil {
		return res, fmt.Errorf("shut down write side of flow to %s: %w", dst, err)
	}
	// The sink sends nothing; wait for its FIN.
	if _, err := io.Copy(io.Discard, conn); err != nil {
		return res, fmt.Errorf("wait for sink to close flow to %s: %w", dst, errors.Join(err, ctx.Err()))
	}
	res.Duration = time.Since(start)
	if s := res.Duration.Seconds(); s > 0 {
		res.Throughput = 8 * float64(res.Bytes) / s
	}

	if err := controlErr(raw, func(fd int) error {
		var err error
		if res.CC, err = unix.GetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION); err != nil {
			return fmt.Errorf("get TCP_CONGESTION: %w", err)
		}
		if res.Info, err = unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO); err != nil {
			return fmt.Errorf("get TCP_INFO: %w", err)
		}
		return nil
	}); err != nil {
		return res, fmt.Errorf("flow to %s before close: %w", dst, err)
	}
	return res, nil
}

// dialCC connects to dst from inside host's netns, setting congestion
// control cc on the socket before connect.
func dialCC(ctx context.Context, host *Host, dst netip.AddrPort, cc string) (*net.TCPConn, error) {
	network := "tcp4"
	if dst.Addr().Is6() {
		network = "tcp6"
	}
	dialer := net.Dialer{
		Control: func(_, _ string, raw syscall.RawConn) error {
			if cc == "" {
				return nil
			}
			return controlErr(raw, func(fd int) error {
				err := unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc)
				if err != nil {
					return fmt.Errorf("set congestion control %q: %w", cc, err)
				}
				return nil
			})
		},
	}

	var conn net.Conn
	err := host.Do(func() error {
		// The whole dial runs on the thread inside the netns: the socket
		// belongs to the namespace current at socket() time.
		var err error
		conn, err = dialer.DialContext(ctx, network, dst.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("connect from netns %s: %w", host.Name, err)
	}
	return conn.(*net.TCPConn), nil
}

// writeFlow writes the header and the payload pattern.
func writeFlow(w io.Writer, cfg FlowConfig) error {
	buf := make([]byte, chunkSize)
	putHeader(buf, cfg.Seed, cfg.Bytes)
	used := headerLen

	// One iteration per chunk: at most cfg.Bytes/(chunkSize-headerLen)+1.
	for sent := int64(0); ; {
		n := int(min(int64(len(buf)-used), cfg.Bytes-sent))
		Pattern(cfg.Seed, sent, buf[used:used+n])
		if _, err := w.Write(buf[:used+n]); err != nil {
			return fmt.Errorf("write at payload offset %d: %w", sent, err)
		}
		sent += int64(n)
		used = 0
		if sent == cfg.Bytes {
			return nil
		}
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
