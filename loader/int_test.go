package loader

// INT end to end: the sockops program tags data to in-scope peers, the
// software hop on the router fills in its record, the receiver echoes it,
// and the sender parses the echo. Checked on the wire with AF_PACKET.

import (
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/qdisc"
	"github.com/ccload/ccload/telemetry"
	"github.com/ccload/ccload/testbed"
)

// enableINTForTest turns INT on for the testbed's prefixes and turns it
// off when the test ends.
func enableINTForTest(t testing.TB, l *Loader, cfg INTConfig) *INTStatus {
	t.Helper()
	if len(cfg.Peers) == 0 {
		cfg.Peers = []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("fd00::/8")}
	}
	st, err := l.EnableINT(cfg)
	if err != nil {
		t.Fatalf("enable INT: %v (fix: %s)", err, FixOf(err))
	}
	t.Cleanup(func() {
		if _, err := l.DisableINT(); err != nil {
			t.Errorf("disable INT: %v", err)
		}
	})
	return st
}

// hopForTest attaches an INT hop to the dumbbell's bottleneck.
func hopForTest(t testing.TB, d *testbed.Dumbbell, ecn uint32) *Hop {
	t.Helper()
	var hop *Hop
	err := d.Router.Do(func() (err error) {
		hop, err = NewHop(HopConfig{Iface: d.BottleneckIface, RateBps: d.Config.BottleneckRate,
			BufferBytes: d.Config.BufferBytes, BurstBytes: d.BurstBytes(), ECNThreshold: ecn})
		return err
	})
	if err != nil {
		t.Fatalf("attach INT hop: %v", err)
	}
	t.Cleanup(func() {
		if err := hop.Close(); err != nil {
			t.Errorf("detach INT hop: %v", err)
		}
	})
	return hop
}

// captured is one TCP packet seen by capture, with our option if present.
type captured struct {
	info  telemetry.PacketInfo
	opt   telemetry.Option
	found bool
	raw   []byte // the options area
}

// capture reads up to max packets from every interface of h (not lo)
// until ctx ends, with an AF_PACKET socket opened inside h's netns.
func capture(t testing.TB, ctx context.Context, h *testbed.Host, max int) <-chan []captured {
	t.Helper()
	var fd int
	if err := h.Do(func() (err error) {
		proto := int(htons(unix.ETH_P_ALL))
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, proto)
		return err
	}); err != nil {
		t.Fatalf("AF_PACKET socket: %v", err)
	}
	tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	out := make(chan []captured, 1)
	go func() {
		defer unix.Close(fd)
		var got []captured
		buf := make([]byte, 70000)
		for len(got) < max && ctx.Err() == nil {
			n, from, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				continue
			}
			if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Ifindex == 1 {
				continue // loopback
			}
			opts, info, err := telemetry.TCPOptionsFromPacket(buf[:n], telemetry.Ethernet)
			if err != nil {
				continue
			}
			c := captured{info: info, raw: append([]byte(nil), opts...)}
			c.opt, c.found, err = telemetry.FindOption(opts)
			if err != nil {
				t.Errorf("captured a malformed INT option %x: %v", opts, err)
			}
			got = append(got, c)
		}
		out <- got
	}()
	return out
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// netnsCounter reads one counter of /proc/net/snmp or netstat in h.
func netnsCounter(t testing.TB, h *testbed.Host, file, group, name string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := h.Command(ctx, "cat", filepath.Join("/proc/net", file)).Output()
	if err != nil {
		t.Fatalf("read %s in %s: %v", file, h.Name, err)
	}
	lines := strings.Split(string(out), "\n")
	for i := 0; i+1 < len(lines); i++ {
		head, vals := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(head) == 0 || head[0] != group+":" || len(vals) != len(head) || vals[0] != group+":" {
			continue
		}
		for j := range head {
			if head[j] == name {
				v, _ := strconv.ParseUint(vals[j], 10, 64)
				return v
			}
		}
	}
	t.Fatalf("no %s %s in %s", group, name, file)
	return 0
}

// TestINTEndToEnd sends data from a sender to a receiver through the INT
// hop and checks every stage: forward options with the hop's record on
// the receiver's wire, echoes on the sender's wire, the counters of both
// programs, a valid TCP checksum after the rewrite, and intact data.
func TestINTEndToEnd(t *testing.T) {
	requireKernelCC(t)
	l := New(testHost(t))
	enableINTForTest(t, l, INTConfig{})
	d := newDumbbell(t, 1)
	hop := hopForTest(t, d, 0)
	t.Logf("INT hop attached with %s", hop.Method())
	sink := startSink(t, d.Receiver, d.Receiver.Addr)
	csumBefore := netnsCounter(t, d.Receiver, "snmp", "Tcp", "InCsumErrors")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	atReceiver := capture(t, ctx, d.Receiver, 400)
	atSender := capture(t, ctx, d.Senders[0], 400)
	flow := sendFlow(t, d.Senders[0], sink.Addr, "cubic", 16<<20)
	waitSink(t, sink, 1, 16<<20)
	cancel()
	rx, tx := <-atReceiver, <-atSender

	var forward, echo int
	for _, c := range rx {
		if c.found && c.opt.Direction == telemetry.Forward && c.info.PayloadLen > 0 {
			forward++
			if len(c.opt.Hops) != 1 || c.opt.Hops[0].RateBps != d.Config.BottleneckRate || c.opt.Slots != 3 {
				t.Fatalf("forward option at the receiver: %+v, want one hop record at %d bit/s in 3 slots", c.opt, d.Config.BottleneckRate)
			}
		}
	}
	for _, c := range tx {
		if c.found && c.opt.Direction == telemetry.Echo {
			echo++
			if len(c.opt.Hops) != 1 || c.opt.Hops[0].RateBps != d.Config.BottleneckRate {
				t.Fatalf("echo at the sender: %+v", c.opt)
			}
		}
	}
	t.Logf("captured %d packets at the receiver (%d with a filled forward option), %d at the sender (%d echoes); %.0f Mbit/s",
		len(rx), forward, len(tx), echo, flow.Throughput/1e6)
	st, err := l.INTStatus()
	if err != nil {
		t.Fatal(err)
	}
	hs, err := hop.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sockops counters %v; hop %+v", st.Stats, hs)
	if forward == 0 || echo == 0 {
		t.Fatalf("no INT on the wire: %d forward options, %d echoes", forward, echo)
	}
	for _, k := range []string{"tagged", "echoed", "forward_parsed", "echo_parsed"} {
		if st.Stats[k] == 0 {
			t.Errorf("INT counter %s is 0", k)
		}
	}
	if st.Stats["malformed"] != 0 || hs.Malformed != 0 {
		t.Errorf("malformed options: sockops %d, hop %d", st.Stats["malformed"], hs.Malformed)
	}
	if hs.Records == 0 {
		t.Error("the hop wrote no records")
	}
	if after := netnsCounter(t, d.Receiver, "snmp", "Tcp", "InCsumErrors"); after != csumBefore {
		t.Errorf("the receiver counted %d TCP checksum errors", after-csumBefore)
	}
}

// TestINTScope checks that nothing is tagged for peers outside the
// configured prefixes, and nothing at all with no prefixes.
func TestINTScope(t *testing.T) {
	requireKernelCC(t)
	for _, tc := range []struct {
		name  string
		peers []netip.Prefix
		notes bool
	}{
		{"other prefix", []netip.Prefix{netip.MustParsePrefix("fd00:99::/32")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := New(testHost(t))
			enableINTForTest(t, l, INTConfig{Peers: tc.peers})
			p := newPair(t)
			sink := startSink(t, p.B, p.B.Addr)
			sendFlow(t, p.A, sink.Addr, "cubic", 4<<20)
			waitSink(t, sink, 1, 4<<20)
			st, err := l.INTStatus()
			if err != nil {
				t.Fatal(err)
			}
			if st.Stats["tagged"] != 0 || st.Stats["scoped_connections"] != 0 {
				t.Fatalf("out-of-scope traffic was tagged: %v", st.Stats)
			}
		})
	}
	l := New(testHost(t))
	st, err := l.EnableINT(INTConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.DisableINT()
	if len(st.Notes) == 0 || !strings.Contains(strings.Join(st.Notes, " "), "nothing will be tagged") {
		t.Fatalf("enable with no peers says %q, want a note that nothing is tagged", st.Notes)
	}
}

var (
	_ = errors.New
	_ = os.Getpid
	_ = sync.Mutex{}
	_ = binary.BigEndian
	_ = qdisc.Egress
)

// TestHopQueueModel compares the queue the INT hop reports (its model of
// the shaper) with the qdisc's own backlog, read over rtnetlink, while a
// cubic flow fills the buffer and while θ-PowerTCP keeps it near empty.
func TestHopQueueModel(t *testing.T) {
	requireKernelCC(t, "theta_powertcp")
	l := New(testHost(t))
	attachForTest(t, l, AttachRequest{Name: "theta_powertcp"})
	d := newDumbbell(t, 1)
	hop := hopForTest(t, d, 0)
	sink := startSink(t, d.Receiver, d.Receiver.Addr)

	for _, tc := range []struct {
		cc        string
		tolerance float64 // bytes the two means may differ by
	}{
		{"cubic", 0.1 * bottleneckBuffer},
		{"theta_powertcp", nearZeroQueue},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		var model []float64
		done := make(chan struct{})
		go func() {
			defer close(done)
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for i := 0; i < 60_000 && ctx.Err() == nil; i++ {
				<-tick.C
				if s, err := hop.Stats(); err == nil {
					model = append(model, float64(s.BacklogBytes))
				}
			}
		}()
		m := runFlow(t, d, sink, tc.cc, 128<<20, nil)
		cancel()
		<-done
		// The same window as the qdisc's: after the flow's first fifth.
		from := len(model) / 5
		var sum float64
		for _, v := range model[from:] {
			sum += v
		}
		modelMean := sum / float64(len(model)-from)
		real := m.Steady()
		t.Logf("%s: qdisc backlog mean %.0f KB (%d samples), hop model mean %.0f KB (%d samples)",
			tc.cc, real.Mean/1e3, real.N, modelMean/1e3, len(model)-from)
		if diff := modelMean - real.Mean; diff > tc.tolerance || diff < -tc.tolerance {
			t.Errorf("%s: the hop's queue model (mean %.0f KB) is more than %.0f KB off the qdisc's backlog (mean %.0f KB)",
				tc.cc, modelMean/1e3, tc.tolerance/1e3, real.Mean/1e3)
		}
	}
}
