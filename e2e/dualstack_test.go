package e2e

import (
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/telemetry/sockops"
)

// TestDualStackServerEchoesINT sends powertcp from an IPv4 client to a
// server listening on [::], as iperf3 -s, Go's net.Listen("tcp", ":port")
// and many daemons do. The server's socket is AF_INET6 and sees the client
// as ::ffff:198.18.x.y; INT must treat that peer as the IPv4 address it
// is, so that the server parses forward options and echoes them, and
// powertcp runs on INT rather than in θ mode.
func TestDualStackServerEchoesINT(t *testing.T) {
	testutil.RequireKernelCC(t, "powertcp")
	l, n := newSys(t)
	enableINTForTest(t, n, sockops.Config{})
	attachForTest(t, l, loader.AttachRequest{Name: "powertcp", Params: map[string]string{"host_bw": "1gbit"}})
	d := newDumbbell(t, 1)
	hopForTest(t, d, 0)

	const size = 8 << 20
	var ln net.Listener
	if err := d.Receiver.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(netip.IPv6Unspecified(), 0).String())
		return err
	}); err != nil {
		t.Fatalf("listen on [::] in %s: %v", d.Receiver.Name, err)
	}
	t.Cleanup(func() { ln.Close() })
	type accepted struct {
		family int
		remote string
		bytes  int64
		err    error
	}
	done := make(chan accepted, 1)
	go func() {
		var a accepted
		defer func() { done <- a }()
		c, err := ln.Accept()
		if err != nil {
			a.err = err
			return
		}
		defer c.Close()
		a.remote = c.RemoteAddr().String()
		raw, err := c.(*net.TCPConn).SyscallConn()
		if err == nil {
			raw.Control(func(fd uintptr) { a.family, a.err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN) })
		}
		c.SetReadDeadline(time.Now().Add(60 * time.Second))
		a.bytes, err = io.Copy(io.Discard, c)
		if a.err == nil {
			a.err = err
		}
	}()

	port := ln.Addr().(*net.TCPAddr).Port
	conn := dialCC(t, d.Senders[0], netip.AddrPortFrom(d.Receiver.Addr, uint16(port)).String(), "powertcp")
	if !d.Receiver.Addr.Is4() {
		t.Fatalf("the receiver's address %s is not IPv4", d.Receiver.Addr)
	}
	conn.SetWriteDeadline(time.Now().Add(60 * time.Second))
	if _, err := conn.Write(make([]byte, size)); err != nil {
		t.Fatalf("send: %v", err)
	}
	conn.Close()
	var a accepted
	select {
	case a = <-done:
	case <-time.After(90 * time.Second):
		t.Fatal("the server got no connection within 90 s")
	}
	if a.err != nil || a.bytes != size {
		t.Fatalf("the server got %d of %d bytes: %v", a.bytes, size, a.err)
	}
	// The bug needs an AF_INET6 socket with a v4-mapped peer: check that
	// this is what the server had.
	if a.family != unix.AF_INET6 {
		t.Fatalf("the server's socket is of family %d, want AF_INET6 (%d): the test does not exercise a dual-stack listener", a.family, unix.AF_INET6)
	}
	t.Logf("server socket AF_INET6, client %s", a.remote)

	st, err := n.Status()
	if err != nil {
		t.Fatal(err)
	}
	cc := ccStats(t, l, "powertcp")
	t.Logf("INT counters %v; powertcp int_samples %d, no_int_acks %d", st.Stats, cc["int_samples"], cc["no_int_acks"])
	if st.Stats["scoped_connections"] < 2 {
		t.Errorf("scoped_connections = %d, want both ends (2 or more)", st.Stats["scoped_connections"])
	}
	if st.Stats["forward_parsed"] == 0 || st.Stats["echo_parsed"] == 0 {
		t.Errorf("forward_parsed %d, echo_parsed %d: the dual-stack server parsed or echoed no INT", st.Stats["forward_parsed"], st.Stats["echo_parsed"])
	}
	if cc["int_samples"] == 0 {
		t.Errorf("powertcp counted no INT samples (no_int_acks %d): it ran in θ mode", cc["no_int_acks"])
	}
}
