package qdisc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	tc "github.com/florianl/go-tc"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/testbed"
)

// peerIface returns the name of h's interface toward the other host: the
// one that is not loopback.
func peerIface(t testing.TB, h *testbed.Host) string {
	t.Helper()
	name, err := h.Interface()
	if err != nil {
		t.Fatalf("find the veth: %v", err)
	}
	return name
}

// loadEDT loads the EDT program, closed at the end of the test.
func loadEDT(t testing.TB) *EDTDelay {
	t.Helper()
	e, err := LoadEDTDelay()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Error(err)
		}
	})
	return e
}

// tcState is what traffic control has on one interface: its qdiscs and
// filters in tc(8)'s words, and the programs attached with TCX.
type tcState struct {
	Qdiscs  []string
	Filters []string
	TCX     []ebpf.ProgramID
}

func (s tcState) String() string {
	return fmt.Sprintf("qdiscs %q, filters %q, tcx programs %v", s.Qdiscs, s.Filters, s.TCX)
}

func (s tcState) equal(o tcState) bool {
	return slices.Equal(s.Qdiscs, o.Qdiscs) && slices.Equal(s.Filters, o.Filters) && slices.Equal(s.TCX, o.TCX)
}

// readTCState reads the tc state of iface in h's netns.
func readTCState(t testing.TB, h *testbed.Host, iface string) tcState {
	t.Helper()
	var s tcState
	err := h.Do(func() error {
		d, err := openNetdev(iface)
		if err != nil {
			return err
		}
		defer d.close()
		qs, err := d.qdiscs()
		if err != nil {
			return err
		}
		for _, q := range qs {
			s.Qdiscs = append(s.Qdiscs, fmt.Sprintf("%s %s parent %s", q.Kind, handleString(q.Handle), handleString(q.Parent)))
		}
		for _, dir := range []Direction{Ingress, Egress} {
			fs, err := d.filters(clsactFilterParent(dir))
			if err != nil {
				return err
			}
			for _, f := range fs {
				s.Filters = append(s.Filters, describeFilter(dir, f))
			}
			ids, err := tcxPrograms(int(d.ifindex), dir)
			if err != nil {
				return err
			}
			s.TCX = append(s.TCX, ids...)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read tc state of %s in netns %s: %v", iface, h.Name, err)
	}
	sort.Strings(s.Qdiscs)
	sort.Strings(s.Filters)
	slices.Sort(s.TCX)
	return s
}

// describeFilter formats a filter like "egress pref 52239 bpf handle 0x1
// id 42"; the entry of a filter chain itself has handle 0x0.
func describeFilter(dir Direction, f tc.Object) string {
	s := fmt.Sprintf("%s pref %d %s handle %#x", dir, f.Info>>16, f.Kind, f.Handle)
	if f.BPF != nil && f.BPF.ID != nil {
		s += fmt.Sprintf(" id %d", *f.BPF.ID)
	}
	if f.BPF != nil && f.BPF.Flags != nil && *f.BPF.Flags&tc.BpfActDirect != 0 {
		s += " direct-action"
	}
	return s
}

// tcxPrograms lists the programs attached with TCX on one side of
// ifindex. A kernel without TCX (before 6.6) rejects the query; it has
// none.
func tcxPrograms(ifindex int, dir Direction) ([]ebpf.ProgramID, error) {
	res, err := link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: dir.tcxAttachType()})
	if errors.Is(err, unix.EINVAL) || errors.Is(err, ebpf.ErrNotSupported) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("query tcx %s programs: %w", dir, err)
	}
	var ids []ebpf.ProgramID
	for _, p := range res.Programs {
		ids = append(ids, p.ID)
	}
	return ids, nil
}

// rttResult is what measureRTT observed on one connection.
type rttResult struct {
	// Min and Median are the user-space round trip times of the
	// request/response exchanges.
	Min, Median time.Duration
	// KernelMin is the connection's tcpi_min_rtt, the kernel's minimum
	// RTT sample, at the end.
	KernelMin time.Duration
	// Samples is the number of exchanges.
	Samples int
}

func (r rttResult) String() string {
	return fmt.Sprintf("min %v, median %v, tcpi_min_rtt %v over %d exchanges",
		r.Min.Round(time.Microsecond), r.Median.Round(time.Microsecond), r.KernelMin, r.Samples)
}

// measureRTT opens one TCP connection from a to an echo server on b and
// times n request/response exchanges of msgSize bytes, each checked for
// the right bytes. Everything ends within timeout.
func measureRTT(t testing.TB, a, b *testbed.Host, n int, timeout time.Duration) rttResult {
	t.Helper()
	const msgSize = 100
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	srv := startEcho(t, b)
	conn := dial(t, ctx, a, srv)
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	req, resp := make([]byte, msgSize), make([]byte, msgSize)
	rtts := make([]time.Duration, 0, n)
	for i := range n {
		for j := range req {
			req[j] = byte(i + j)
		}
		start := time.Now()
		if _, err := conn.Write(req); err != nil {
			t.Fatalf("exchange %d: write: %v", i, errors.Join(err, ctx.Err()))
		}
		if _, err := io.ReadFull(conn, resp); err != nil {
			t.Fatalf("exchange %d: read the echo: %v", i, errors.Join(err, ctx.Err()))
		}
		rtts = append(rtts, time.Since(start))
		if !bytes.Equal(req, resp) {
			t.Fatalf("exchange %d: echo differs from the request", i)
		}
	}

	info := tcpInfo(t, conn)
	slices.Sort(rtts)
	return rttResult{
		Min:       rtts[0],
		Median:    rtts[len(rtts)/2],
		KernelMin: time.Duration(info.Min_rtt) * time.Microsecond,
		Samples:   len(rtts),
	}
}

// startEcho starts a TCP server on h's address that accepts one
// connection and echoes it until the client closes it. The server stops
// at the end of the test at the latest.
func startEcho(t testing.TB, h *testbed.Host) netip.AddrPort {
	t.Helper()
	var ln net.Listener
	err := h.Do(func() error {
		var err error
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(h.Addr, 0).String())
		return err
	})
	if err != nil {
		t.Fatalf("listen in netns %s: %v", h.Name, err)
	}
	var mu sync.Mutex
	var conn net.Conn
	done := make(chan struct{})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		if conn != nil {
			conn.Close()
		}
		mu.Unlock()
		<-done
	})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		ln.Close()
		if err != nil {
			return
		}
		mu.Lock()
		conn = c
		mu.Unlock()
		c.SetDeadline(time.Now().Add(2 * time.Minute))
		io.Copy(c, c)
		c.Close()
	}()
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// dial connects from inside h's netns.
func dial(t testing.TB, ctx context.Context, h *testbed.Host, dst netip.AddrPort) *net.TCPConn {
	t.Helper()
	var c net.Conn
	err := h.Do(func() error {
		var err error
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp4", dst.String())
		return err
	})
	if err != nil {
		t.Fatalf("connect from netns %s to %s: %v", h.Name, dst, err)
	}
	return c.(*net.TCPConn)
}

// tcpInfo reads TCP_INFO of conn.
func tcpInfo(t testing.TB, conn *net.TCPConn) *unix.TCPInfo {
	t.Helper()
	raw, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var info *unix.TCPInfo
	var ierr error
	if err := raw.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		t.Fatal(err)
	}
	if ierr != nil {
		t.Fatalf("get TCP_INFO: %v", ierr)
	}
	return info
}
