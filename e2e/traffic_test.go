package e2e

// Tests in this file attach the CCs and move real TCP data through them,
// between network namespaces joined by veth.

import (
	"context"
	"io"
	"math"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/testbed"
)

const transferBytes = 64 << 20

// tcpiOptECN is TCPI_OPT_ECN from linux/tcp.h: ECN was negotiated.
const tcpiOptECN = 0x08

// netnsSysctl sets a sysctl inside h's netns with the sysctl tool, as an
// operator (or a pod's init container) would.
func netnsSysctl(t testing.TB, h *testbed.Host, kv string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := h.Command(ctx, "sysctl", "-w", kv).CombinedOutput()
	if err != nil {
		t.Fatalf("sysctl -w %s in %s: %v: %s", kv, h.Name, err, out)
	}
}

func sendFlow(t testing.TB, from *testbed.Host, to netip.AddrPort, cc string, bytes int64) testbed.FlowResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := testbed.SendFlow(ctx, from, to, testbed.FlowConfig{CC: cc, Bytes: bytes, Seed: uint64(time.Now().UnixNano()), Timeout: 50 * time.Second})
	if err != nil {
		t.Fatalf("flow %s -> %s (cc %q): %v", from.Name, to, cc, err)
	}
	return res
}

func waitSink(t testing.TB, s *testbed.Sink, n int, bytes int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := s.WaitResults(ctx, n)
	if err != nil {
		t.Fatalf("sink: %v", err)
	}
	for _, r := range res {
		if !r.OK || r.Bytes != bytes {
			t.Fatalf("sink got %d of %d bytes from %s, ok=%v: %v", r.Bytes, bytes, r.Remote, r.OK, r.Err)
		}
	}
}

// TestSelectAndTransfer attaches each CC, selects it by sysctl in a child
// netns and by setsockopt, moves 64 MiB each way over IPv4 and IPv6, and
// checks with TCP_INFO and the CC's own counters that the kernel ran it.
func TestSelectAndTransfer(t *testing.T) {
	for _, cc := range loader.Builtin() {
		for _, reg := range testutil.Registrations(t) {
			t.Run(cc.Name+"/"+string(reg), func(t *testing.T) {
				testutil.RequireKernelCC(t, cc.Name)
				l, _ := newSys(t, loader.WithRegistration(reg))
				attachForTest(t, l, loader.AttachRequest{Name: cc.Name})
				before := ccStats(t, l, cc.Name)

				p := testnet.NewPair(t)
				if cc.NeedsECN {
					// DCTCP runs at both ends: the kernel grants ECN to an
					// ECT-marked SYN only when the listener needs ECN too,
					// and the receiver's CC echoes CE marks precisely.
					netnsSysctl(t, p.B, "net.ipv4.tcp_congestion_control="+cc.Name)
				}
				sink := testnet.StartSink(t, p.B, p.B.Addr)
				sink6 := testnet.StartSink(t, p.B, p.B.Addr6)

				// 1. The netns default, set with sysctl inside the child netns.
				netnsSysctl(t, p.A, "net.ipv4.tcp_congestion_control="+cc.Name)
				bySysctl := sendFlow(t, p.A, sink.Addr, "", transferBytes)
				// 2. Per socket, with setsockopt(TCP_CONGESTION), over IPv6.
				// reno: in a child netns only TCP_CONG_NON_RESTRICTED CCs
				// may be the default, and this kernel's cubic is not one.
				netnsSysctl(t, p.A, "net.ipv4.tcp_congestion_control=reno")
				bySockopt := sendFlow(t, p.A, sink6.Addr, cc.Name, transferBytes)
				waitSink(t, sink, 1, transferBytes)
				waitSink(t, sink6, 1, transferBytes)

				for how, r := range map[string]testbed.FlowResult{"sysctl": bySysctl, "setsockopt": bySockopt} {
					t.Logf("%s via %s: %.2f Gbit/s, cwnd %d, rtt %dus, pacing %d B/s",
						cc.Name, how, r.Throughput/1e9, r.Info.Snd_cwnd, r.Info.Rtt, r.Info.Pacing_rate)
					if r.CC != cc.Name {
						t.Errorf("via %s: getsockopt(TCP_CONGESTION) = %q, want %q", how, r.CC, cc.Name)
					}
					if r.Info.Snd_cwnd == 0 || r.Info.Rtt == 0 {
						t.Errorf("via %s: TCP_INFO shows no window or RTT: %+v", how, r.Info)
					}
					if cc.NeedsECN && r.Info.Options&tcpiOptECN == 0 {
						t.Errorf("via %s: ECN was not negotiated (tcpi_options %#x)", how, r.Info.Options)
					}
					if cc.Name == "theta_powertcp" && r.Info.Pacing_rate == math.MaxUint64 {
						t.Errorf("via %s: pacing rate was never set by the CC", how)
					}
				}

				after := ccStats(t, l, cc.Name)
				acks := after["acks"] - before["acks"]
				inits := after["sock_init"] - before["sock_init"]
				t.Logf("%s counters: %d ACKs, %d sockets, %d window updates, %d fallbacks",
					cc.Name, acks, inits, after["cwnd_updates"]-before["cwnd_updates"], after["fallbacks"])
				// GRO and stretch ACKs make the count vary; any real use of
				// the CC for 128 MiB shows hundreds at least.
				if acks < 200 {
					t.Errorf("the CC saw %d ACKs; the kernel did not use it", acks)
				}
				if inits < 2 {
					t.Errorf("the CC initialised %d sockets, want at least 2", inits)
				}
				if after["fallbacks"] != 0 {
					t.Errorf("%d sockets fell back", after["fallbacks"])
				}
			})
		}
	}
}

// TestDCTCPFallsBackWithoutECN checks that bpf_dctcp hands a socket whose
// peer refuses ECN to reno, as the kernel's dctcp does.
func TestDCTCPFallsBackWithoutECN(t *testing.T) {
	testutil.RequireKernelCC(t, "bpf_dctcp")
	l, _ := newSys(t)
	attachForTest(t, l, loader.AttachRequest{Name: "bpf_dctcp"})
	p := testnet.NewPair(t)
	netnsSysctl(t, p.B, "net.ipv4.tcp_ecn=0")
	sink := testnet.StartSink(t, p.B, p.B.Addr)

	r := sendFlow(t, p.A, sink.Addr, "bpf_dctcp", 4<<20)
	waitSink(t, sink, 1, 4<<20)
	if r.CC != "reno" {
		t.Errorf("without ECN the socket runs %q, want reno", r.CC)
	}
	if s := ccStats(t, l, "bpf_dctcp"); s["fallbacks"] < 1 || s.SocketsInUse() != 0 {
		t.Errorf("counters after fallback: %v", s)
	}
}

// TestSysctlInitNetns selects the CC as the init netns default and opens a
// loopback connection with it. The previous default is restored.
func TestSysctlInitNetns(t *testing.T) {
	testutil.RequireKernelCC(t, "theta_powertcp")
	l, _ := newSys(t)
	attachForTest(t, l, loader.AttachRequest{Name: "theta_powertcp"})

	prev, err := kernel.ReadSysctl("/proc/sys", sysctlDefault)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kernel.WriteSysctl("/proc/sys", sysctlDefault, prev) })
	if out, err := exec.Command("sysctl", "-w", "net.ipv4.tcp_congestion_control=theta_powertcp").CombinedOutput(); err != nil {
		t.Fatalf("sysctl in the init netns: %v: %s", err, out)
	}

	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
		}
	}()
	c, err := net.DialTimeout("tcp4", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := socketCC(t, c.(*net.TCPConn)); got != "theta_powertcp" {
		t.Fatalf("loopback socket runs %q, want theta_powertcp", got)
	}
}

func socketCC(t testing.TB, c syscall.Conn) string {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var name string
	var gerr error
	raw.Control(func(fd uintptr) {
		name, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	})
	if gerr != nil {
		t.Fatal(gerr)
	}
	return strings.TrimRight(name, "\x00")
}

// drainListener accepts one connection on h at addr, reads it to EOF and
// reports the byte count.
func drainListener(t testing.TB, h *testbed.Host, addr netip.Addr) (net.Listener, <-chan int64) {
	t.Helper()
	var ln net.Listener
	if err := h.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	received := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			received <- -1
			return
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(60 * time.Second))
		n, _ := io.Copy(io.Discard, c)
		received <- n
	}()
	return ln, received
}

// dialCC connects from h to addr with congestion control cc.
func dialCC(t testing.TB, h *testbed.Host, addr string, cc string) *net.TCPConn {
	t.Helper()
	var conn *net.TCPConn
	if err := h.Do(func() error {
		d := net.Dialer{Timeout: 5 * time.Second, Control: testbed.SetCC(cc)}
		c, err := d.Dial("tcp", addr)
		if err == nil {
			conn = c.(*net.TCPConn)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func tcpInfo(t testing.TB, c *net.TCPConn) *unix.TCPInfo {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var info *unix.TCPInfo
	var ierr error
	raw.Control(func(fd uintptr) { info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
	if ierr != nil {
		t.Fatal(ierr)
	}
	return info
}

// TestDetachWithLiveSockets detaches a CC while a connection uses it: the
// detach reports the socket, and the connection keeps working on the CC.
func TestDetachWithLiveSockets(t *testing.T) {
	for _, reg := range testutil.Registrations(t) {
		t.Run(string(reg), func(t *testing.T) {
			testutil.RequireKernelCC(t, "theta_powertcp")
			l, _ := newSys(t, loader.WithRegistration(reg))
			if _, err := l.Attach(loader.AttachRequest{Name: "theta_powertcp"}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Detach("theta_powertcp") })
			p := testnet.NewPair(t)
			ln, received := drainListener(t, p.B, p.B.Addr)
			conn := dialCC(t, p.A, ln.Addr().String(), "theta_powertcp")
			chunk := make([]byte, 1<<20)
			if _, err := conn.Write(chunk); err != nil {
				t.Fatal(err)
			}

			res, err := l.Detach("theta_powertcp")
			if err != nil {
				t.Fatal(err)
			}
			if res.SocketsInUse < 1 {
				t.Errorf("detach reported %d sockets in use, want at least 1", res.SocketsInUse)
			}
			if testutil.Registered(t, "theta_powertcp") {
				t.Fatal("still registered after detach")
			}
			// The live socket keeps its CC and keeps moving data.
			conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
			for i := 0; i < 8; i++ {
				if _, err := conn.Write(chunk); err != nil {
					t.Fatalf("write after detach: %v", err)
				}
			}
			if got := socketCC(t, conn); got != "theta_powertcp" {
				t.Errorf("socket CC after detach = %q", got)
			}
			conn.Close()
			if n := <-received; n != 9<<20 {
				t.Fatalf("receiver got %d bytes, want %d", n, 9<<20)
			}
		})
	}
}

// TestSetReachesLiveSockets changes base_rtt on a connection that is
// sending. θ-PowerTCP paces at cwnd/τ, so τ = 1s must bring the pacing
// rate the kernel reports down to about one window per second at the next
// window update.
func TestSetReachesLiveSockets(t *testing.T) {
	testutil.RequireKernelCC(t, "theta_powertcp")
	l, _ := newSys(t)
	attachForTest(t, l, loader.AttachRequest{Name: "theta_powertcp"})
	p := testnet.NewPair(t)
	ln, received := drainListener(t, p.B, p.B.Addr)
	conn := dialCC(t, p.A, ln.Addr().String(), "theta_powertcp")

	stop := make(chan struct{})
	wrote := make(chan error, 1)
	go func() {
		chunk := make([]byte, 64<<10)
		conn.SetWriteDeadline(time.Now().Add(60 * time.Second))
		for {
			select {
			case <-stop:
				wrote <- conn.CloseWrite()
				return
			default:
			}
			if _, err := conn.Write(chunk); err != nil {
				wrote <- err
				return
			}
		}
	}()
	defer func() {
		// Back to a sane τ so that what is queued drains quickly.
		l.Set("theta_powertcp", map[string]string{"base_rtt": "0"})
		close(stop)
		if err := <-wrote; err != nil {
			t.Errorf("sender: %v", err)
		}
		if n := <-received; n <= 0 {
			t.Errorf("receiver got %d bytes", n)
		}
	}()

	time.Sleep(300 * time.Millisecond)
	before := tcpInfo(t, conn)
	if _, err := l.Set("theta_powertcp", map[string]string{"base_rtt": "1s"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		after := tcpInfo(t, conn)
		window := uint64(after.Snd_cwnd) * uint64(after.Snd_mss)
		if after.Pacing_rate <= 2*window {
			t.Logf("pacing %d B/s before set base_rtt=1s, %d B/s after (window %d B)", before.Pacing_rate, after.Pacing_rate, window)
			if before.Pacing_rate <= 2*uint64(before.Snd_cwnd)*uint64(before.Snd_mss) {
				t.Errorf("pacing before the change (%d B/s) was already that low", before.Pacing_rate)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pacing %d B/s before set base_rtt=1s and %d B/s five seconds after (window %d B): the live socket did not pick it up",
				before.Pacing_rate, after.Pacing_rate, window)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
