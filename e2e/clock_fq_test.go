package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"

	tc "github.com/florianl/go-tc"
	"github.com/florianl/go-tc/core"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/clocksync"
	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/qdisc"
	"github.com/ccload/ccload/testbed"
)

// The test in this file checks the clock agent's fix for the two paths by
// which a received packet reaches fq with its receive stamp (see
// rxstamp_fq_test.go): IPv4 multicast routing and tc mirred mirroring.
// The agent runs on the router, which turns on software receive stamps
// for the whole kernel and puts its scrub program at the egress of the
// router's interfaces.

// agentRig is a dumbbell whose router sends the sender's UDP on to the
// receiver by one of those paths, through fq.
type agentRig struct {
	d *testbed.Dumbbell
	// in is the router's interface toward the sender.
	in string
	fq *qdisc.FQ
	// arrival counts the stamps of what reaches the router from the
	// sender.
	arrival *probe
	// counter counts the datagrams that reach the receiver, sent to dst;
	// sendSetup configures the sender's socket.
	counter   *udpCounter
	dst       netip.AddrPort
	sendSetup func(fd int) error
	// copies is how many packets enter fq per datagram.
	copies int
}

// fqCounts is what fq did, for deltas.
type fqCounts struct {
	packets, drops uint32
	horizon        uint64
}

func readFQ(t testing.TB, fq *qdisc.FQ) fqCounts {
	t.Helper()
	s, err := fq.Stats()
	if err != nil {
		t.Fatalf("read fq's counters: %v", err)
	}
	return fqCounts{packets: s.Packets, drops: s.Drops, horizon: s.HorizonDrops}
}

func (a fqCounts) minus(b fqCounts) fqCounts {
	return fqCounts{packets: a.packets - b.packets, drops: a.drops - b.drops, horizon: a.horizon - b.horizon}
}

// TestClockAgentKeepsStampsOutOfFQ runs the clock agent on a router that
// forwards by multicast routing and by tc mirred mirror, with fq as the
// root qdisc of the egress. First, with receive stamps on and no agent,
// it logs what fq drops (every such packet, on the kernels ccload
// supports). Then, with the agent running, it checks that packets still
// arrive at the router with a realtime stamp, that none leaves the
// scrub program with one, that fq drops nothing, that every datagram
// arrives, and that the router's own TCP keeps its monotonic departure
// times, which fq paces by.
func TestClockAgentKeepsStampsOutOfFQ(t *testing.T) {
	testutil.RequireRoot(t)
	requireFQ(t)
	paths := []struct {
		name string
		rig  func(t *testing.T) *agentRig
	}{
		{"ipmr", ipmrRig},
		{"mirred_mirror", mirredRig},
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) { checkAgentPath(t, p.rig(t)) })
	}
}

// newAgentRig builds the dumbbell with the wire on the sender's uplink, fq
// on the router's bottleneck, and the arrival probe.
func newAgentRig(t *testing.T) *agentRig {
	d, in, fq := rxDumbbell(t)
	arrival := newProbe(t, pass())
	arrival.attach(t, d.Router, in, qdisc.Ingress)
	return &agentRig{d: d, in: in, fq: fq, arrival: arrival, copies: 1}
}

func checkAgentPath(t *testing.T, r *agentRig) {
	dst := r.dst
	total := int64(rxUDPBatches * rxUDPBatch)

	// Without the agent: receive stamps on, no scrub.
	stop := enableRXTimestamps(t)
	before := readFQ(t, r.fq)
	got := sendUDPBatches(t, r.d.Senders[0], dst, r.counter, 1, r.sendSetup)
	without := readFQ(t, r.fq).minus(before)
	stop()
	t.Logf("receive stamps on, no agent: %d of %d datagrams arrived; fq sent %d packets and dropped %d, %d beyond its horizon",
		got, rxUDPBatch, without.packets, without.drops, without.horizon)

	// With the agent on the router.
	startRouterAgent(t, r.d)
	after := newProbe(t, pass())
	// Attached after the agent: behind its scrub program, on TCX by
	// order and on clsact by priority.
	after.attach(t, r.d.Router, r.d.BottleneckIface, qdisc.Egress)
	arrivedBefore, fqBefore := r.arrival.read(t), readFQ(t, r.fq)
	got = sendUDPBatches(t, r.d.Senders[0], dst, r.counter, rxUDPBatches, r.sendSetup)
	arrived, withAgent := r.arrival.read(t), readFQ(t, r.fq).minus(fqBefore)
	afterUDP := after.read(t)

	// The router's own TCP, through the same fq.
	sink := testnet.StartSink(t, r.d.Receiver, r.d.Receiver.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), rxTCPTimeout)
	defer cancel()
	const tcpBytes = 1 << 20
	_, tcpErr := testbed.SendFlow(ctx, r.d.Router, sink.Addr, testbed.FlowConfig{Bytes: tcpBytes, Seed: 2, Timeout: rxTCPTimeout})
	if tcpErr == nil {
		var results []testbed.SinkResult
		results, tcpErr = sink.WaitResults(ctx, 1)
		if tcpErr == nil && (!results[0].OK || results[0].Bytes != tcpBytes) {
			tcpErr = fmt.Errorf("the sink got %d of %d bytes: %v", results[0].Bytes, tcpBytes, results[0].Err)
		}
	}
	afterTCP := after.read(t)

	t.Logf("with the agent: %d of %d datagrams arrived; fq sent %d packets and dropped %d, %d beyond its horizon", got, total, withAgent.packets, withAgent.drops, withAgent.horizon)
	t.Logf("arrival at the router: %v", arrived)
	t.Logf("leaving the scrub program: %v", afterTCP)
	if arrived.Realtime-arrivedBefore.Realtime == 0 {
		t.Errorf("no packet reached the router with a realtime receive stamp: the agent did not turn receive stamps on, and the test proves nothing")
	}
	if afterTCP.Realtime != 0 {
		t.Errorf("%d packets left the scrub program with a realtime receive stamp", afterTCP.Realtime)
	}
	if withAgent.drops != 0 || withAgent.horizon != 0 {
		t.Errorf("fq dropped %d packets, %d of them beyond its horizon", withAgent.drops, withAgent.horizon)
	}
	if want := uint32(total) * uint32(r.copies); withAgent.packets < want {
		t.Errorf("fq sent %d packets, fewer than the %d the datagrams make on this path: the traffic did not take it", withAgent.packets, want)
	}
	if got != total {
		t.Errorf("%d of %d UDP datagrams arrived", got, total)
	}
	if tcpErr != nil {
		t.Errorf("the router's TCP transfer of %d bytes: %v", tcpBytes, tcpErr)
	}
	if afterTCP.Mono == afterUDP.Mono {
		t.Errorf("no TCP segment left the scrub program with its monotonic departure time (%v)", afterTCP)
	}
}

// startRouterAgent runs a clock agent in the router's netns until the test
// ends. Its one peer, the receiver, runs none: what counts here is that
// the agent's socket and scrub program are in place.
func startRouterAgent(t *testing.T, d *testbed.Dumbbell) {
	t.Helper()
	var a *clocksync.Agent
	err := d.Router.Do(func() error {
		var err error
		a, err = clocksync.New(clocksync.Config{
			Peers: clocksync.PeerSet{Addrs: []netip.Addr{d.Receiver.Addr}},
			Logf:  func(f string, args ...any) { t.Logf("agent: "+f, args...) },
		})
		return err
	})
	if err != nil {
		t.Fatalf("start the clock agent on the router: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("clock agent: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		a.Close()
	})
}

// Multicast routing (linux/mroute.h).
const (
	mrtInit      = 200 // MRT_INIT
	mrtAddVIF    = 202 // MRT_ADD_VIF
	mrtAddMFC    = 204 // MRT_ADD_MFC
	viffUseIndex = 0x8 // VIFF_USE_IFINDEX
	maxVIFs      = 32  // MAXVIFS
	vifctlSize   = 16  // sizeof(struct vifctl)
	mfcctlSize   = 60  // sizeof(struct mfcctl)
)

// testGroup is the multicast group the ipmr rig routes.
var testGroup = netip.MustParseAddr("239.18.0.1")

// ipmrRig: the router routes the sender's multicast to the receiver as a
// multicast router does, with a routing socket that holds one virtual
// interface per side and one (sender, group) route between them.
func ipmrRig(t *testing.T) *agentRig {
	r := newAgentRig(t)
	d := r.d
	in, out := linkOf(t, d.Router, r.in).Attrs().Index, linkOf(t, d.Router, d.BottleneckIface).Attrs().Index
	var fd int
	err := d.Router.Do(func() error {
		var err error
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_IGMP)
		if err != nil {
			return fmt.Errorf("open the multicast routing socket: %w", err)
		}
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, mrtInit, 1); err != nil {
			unix.Close(fd)
			if errors.Is(err, unix.ENOPROTOOPT) {
				testutil.SkipKernelLacks(t, "IPv4 multicast routing (CONFIG_IP_MROUTE)")
			}
			return fmt.Errorf("MRT_INIT: %w", err)
		}
		for vif, ifindex := range []int{in, out} {
			b := make([]byte, vifctlSize)
			binary.NativeEndian.PutUint16(b[0:], uint16(vif))
			b[2] = viffUseIndex
			b[3] = 1 // TTL threshold
			binary.NativeEndian.PutUint32(b[8:], uint32(ifindex))
			if err := unix.SetsockoptString(fd, unix.IPPROTO_IP, mrtAddVIF, string(b)); err != nil {
				return fmt.Errorf("MRT_ADD_VIF %d: %w", vif, err)
			}
		}
		b := make([]byte, mfcctlSize)
		src, grp := d.Senders[0].Addr.As4(), testGroup.As4()
		copy(b[0:], src[:])
		copy(b[4:], grp[:])
		binary.NativeEndian.PutUint16(b[8:], 0) // arrives on VIF 0
		for i := range maxVIFs {
			b[10+i] = 255 // never forwarded there
		}
		b[10+1] = 1 // forwarded to VIF 1
		if err := unix.SetsockoptString(fd, unix.IPPROTO_IP, mrtAddMFC, string(b)); err != nil {
			return fmt.Errorf("MRT_ADD_MFC: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("set up multicast routing on the router: %v", err)
	}
	// Closing the socket tears the routes down (MRT_DONE).
	t.Cleanup(func() { unix.Close(fd) })

	rcvIface := ifaceOf(t, d.Receiver)
	var conn *net.UDPConn
	err = d.Receiver.Do(func() error {
		ifi, err := net.InterfaceByName(rcvIface)
		if err != nil {
			return err
		}
		conn, err = net.ListenMulticastUDP("udp4", ifi, net.UDPAddrFromAddrPort(netip.AddrPortFrom(testGroup, 0)))
		return err
	})
	if err != nil {
		t.Fatalf("join %s on the receiver: %v", testGroup, err)
	}
	r.counter = countUDP(t, conn)
	r.dst = netip.AddrPortFrom(testGroup, r.counter.addr().Port())
	r.sendSetup = func(fd int) error {
		return unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_TTL, 8)
	}
	return r
}

// mirredRig: the router forwards the sender's UDP to the receiver by IP,
// and a tc filter on its ingress from the sender mirrors every packet to
// the bottleneck's egress as well ("tc filter add dev IN ingress matchall
// action mirred egress mirror dev BOTTLENECK"). The copies reach the
// receiver with the router's address as their Ethernet destination, and
// it drops them; fq sees both.
func mirredRig(t *testing.T) *agentRig {
	r := newAgentRig(t)
	d := r.d
	in, out := linkOf(t, d.Router, r.in).Attrs().Index, linkOf(t, d.Router, d.BottleneckIface).Attrs().Index
	err := d.Router.Do(func() error {
		nl, err := tc.Open(&tc.Config{})
		if err != nil {
			return fmt.Errorf("open rtnetlink: %w", err)
		}
		defer nl.Close()
		msg := func(handle, parent, info uint32) tc.Msg {
			return tc.Msg{Family: unix.AF_UNSPEC, Ifindex: uint32(in), Handle: handle, Parent: parent, Info: info}
		}
		clsact := &tc.Object{Msg: msg(tc.HandleRoot&^0xffff, tc.HandleIngress, 0), Attribute: tc.Attribute{Kind: "clsact"}}
		if err := nl.Qdisc().Add(clsact); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("add clsact: %w", err)
		}
		// After the arrival probe's filter (qdisc.DefaultPriority) on
		// clsact: matchall's verdict ends the classification.
		const prio = qdisc.DefaultPriority + 0x100
		filter := &tc.Object{
			Msg: msg(1, core.BuildHandle(tc.HandleRoot, tc.HandleMinIngress), core.FilterInfo(prio, unix.ETH_P_ALL)),
			Attribute: tc.Attribute{Kind: "matchall", Matchall: &tc.Matchall{Actions: &[]*tc.Action{{
				Kind: "mirred",
				Mirred: &tc.Mirred{Parms: &tc.MirredParam{
					Action:  tc.ActPipe,
					Eaction: 2, // TCA_EGRESS_MIRROR
					IfIndex: uint32(out),
				}},
			}}}},
		}
		if err := nl.Filter().Add(filter); err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EOPNOTSUPP) {
				t.Logf("add the mirred filter: %v", err)
				testutil.SkipKernelLacks(t, "cls_matchall and act_mirred (CONFIG_NET_CLS_MATCHALL, CONFIG_NET_ACT_MIRRED)")
			}
			return fmt.Errorf("add the matchall filter with mirred: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("mirror the router's ingress to its bottleneck: %v", err)
	}
	r.counter = listenUDP(t, d.Receiver, d.Receiver.Addr)
	r.dst = r.counter.addr()
	r.copies = 2
	return r
}
