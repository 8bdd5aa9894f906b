package e2e

// The test in this file checks that turning on software RX timestamps,
// as the clock agent does, loses no forwarded packet to an fq qdisc.
//
// The pitfall: a socket with SOF_TIMESTAMPING_RX_SOFTWARE turns on the
// kernel's global netstamp, and from then on every skb that arrives
// without a departure time gets skb->tstamp = CLOCK_REALTIME on receive.
// fq reads skb->tstamp as a CLOCK_MONOTONIC departure time: a realtime
// stamp lies decades beyond its 10 s horizon, and fq drops the packet
// (horizon_drops). Every path by which the kernel sends a received skb on
// must clear the stamp first. On the kernels ccload supports these do:
// ip_forward and ip6_forward, the bridge, and tc BPF redirects to egress
// (bpf_redirect, bpf_redirect_neigh). bpf_redirect_peer keeps the stamp,
// but hands the packet to the peer's ingress, where forwarding clears it.
// A user-space relay sends new skbs.
//
// Two kernel paths do carry the stamp into fq, on 6.1 and 6.12 alike, and
// fq drops every such packet: IPv4 multicast routing (ipmr does not clear
// the stamp) and tc mirred mirroring from ingress to egress (only a
// redirect clears it; the mirrored copies are lost, not the traffic). The
// test leaves them out. The clock agent fixes them with a program that
// clears receive stamps at egress (clocksync's scrubber), which
// TestClockAgentKeepsStampsOutOfFQ (clock_fq_test.go) checks.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/qdisc"
	"github.com/ccload/ccload/testbed"
)

// fqFeature names sch_fq for SkipKernelLacks.
const fqFeature = "sch_fq (CONFIG_NET_SCH_FQ)"

// Traffic each path carries: UDP datagrams (no departure time of their
// own, like any packet from a NIC) in batches that wait for their
// delivery, and one TCP transfer.
const (
	rxUDPBatches   = 10
	rxUDPBatch     = 20
	rxUDPSize      = 512 // bytes of payload
	rxUDPBatchWait = 3 * time.Second
	rxTCPBytes     = 4 << 20
)

// __sk_buff fields and values the stamp probe reads (linux/bpf.h; the
// same offsets in 6.1 and 6.12).
const (
	skbProtocolOff   = 16  // __sk_buff.protocol, network byte order
	skbTstampOff     = 152 // __sk_buff.tstamp
	skbTstampTypeOff = 180 // __sk_buff.tstamp_type
	// tstampMono is BPF_SKB_TSTAMP_DELIVERY_MONO (5.18), also named
	// BPF_SKB_CLOCK_MONOTONIC (6.11). 0 is a receive stamp, CLOCK_REALTIME.
	tstampMono = 1
	// protoIPv4 is htons(ETH_P_IP) as __sk_buff.protocol holds it on a
	// little-endian machine.
	protoIPv4 = 0x0008
	// tcActUnspec lets the packet go on: TC_ACT_UNSPEC with clsact,
	// TCX_NEXT with TCX.
	tcActUnspec = -1
)

// Slots of a stamp probe's counter array: what skb->tstamp held.
const (
	slotNone     = iota // no stamp
	slotMono            // a CLOCK_MONOTONIC departure time
	slotRealtime        // a CLOCK_REALTIME receive stamp
	slotOther           // another clock's (TAI)
	slotLastReal        // not a count: the last realtime stamp seen, in ns
	stampSlots
)

// stamps is what one probe counted.
type stamps struct {
	None, Mono, Realtime, Other uint64
	LastRealtime                uint64
}

func (s stamps) String() string {
	last := ""
	if s.LastRealtime != 0 {
		last = fmt.Sprintf(" (last %s)", time.Unix(0, int64(s.LastRealtime)).UTC().Format(time.RFC3339Nano))
	}
	return fmt.Sprintf("%d without a stamp, %d monotonic, %d realtime%s, %d other", s.None, s.Mono, s.Realtime, last, s.Other)
}

// probe is a tc program that counts the stamps of the packets it sees and
// then does its action: pass them on, or redirect them.
type probe struct {
	prog   *ebpf.Program
	counts *ebpf.Map
}

// newProbe loads a probe whose program ends in action (which must return
// a verdict), closed at the end of the test. The program keeps the skb in
// R6.
func newProbe(t testing.TB, action asm.Instructions) *probe {
	t.Helper()
	counts, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: stampSlots})
	if err != nil {
		t.Fatalf("create the probe's counters: %v", err)
	}
	t.Cleanup(func() { counts.Close() })
	lookup := func(slot asm.Instruction) asm.Instructions {
		return asm.Instructions{
			slot,
			asm.LoadMapPtr(asm.R1, counts.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "act"),
		}
	}
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R7, asm.R6, skbTstampOff, asm.DWord),
		asm.LoadMem(asm.R2, asm.R6, skbTstampTypeOff, asm.Byte),
		asm.Mov.Imm(asm.R8, slotNone),
		asm.JEq.Imm(asm.R7, 0, "count"),
		asm.Mov.Imm(asm.R8, slotMono),
		asm.JEq.Imm(asm.R2, tstampMono, "count"),
		asm.Mov.Imm(asm.R8, slotOther),
		asm.JNE.Imm(asm.R2, 0, "count"),
		asm.Mov.Imm(asm.R8, slotRealtime),
	}
	count := lookup(asm.StoreMem(asm.RFP, -4, asm.R8, asm.Word))
	count[0] = count[0].WithSymbol("count")
	insns = append(insns, count...)
	insns = append(insns,
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
		asm.JNE.Imm(asm.R8, slotRealtime, "act"),
	)
	insns = append(insns, lookup(asm.StoreImm(asm.RFP, -4, slotLastReal, asm.Word))...)
	insns = append(insns, asm.StoreMem(asm.R0, 0, asm.R7, asm.DWord))
	action = append(asm.Instructions(nil), action...)
	action[0] = action[0].WithSymbol("act")
	insns = append(insns, action...)

	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, Instructions: insns, License: "GPL"})
	if err != nil {
		t.Fatalf("load stamp probe: %v", err)
	}
	t.Cleanup(func() { prog.Close() })
	return &probe{prog: prog, counts: counts}
}

// pass lets every packet go on.
func pass() asm.Instructions {
	return asm.Instructions{asm.Mov.Imm(asm.R0, tcActUnspec), asm.Return()}
}

// clearStamp clears skb->tstamp of IPv4 and IPv6 packets and lets every
// packet go on. On a sender's egress it stands in for the wire: TCP gives
// every packet a monotonic departure time, which a veth carries across
// namespaces (since 5.18), where a NIC's receive path starts from none.
func clearStamp() asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, 0),
		asm.Mov.Imm(asm.R3, 0), // BPF_SKB_TSTAMP_UNSPEC
		asm.FnSkbSetTstamp.Call(),
		asm.Mov.Imm(asm.R0, tcActUnspec),
		asm.Return(),
	}
}

// redirectIPv4 sends IPv4 packets on with call, a redirect helper whose
// arguments it sets itself, and lets the rest (ARP) go on.
func redirectIPv4(call ...asm.Instruction) asm.Instructions {
	insns := asm.Instructions{
		asm.LoadMem(asm.R1, asm.R6, skbProtocolOff, asm.Word),
		asm.JNE.Imm(asm.R1, protoIPv4, "other"),
	}
	insns = append(insns, call...)
	return append(insns,
		asm.Return(),
		asm.Mov.Imm(asm.R0, tcActUnspec).WithSymbol("other"),
		asm.Return(),
	)
}

// bpfRedirect is bpf_redirect(ifindex, 0): out of ifindex's egress.
func bpfRedirect(ifindex int) asm.Instructions {
	return redirectIPv4(asm.Mov.Imm(asm.R1, int32(ifindex)), asm.Mov.Imm(asm.R2, 0), asm.FnRedirect.Call())
}

// bpfRedirectNeigh is bpf_redirect_neigh(ifindex, NULL, 0, 0): out of
// ifindex's egress, with the neighbour's address filled in.
func bpfRedirectNeigh(ifindex int) asm.Instructions {
	return redirectIPv4(asm.Mov.Imm(asm.R1, int32(ifindex)), asm.Mov.Imm(asm.R2, 0),
		asm.Mov.Imm(asm.R3, 0), asm.Mov.Imm(asm.R4, 0), asm.FnRedirectNeigh.Call())
}

// bpfRedirectPeer is bpf_redirect_peer(ifindex, 0): into the ingress of
// the other end of the veth ifindex, in its own netns.
func bpfRedirectPeer(ifindex int) asm.Instructions {
	return redirectIPv4(asm.Mov.Imm(asm.R1, int32(ifindex)), asm.Mov.Imm(asm.R2, 0), asm.FnRedirectPeer.Call())
}

// attach attaches p to one side of iface in h's netns until the test ends.
func (p *probe) attach(t testing.TB, h *testbed.Host, iface string, dir qdisc.Direction) {
	t.Helper()
	var a *qdisc.Attachment
	err := h.Do(func() error {
		var err error
		a, err = qdisc.Attach(iface, p.prog, qdisc.AttachOptions{Direction: dir})
		return err
	})
	if err != nil {
		t.Fatalf("attach a stamp probe to %s %s in %s: %v", iface, dir, h.Name, err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Errorf("detach the stamp probe from %s: %v", iface, err)
		}
	})
}

// read returns what p counted so far.
func (p *probe) read(t testing.TB) stamps {
	t.Helper()
	var v [stampSlots]uint64
	for i := range v {
		if err := p.counts.Lookup(uint32(i), &v[i]); err != nil {
			t.Fatalf("read stamp counter %d: %v", i, err)
		}
	}
	return stamps{None: v[slotNone], Mono: v[slotMono], Realtime: v[slotRealtime], Other: v[slotOther], LastRealtime: v[slotLastReal]}
}

// ifaceOf returns h's one interface that is neither lo nor one of not.
func ifaceOf(t testing.TB, h *testbed.Host, not ...string) string {
	t.Helper()
	var name string
	err := h.Do(func() error {
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
	next:
		for _, l := range links {
			n := l.Attrs().Name
			if n == "lo" {
				continue
			}
			for _, x := range not {
				if n == x {
					continue next
				}
			}
			if name != "" {
				return fmt.Errorf("two candidates: %s and %s", name, n)
			}
			name = n
		}
		if name == "" {
			return errors.New("none")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("find the interface of %s other than lo and %q: %v", h.Name, not, err)
	}
	return name
}

// linkOf returns interface iface of h's netns.
func linkOf(t testing.TB, h *testbed.Host, iface string) netlink.Link {
	t.Helper()
	var l netlink.Link
	err := h.Do(func() error {
		var err error
		l, err = netlink.LinkByName(iface)
		return err
	})
	if err != nil {
		t.Fatalf("find %s in %s: %v", iface, h.Name, err)
	}
	return l
}

// setMAC gives iface in h's netns the hardware address mac. The redirects
// that keep a frame's Ethernet header (bpf_redirect, bpf_redirect_peer)
// deliver frames addressed to the router; the receiving end takes the
// router's address so that it accepts them, as a pod's veth would be set
// up for such a datapath.
func setMAC(t testing.TB, h *testbed.Host, iface string, mac net.HardwareAddr) {
	t.Helper()
	err := h.Do(func() error {
		l, err := netlink.LinkByName(iface)
		if err != nil {
			return err
		}
		return netlink.LinkSetHardwareAddr(l, mac)
	})
	if err != nil {
		t.Fatalf("set the address of %s in %s to %s: %v", iface, h.Name, mac, err)
	}
}

// installFQOn replaces the root qdisc of iface in h's netns by fq, removed
// again at the end of the test. It skips the test where the kernel has no
// sch_fq (and fails it in a vmtests guest, which must have it).
func installFQOn(t testing.TB, h *testbed.Host, iface string) *qdisc.FQ {
	t.Helper()
	var q *qdisc.FQ
	err := h.Do(func() error {
		l, err := netlink.LinkByName(iface)
		if err != nil {
			return err
		}
		qs, err := netlink.QdiscList(l)
		if err != nil {
			return err
		}
		for _, old := range qs {
			if old.Attrs().Parent == netlink.HANDLE_ROOT && old.Type() != "noqueue" {
				if err := netlink.QdiscDel(old); err != nil {
					return fmt.Errorf("remove root qdisc %s: %w", old.Type(), err)
				}
			}
		}
		q, err = qdisc.InstallFQ(iface, qdisc.FQConfig{})
		return err
	})
	if errors.Is(err, qdisc.ErrNoFQ) {
		t.Logf("install fq: %v", err)
		testutil.SkipKernelLacks(t, fqFeature)
	}
	if err != nil {
		t.Fatalf("install fq on %s in %s: %v", iface, h.Name, err)
	}
	t.Cleanup(func() {
		if err := q.Close(); err != nil {
			t.Errorf("remove fq: %v", err)
		}
	})
	return q
}

// requireFQ skips t, naming sch_fq, where the kernel has none
// (qdisc.ProbeFQ, the probe of `ccload status`).
func requireFQ(t *testing.T) {
	t.Helper()
	err := qdisc.ProbeFQ()
	if errors.Is(err, qdisc.ErrNoFQ) {
		t.Logf("probe for fq: %v", err)
		testutil.SkipKernelLacks(t, fqFeature)
	}
	if err != nil {
		t.Fatalf("probe for fq: %v", err)
	}
}

// agentStamps are the SO_TIMESTAMPING flags of the clock agent's probe
// socket (clocksync). RX_SOFTWARE is the one that turns on the netstamp.
const agentStamps = unix.SOF_TIMESTAMPING_TX_SOFTWARE | unix.SOF_TIMESTAMPING_RX_SOFTWARE |
	unix.SOF_TIMESTAMPING_SOFTWARE | unix.SOF_TIMESTAMPING_OPT_ID | unix.SOF_TIMESTAMPING_OPT_TSONLY

// enableRXTimestamps opens a UDP socket with software RX timestamping, as
// the clock agent does, until the test ends or the returned func is
// called. The kernel's netstamp is global: from then on packets get a
// receive stamp in every netns.
func enableRXTimestamps(t testing.TB) (stop func()) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open the timestamping socket: %v", err)
	}
	var once sync.Once
	stop = func() { once.Do(func() { unix.Close(fd) }) }
	t.Cleanup(stop)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPING_NEW, agentStamps); err != nil {
		t.Fatalf("turn on software timestamps (SO_TIMESTAMPING_NEW): %v", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("bind the timestamping socket: %v", err)
	}
	return stop
}

// udpCounter counts the datagrams one socket receives.
type udpCounter struct {
	conn *net.UDPConn
	n    atomic.Int64
	done chan struct{}
}

// listenUDP opens a UDP socket at addr (port 0: any) in h's netns that
// counts what arrives, closed at the end of the test.
func listenUDP(t testing.TB, h *testbed.Host, addr netip.Addr) *udpCounter {
	t.Helper()
	var conn *net.UDPConn
	err := h.Do(func() error {
		var err error
		conn, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 0)))
		return err
	})
	if err != nil {
		t.Fatalf("listen on UDP %s in %s: %v", addr, h.Name, err)
	}
	return countUDP(t, conn)
}

// countUDP counts the datagrams conn receives until the test ends, when
// it closes conn.
func countUDP(t testing.TB, conn *net.UDPConn) *udpCounter {
	c := &udpCounter{conn: conn, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		buf := make([]byte, 2048)
		for {
			if _, err := c.conn.Read(buf); err != nil {
				return // closed
			}
			c.n.Add(1)
		}
	}()
	t.Cleanup(func() {
		c.conn.Close()
		<-c.done
	})
	return c
}

func (c *udpCounter) addr() netip.AddrPort {
	return c.conn.LocalAddr().(*net.UDPAddr).AddrPort()
}

// sendUDP sends rxUDPBatches batches of rxUDPBatch datagrams from h to
// dst, each batch once the one before has arrived at c, and returns how
// many arrived. It stops at the first batch that does not arrive within
// rxUDPBatchWait.
func sendUDP(t testing.TB, h *testbed.Host, dst netip.AddrPort, c *udpCounter) int64 {
	return sendUDPBatches(t, h, dst, c, rxUDPBatches, nil)
}

// sendUDPBatches is sendUDP with batches batches, from a socket that
// setup, when set, configures first.
func sendUDPBatches(t testing.TB, h *testbed.Host, dst netip.AddrPort, c *udpCounter, batches int, setup func(fd int) error) int64 {
	t.Helper()
	var conn *net.UDPConn
	err := h.Do(func() error {
		var err error
		conn, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
		if err != nil || setup == nil {
			return err
		}
		raw, err := conn.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		if err := raw.Control(func(fd uintptr) { serr = setup(int(fd)) }); err != nil {
			return err
		}
		return serr
	})
	if err != nil {
		t.Fatalf("dial UDP %s from %s: %v", dst, h.Name, err)
	}
	defer conn.Close()
	payload := make([]byte, rxUDPSize)
	start := c.n.Load()
	for b := range batches {
		for range rxUDPBatch {
			if _, err := conn.Write(payload); err != nil {
				t.Fatalf("send UDP to %s: %v", dst, err)
			}
		}
		want := start + int64((b+1)*rxUDPBatch)
		deadline := time.Now().Add(rxUDPBatchWait)
		for c.n.Load() < want && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if c.n.Load() < want {
			break
		}
	}
	return c.n.Load() - start
}

// startUDPRelay relays every datagram that reaches listen (port 0: any)
// in h's netns to dst, from a user-space socket, until the test ends. It
// returns the address it listens on.
func startUDPRelay(t testing.TB, h *testbed.Host, listen netip.Addr, dst netip.AddrPort) netip.AddrPort {
	t.Helper()
	var in, out *net.UDPConn
	err := h.Do(func() error {
		var err error
		if in, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(listen, 0))); err != nil {
			return err
		}
		out, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
		return err
	})
	if err != nil {
		if in != nil {
			in.Close()
		}
		t.Fatalf("start UDP relay in %s: %v", h.Name, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, err := in.Read(buf)
			if err != nil {
				return // closed
			}
			out.Write(buf[:n])
		}
	}()
	t.Cleanup(func() {
		in.Close()
		out.Close()
		<-done
	})
	return in.LocalAddr().(*net.UDPAddr).AddrPort()
}

// relayConnTimeout bounds one relayed TCP connection.
const relayConnTimeout = 90 * time.Second

// startTCPRelay accepts TCP connections at listen (port 0: any) in h's
// netns and relays each, in both directions, to a new connection to dst
// made from h's netns, until the test ends. It returns the address it
// listens on.
func startTCPRelay(t testing.TB, h *testbed.Host, listen netip.Addr, dst netip.AddrPort) netip.AddrPort {
	t.Helper()
	var ln *net.TCPListener
	err := h.Do(func() error {
		var err error
		ln, err = net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(listen, 0)))
		return err
	})
	if err != nil {
		t.Fatalf("start TCP relay in %s: %v", h.Name, err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return // closed
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(relayConnTimeout))
				var up *net.TCPConn
				err := h.Do(func() error {
					var err error
					up, err = net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(dst))
					return err
				})
				if err != nil {
					return
				}
				defer up.Close()
				up.SetDeadline(time.Now().Add(relayConnTimeout))
				back := make(chan struct{})
				go func() {
					defer close(back)
					io.Copy(c, up)
					c.CloseWrite()
				}()
				io.Copy(up, c)
				up.CloseWrite()
				<-back
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// rxRig is one path set up for the check: where the traffic starts and
// ends, the probes at the packets' arrival and at fq, and fq itself.
type rxRig struct {
	sender, receiver *testbed.Host
	// dst is the receiver's address the listeners bind to.
	dst netip.Addr
	// viaUDP and viaTCP return the address the sender sends to for a
	// listener at dst: dst itself, or a relay's on the way.
	viaUDP, viaTCP func(dst netip.AddrPort) netip.AddrPort
	// arrival counts the stamps where the packets first arrive (the
	// router's ingress); fqIn where they enter fq.
	arrival, fqIn *probe
	// extra are probes on the way, reported only.
	extra map[string]*probe
	fq    *qdisc.FQ
}

func direct(dst netip.AddrPort) netip.AddrPort { return dst }

// wire clears the monotonic departure times of the sender's packets on
// its uplink, so that they arrive without a stamp, as from a NIC.
func wire(t testing.TB, h *testbed.Host, iface string) {
	t.Helper()
	newProbe(t, clearStamp()).attach(t, h, iface, qdisc.Egress)
}

// rxDumbbell builds sender -- router -- receiver with the wire on the
// sender's uplink and fq on the router's egress toward the receiver. It
// returns the dumbbell and the router's interface toward the sender.
func rxDumbbell(t *testing.T) (*testbed.Dumbbell, string, *qdisc.FQ) {
	t.Helper()
	d := testnet.NewDumbbell(t, testbed.DumbbellConfig{Senders: 1})
	wire(t, d.Senders[0], d.SenderIfaces[0])
	fq := installFQOn(t, d.Router, d.BottleneckIface)
	return d, ifaceOf(t, d.Router, d.BottleneckIface), fq
}

// rxOnDumbbell is the rig of a dumbbell whose router's ingress from the
// sender runs arrival (which may redirect) and whose bottleneck carries fq.
func rxOnDumbbell(t *testing.T, d *testbed.Dumbbell, routerIn string, fq *qdisc.FQ, arrival *probe, dst netip.Addr) *rxRig {
	t.Helper()
	arrival.attach(t, d.Router, routerIn, qdisc.Ingress)
	fqIn := newProbe(t, pass())
	fqIn.attach(t, d.Router, d.BottleneckIface, qdisc.Egress)
	return &rxRig{
		sender: d.Senders[0], receiver: d.Receiver, dst: dst,
		viaUDP: direct, viaTCP: direct,
		arrival: arrival, fqIn: fqIn, fq: fq,
	}
}

// forwardRig: the router forwards by IP (ip_forward, ip6_forward).
func forwardRig(ipv6 bool) func(t *testing.T) *rxRig {
	return func(t *testing.T) *rxRig {
		d, in, fq := rxDumbbell(t)
		dst := d.Receiver.Addr
		if ipv6 {
			dst = d.Receiver.Addr6
		}
		return rxOnDumbbell(t, d, in, fq, newProbe(t, pass()), dst)
	}
}

// bridgeRig: the router is a Linux bridge between its two ports, and the
// sender and the receiver are on one IPv4 subnet.
func bridgeRig(t *testing.T) *rxRig {
	d, in, fq := rxDumbbell(t)
	const br = "rxbr0" // inside the router's own netns
	err := d.Router.Do(func() error {
		attrs := netlink.NewLinkAttrs()
		attrs.Name = br
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: attrs}); err != nil {
			return fmt.Errorf("add bridge %s: %w", br, err)
		}
		return nil
	})
	if errors.Is(err, unix.EOPNOTSUPP) {
		t.Logf("%v", err)
		testutil.SkipKernelLacks(t, "the bridge module (CONFIG_BRIDGE)")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		err := d.Router.Do(func() error {
			l, err := netlink.LinkByName(br)
			if err != nil {
				return err
			}
			return netlink.LinkDel(l)
		})
		if err != nil {
			t.Errorf("delete bridge %s in %s: %v", br, d.Router.Name, err)
		}
	})
	err = d.Router.Do(func() error {
		bridge, err := netlink.LinkByName(br)
		if err != nil {
			return err
		}
		for _, port := range []string{in, d.BottleneckIface} {
			l, err := netlink.LinkByName(port)
			if err != nil {
				return err
			}
			addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
			if err != nil {
				return err
			}
			for _, a := range addrs {
				if err := netlink.AddrDel(l, &a); err != nil {
					return fmt.Errorf("remove %s from %s: %w", a.IPNet, port, err)
				}
			}
			if err := netlink.LinkSetMaster(l, bridge); err != nil {
				return fmt.Errorf("make %s a port of %s: %w", port, br, err)
			}
		}
		return netlink.LinkSetUp(bridge)
	})
	if err != nil {
		t.Fatalf("bridge the router %s: %v", d.Router.Name, err)
	}
	// One subnet: each end reaches the other directly over the bridge.
	onLink := func(h *testbed.Host, iface string, dst netip.Addr) {
		err := h.Do(func() error {
			l, err := netlink.LinkByName(iface)
			if err != nil {
				return err
			}
			return netlink.RouteAdd(&netlink.Route{
				LinkIndex: l.Attrs().Index,
				Dst:       &net.IPNet{IP: dst.AsSlice(), Mask: net.CIDRMask(32, 32)},
				Scope:     netlink.SCOPE_LINK,
			})
		})
		if err != nil {
			t.Fatalf("route %s on-link via %s in %s: %v", dst, iface, h.Name, err)
		}
	}
	onLink(d.Senders[0], d.SenderIfaces[0], d.Receiver.Addr)
	onLink(d.Receiver, ifaceOf(t, d.Receiver), d.Senders[0].Addr)
	return rxOnDumbbell(t, d, in, fq, newProbe(t, pass()), d.Receiver.Addr)
}

// redirectRig: a tc program on the router's ingress from the sender sends
// IPv4 packets out of the bottleneck with bpf_redirect or
// bpf_redirect_neigh, as Cilium's host routing does.
func redirectRig(neigh bool) func(t *testing.T) *rxRig {
	return func(t *testing.T) *rxRig {
		d, in, fq := rxDumbbell(t)
		out := linkOf(t, d.Router, d.BottleneckIface).Attrs().Index
		action := bpfRedirectNeigh(out)
		if !neigh {
			action = bpfRedirect(out)
			setMAC(t, d.Receiver, ifaceOf(t, d.Receiver), linkOf(t, d.Router, in).Attrs().HardwareAddr)
		}
		return rxOnDumbbell(t, d, in, fq, newProbe(t, action), d.Receiver.Addr)
	}
}

// peerRig: router 1 hands IPv4 packets from the sender to router 2 with
// bpf_redirect_peer, into router 2's ingress, as Cilium hands packets to
// a pod; router 2, the pod, forwards them to the receiver through fq.
func peerRig(t *testing.T) *rxRig {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := testbed.NewChain(ctx, testbed.ChainConfig{Senders: 1})
	if err != nil {
		t.Fatalf("build chain: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("tear down chain: %v", err)
		}
	})
	wire(t, c.Senders[0], c.SenderIfaces[0])
	r1Out, r2Out := c.Bottlenecks[0].Iface, c.Bottlenecks[1].Iface
	r1In := ifaceOf(t, c.Router1, r1Out)
	r2In := ifaceOf(t, c.Router2, r2Out)
	fq := installFQOn(t, c.Router2, r2Out)
	setMAC(t, c.Router2, r2In, linkOf(t, c.Router1, r1In).Attrs().HardwareAddr)

	arrival := newProbe(t, bpfRedirectPeer(linkOf(t, c.Router1, r1Out).Attrs().Index))
	arrival.attach(t, c.Router1, r1In, qdisc.Ingress)
	inPod := newProbe(t, pass())
	inPod.attach(t, c.Router2, r2In, qdisc.Ingress)
	fqIn := newProbe(t, pass())
	fqIn.attach(t, c.Router2, r2Out, qdisc.Egress)
	return &rxRig{
		sender: c.Senders[0], receiver: c.Receiver, dst: c.Receiver.Addr,
		viaUDP: direct, viaTCP: direct,
		arrival: arrival, fqIn: fqIn, fq: fq,
		extra: map[string]*probe{"router 2's ingress, after bpf_redirect_peer": inPod},
	}
}

// relayRig: user-space relays on the router take UDP and TCP from the
// sender and send it on to the receiver from sockets of their own.
func relayRig(t *testing.T) *rxRig {
	d, in, fq := rxDumbbell(t)
	r := rxOnDumbbell(t, d, in, fq, newProbe(t, pass()), d.Receiver.Addr)
	var routerAddr netip.Addr // the router's IPv4 address on the sender's link
	l := linkOf(t, d.Router, in)
	err := d.Router.Do(func() error {
		addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		if len(addrs) != 1 {
			return fmt.Errorf("%d IPv4 addresses on %s", len(addrs), in)
		}
		routerAddr, _ = netip.AddrFromSlice(addrs[0].IP.To4())
		return nil
	})
	if err != nil {
		t.Fatalf("the router's address toward the sender: %v", err)
	}
	r.viaUDP = func(dst netip.AddrPort) netip.AddrPort { return startUDPRelay(t, d.Router, routerAddr, dst) }
	r.viaTCP = func(dst netip.AddrPort) netip.AddrPort { return startTCPRelay(t, d.Router, routerAddr, dst) }
	return r
}

// TestRXTimestampsThroughFQ turns on software RX timestamps the way the
// clock agent does, then sends UDP and TCP through each path by which a
// Kubernetes node sends received packets on, with fq as the root qdisc of
// the egress. It checks that the packets arrive with a realtime receive
// stamp (else the test proves nothing), that none of them reaches fq with
// it, that fq drops nothing, and that every datagram and the whole TCP
// transfer arrive.
func TestRXTimestampsThroughFQ(t *testing.T) {
	testutil.RequireRoot(t)
	requireFQ(t)
	enableRXTimestamps(t)

	paths := []struct {
		name string
		rig  func(t *testing.T) *rxRig
	}{
		{"ip_forward", forwardRig(false)},
		{"ip6_forward", forwardRig(true)},
		{"bridge", bridgeRig},
		{"bpf_redirect", redirectRig(false)},
		{"bpf_redirect_neigh", redirectRig(true)},
		{"bpf_redirect_peer_then_forward", peerRig},
		{"user_space_relay", relayRig},
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) { checkRXPath(t, p.rig(t)) })
	}
}

// rxTCPTimeout bounds the TCP transfer; where fq dropped its packets, it
// never completes.
const rxTCPTimeout = 60 * time.Second

// checkRXPath sends the UDP batches and the TCP transfer through r and
// checks what TestRXTimestampsThroughFQ promises.
func checkRXPath(t *testing.T, r *rxRig) {
	udp := listenUDP(t, r.receiver, r.dst)
	got := sendUDP(t, r.sender, r.viaUDP(udp.addr()), udp)
	afterUDP := r.arrival.read(t)

	sink := testnet.StartSink(t, r.receiver, r.dst)
	ctx, cancel := context.WithTimeout(context.Background(), rxTCPTimeout)
	defer cancel()
	res, tcpErr := testbed.SendFlow(ctx, r.sender, r.viaTCP(sink.Addr), testbed.FlowConfig{Bytes: rxTCPBytes, Seed: 1, Timeout: rxTCPTimeout})
	if tcpErr == nil {
		var results []testbed.SinkResult
		results, tcpErr = sink.WaitResults(ctx, 1)
		if tcpErr == nil && (!results[0].OK || results[0].Bytes != rxTCPBytes) {
			tcpErr = fmt.Errorf("the sink got %d of %d bytes: %v", results[0].Bytes, rxTCPBytes, results[0].Err)
		}
	}

	arrival, atFQ := r.arrival.read(t), r.fqIn.read(t)
	fs, err := r.fq.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("arrival: %v", arrival)
	for where, pr := range r.extra {
		t.Logf("%s: %v", where, pr.read(t))
	}
	t.Logf("into fq: %v", atFQ)
	t.Logf("fq: %d packets sent, %d dropped, %d horizon drops, %d flow-limit drops", fs.Packets, fs.Drops, fs.HorizonDrops, fs.FlowLimitDrops)
	t.Logf("UDP: %d of %d datagrams arrived", got, rxUDPBatches*rxUDPBatch)
	if tcpErr != nil {
		t.Errorf("TCP transfer of %d bytes: %v", rxTCPBytes, tcpErr)
	} else {
		t.Logf("TCP: %d bytes in %v, %d retransmits", res.Bytes, res.Duration.Round(time.Millisecond), res.Info.Total_retrans)
	}

	if afterUDP.Realtime == 0 || arrival.Realtime == afterUDP.Realtime {
		t.Errorf("UDP brought %d and TCP %d realtime receive stamps to the router: RX timestamps are not on, and the test proves nothing",
			afterUDP.Realtime, arrival.Realtime-afterUDP.Realtime)
	}
	if atFQ.Realtime != 0 {
		t.Errorf("%d packets reached fq with a realtime receive stamp", atFQ.Realtime)
	}
	if fs.HorizonDrops != 0 || fs.Drops != 0 {
		t.Errorf("fq dropped %d packets, %d of them beyond its horizon", fs.Drops, fs.HorizonDrops)
	}
	if want := uint32(rxUDPBatches * rxUDPBatch); fs.Packets+fs.Drops < want {
		t.Errorf("fq saw %d packets, fewer than the %d datagrams: the traffic did not take the path through fq", fs.Packets+fs.Drops, want)
	}
	if got != rxUDPBatches*rxUDPBatch {
		t.Errorf("%d of %d UDP datagrams arrived", got, rxUDPBatches*rxUDPBatch)
	}
}
