package hop

// Pinned INT hops: Attach on a dumbbell's bottleneck, real TCP traffic
// through it, a second attach refused, Detach leaving no pin and no tc
// attachment, failures that leave nothing, and pins outliving their
// interface.

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	tc "github.com/florianl/go-tc"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/qdisc"
	"github.com/ccload/ccload/telemetry/sockops"
	"github.com/ccload/ccload/testbed"
)

func TestConfigRoundTrip(t *testing.T) {
	cfg := Config{RateBps: 10_000_000_000, BufferBytes: 1 << 20, ECNThreshold: 30_000, BurstBytes: 64_000, ACKPadding: true}
	c := cfg.config(4)
	if c.RateCode != 4 || c.AckPadding != 1 {
		t.Errorf("config(4) = %+v: rate code or ACK padding wrong", c)
	}
	if back := configFrom(c); back != cfg {
		t.Errorf("read back %+v, want %+v", back, cfg)
	}
	if back := configFrom(Config{RateBps: 1e9, BufferBytes: 1}.config(2)); back.BurstBytes != defaultHopBurst {
		t.Errorf("burst 0 encodes as %d, want %d", back.BurstBytes, defaultHopBurst)
	}
}

// tcEgress is what runs on the egress of an interface: TCX programs, the
// programs of cls_bpf filters, and whether there is a clsact qdisc.
type tcEgress struct {
	TCX     []ebpf.ProgramID
	Filters []uint32
	Clsact  bool
}

func (s tcEgress) equal(o tcEgress) bool {
	return slices.Equal(s.TCX, o.TCX) && slices.Equal(s.Filters, o.Filters) && s.Clsact == o.Clsact
}

// readTCEgress reads the egress of iface inside h.
func readTCEgress(t testing.TB, h *testbed.Host, iface string) tcEgress {
	t.Helper()
	var s tcEgress
	err := h.Do(func() error {
		ifi, err := qdisc.LookupInterface(iface)
		if err != nil || ifi == nil {
			return errors.Join(err, errors.New("no such interface"))
		}
		res, err := link.QueryPrograms(link.QueryOptions{Target: ifi.Index, Attach: ebpf.AttachTCXEgress})
		if err != nil && !errors.Is(err, ebpf.ErrNotSupported) && !errors.Is(err, unix.EINVAL) {
			return err
		}
		if res != nil {
			for _, p := range res.Programs {
				s.TCX = append(s.TCX, p.ID)
			}
		}
		nl, err := tc.Open(&tc.Config{})
		if err != nil {
			return err
		}
		defer nl.Close()
		qs, err := nl.Qdisc().Get()
		if err != nil {
			return err
		}
		for _, q := range qs {
			if q.Ifindex == uint32(ifi.Index) && q.Kind == "clsact" {
				s.Clsact = true
			}
		}
		if !s.Clsact {
			return nil
		}
		fs, err := qdisc.Filters(iface, qdisc.Egress)
		if err != nil {
			return err
		}
		for _, f := range fs {
			s.Filters = append(s.Filters, uint32(f.ProgramID))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read the tc egress of %s in %s: %v", iface, h.Name, err)
	}
	slices.Sort(s.TCX)
	slices.Sort(s.Filters)
	return s
}

// hopPinsLeft lists the hop directories and hop staging directories
// under l's pin root.
func hopPinsLeft(t testing.TB, l *Pins) []string {
	t.Helper()
	var left []string
	entries, err := os.ReadDir(l.root())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	for _, e := range entries {
		left = append(left, filepath.Join(l.root(), e.Name()))
	}
	entries, err = os.ReadDir(l.host.PinRoot())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "staging-hop-") {
			left = append(left, filepath.Join(l.host.PinRoot(), e.Name()))
		}
	}
	return left
}

// addVeth adds a veth pair with both ends in h, up, deleted at the end of
// the test unless the test deleted it.
func addVeth(t testing.TB, h *testbed.Host, name, peer string) {
	t.Helper()
	attrs := netlink.NewLinkAttrs()
	attrs.Name = name
	veth := &netlink.Veth{LinkAttrs: attrs, PeerName: peer}
	err := h.Do(func() error {
		if err := netlink.LinkAdd(veth); err != nil {
			return err
		}
		return netlink.LinkSetUp(veth)
	})
	if err != nil {
		t.Fatalf("add veth %s in %s: %v", name, h.Name, err)
	}
	t.Cleanup(func() {
		h.Do(func() error {
			if lk, err := netlink.LinkByName(name); err == nil {
				netlink.LinkDel(lk)
			}
			return nil
		})
	})
}

// attachHopIn calls Attach inside h; a hop it attaches is detached at
// the end of the test.
func attachHopIn(t testing.TB, l *Pins, h *testbed.Host, cfg Config) (*Status, error) {
	t.Helper()
	var st *Status
	err := h.Do(func() (err error) {
		st, err = l.Attach(cfg)
		return err
	})
	if err == nil {
		t.Cleanup(func() {
			if _, err := detachHopIn(l, h, cfg.Iface); err != nil {
				t.Errorf("cleanup: detach the INT hop from %s: %v", cfg.Iface, err)
			}
		})
	}
	return st, err
}

func detachHopIn(l *Pins, h *testbed.Host, iface string) (bool, error) {
	var was bool
	err := h.Do(func() (err error) {
		was, err = l.Detach(iface)
		return err
	})
	return was, err
}

func hopsIn(t testing.TB, l *Pins, h *testbed.Host) []Status {
	t.Helper()
	var hops []Status
	if err := h.Do(func() (err error) {
		hops, err = l.List()
		return err
	}); err != nil {
		t.Fatalf("list the INT hops of %s: %v", h.Name, err)
	}
	return hops
}

// TestPinnedHop attaches a pinned INT hop to a dumbbell's bottleneck with
// each method, sends TCP through it, and removes it.
func TestPinnedHop(t *testing.T) {
	testutil.RequireRoot(t)
	host := testutil.Host(t)
	l := NewPins(host)
	enableINT(t, host)
	d := testnet.NewDumbbell(t, testbed.DumbbellConfig{Senders: 1, BottleneckRate: 1_000_000_000, BufferBytes: 1 << 20})
	iface := d.BottleneckIface
	before := readTCEgress(t, d.Router, iface)

	for _, m := range []qdisc.Method{qdisc.MethodAuto, qdisc.MethodClsact} {
		t.Run(m.String(), func(t *testing.T) {
			cfg := Config{Iface: iface, RateBps: d.Config.BottleneckRate, BufferBytes: d.Config.BufferBytes,
				BurstBytes: d.BurstBytes(), ECNThreshold: 30_000, Method: m}
			st, err := attachHopIn(t, l, d.Router, cfg)
			if err != nil {
				t.Fatalf("Attach: %v (fix: %s)", err, kernel.FixOf(err))
			}
			t.Logf("attached: %+v", *st)
			if !st.Attached || st.Iface != iface || st.RateBps != cfg.RateBps || st.BufferBytes != cfg.BufferBytes ||
				st.BurstBytes != cfg.BurstBytes || st.ECNThreshold != cfg.ECNThreshold || st.Method == qdisc.MethodAuto {
				t.Errorf("Attach reports %+v for %+v", *st, cfg)
			}
			if m != qdisc.MethodAuto && st.Method != m {
				t.Errorf("attached with %s, want %s", st.Method, m)
			}
			if k, ok := pin.ParseIfaceKey(filepath.Base(st.PinDir)); !ok || k.Name != iface || k.Index != st.Ifindex || k.Netns != st.NetnsInode {
				t.Errorf("pin directory %s does not name %s (index %d, netns %d)", st.PinDir, iface, st.Ifindex, st.NetnsInode)
			}
			for _, name := range []string{intHopMapHopConfig, intHopMapHopStats, intHopMapHopQueue, "tc_egress"} {
				if !kernel.Exists(filepath.Join(st.PinDir, name)) {
					t.Errorf("%s lacks the pin %s", st.PinDir, name)
				}
			}
			if got := hopPinsLeft(t, l); !slices.Equal(got, []string{st.PinDir}) {
				t.Errorf("pins %q, want only %s", got, st.PinDir)
			}
			during := readTCEgress(t, d.Router, iface)
			if during.equal(before) {
				t.Errorf("the tc egress of %s did not change: %+v", iface, during)
			}

			_, err = attachHopIn(t, l, d.Router, cfg)
			if !kernel.IsKind(err, kernel.KindAlreadyAttached) || !strings.Contains(kernel.FixOf(err), "--iface "+iface+" --off") {
				t.Errorf("second Attach: %v (fix: %q), want an already-attached error naming --off", err, kernel.FixOf(err))
			}
			if now := readTCEgress(t, d.Router, iface); !now.equal(during) {
				t.Errorf("the refused attach changed the tc egress from %+v to %+v", during, now)
			}
			if hops := hopsIn(t, l, d.Receiver); len(hops) != 0 {
				t.Errorf("the receiver's netns lists the router's hop: %+v", hops)
			}

			sendThrough(t, d, 4<<20)
			hops := hopsIn(t, l, d.Router)
			if len(hops) != 1 {
				t.Fatalf("List() = %+v, want one hop", hops)
			}
			h := hops[0]
			t.Logf("after a 4 MiB flow: %+v", h)
			if !h.Attached || h.PinDir != st.PinDir || h.Rate != "1gbit" || h.Method != st.Method {
				t.Errorf("List() reports %+v, want it as Attach did: %+v", h, *st)
			}
			if h.Stats.Packets == 0 || h.Stats.Records == 0 || h.Stats.EnqueuedBytes < 4<<20 {
				t.Errorf("the pinned hop wrote no records for real traffic: %+v", h.Stats)
			}

			was, err := detachHopIn(l, d.Router, iface)
			if err != nil || !was {
				t.Fatalf("Detach = %v, %v; want true", was, err)
			}
			if left := hopPinsLeft(t, l); len(left) != 0 {
				t.Errorf("Detach left pins %q", left)
			}
			if after := readTCEgress(t, d.Router, iface); !after.equal(before) {
				t.Errorf("Detach left the tc egress at %+v, want %+v", after, before)
			}
			if was, err := detachHopIn(l, d.Router, iface); err != nil || was {
				t.Errorf("second Detach = %v, %v; want false, nil", was, err)
			}
		})
	}
}

// TestAttachFailureLeavesNothing makes Attach fail before and
// after it has pinned and attached parts of the hop.
func TestAttachFailureLeavesNothing(t *testing.T) {
	testutil.RequireRoot(t)
	l := NewPins(testutil.Host(t))
	p := testnet.NewPair(t)
	const iface = "hoptest0"
	addVeth(t, p.A, iface, "hoptest1")

	// A foreign filter in the slot that clsact would use: Attach gets
	// as far as pinning the maps and loading, then fails to attach.
	foreign, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.SchedCLS,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()},
		License:      "GPL",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { foreign.Close() })
	var fatt *qdisc.Attachment
	if err := p.A.Do(func() (err error) {
		fatt, err = qdisc.Attach(iface, foreign, qdisc.AttachOptions{Method: qdisc.MethodClsact})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fatt.Close() })
	before := readTCEgress(t, p.A, iface)

	good := Config{Iface: iface, RateBps: 1_000_000_000, BufferBytes: 1 << 20}
	for _, tt := range []struct {
		name string
		cfg  func(Config) Config
		kind kernel.Kind
	}{
		{"no such interface", func(c Config) Config { c.Iface = "nosuch0"; return c }, kernel.KindBadParam},
		{"rate without an INT code", func(c Config) Config { c.RateBps = 3_000_000_000; return c }, kernel.KindBadParam},
		{"no buffer", func(c Config) Config { c.BufferBytes = 0; return c }, kernel.KindBadParam},
		{"clsact slot taken", func(c Config) Config { c.Method = qdisc.MethodClsact; return c }, kernel.KindAlreadyAttached},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := attachHopIn(t, l, p.A, tt.cfg(good))
			if !kernel.IsKind(err, tt.kind) || kernel.FixOf(err) == "" {
				t.Fatalf("Attach: %v (fix: %q), want a %s error with a fix", err, kernel.FixOf(err), tt.kind)
			}
			t.Logf("%v (fix: %s)", err, kernel.FixOf(err))
			if left := hopPinsLeft(t, l); len(left) != 0 {
				t.Errorf("the failed attach left pins %q", left)
			}
			if after := readTCEgress(t, p.A, iface); !after.equal(before) {
				t.Errorf("the failed attach changed the tc egress from %+v to %+v", before, after)
			}
		})
	}
}

// TestPinnedHopInterfaceDeleted deletes the interface under a pinned hop:
// Hops shows what is left as detached, a new attach on an interface of
// the same name replaces it, and Detach removes it.
func TestPinnedHopInterfaceDeleted(t *testing.T) {
	testutil.RequireRoot(t)
	l := NewPins(testutil.Host(t))
	p := testnet.NewPair(t)
	const iface, peer = "hoptest0", "hoptest1"
	delVeth := func() error {
		return p.A.Do(func() error {
			lk, err := netlink.LinkByName(iface)
			if err != nil {
				return err
			}
			return netlink.LinkDel(lk)
		})
	}

	for _, m := range []qdisc.Method{qdisc.MethodAuto, qdisc.MethodClsact} {
		t.Run(m.String(), func(t *testing.T) {
			addVeth(t, p.A, iface, peer)
			cfg := Config{Iface: iface, RateBps: 1_000_000_000, BufferBytes: 1 << 20, Method: m}
			st, err := attachHopIn(t, l, p.A, cfg)
			if err != nil {
				t.Fatalf("Attach: %v", err)
			}
			if err := delVeth(); err != nil {
				t.Fatal(err)
			}
			hops := hopsIn(t, l, p.A)
			if len(hops) != 1 || hops[0].Attached || hops[0].Iface != iface || len(hops[0].Notes) == 0 {
				t.Fatalf("List() after deleting %s = %+v, want it listed as no longer attached", iface, hops)
			}
			t.Logf("left behind: %+v", hops[0])

			addVeth(t, p.A, iface, peer)
			st2, err := attachHopIn(t, l, p.A, cfg)
			if err != nil {
				t.Fatalf("Attach on the new %s: %v", iface, err)
			}
			if !st2.Attached || st2.PinDir == st.PinDir || kernel.Exists(st.PinDir) ||
				!strings.Contains(strings.Join(st2.Notes, " "), "no longer attached") {
				t.Errorf("Attach on the new %s: %+v; want the old pins %s replaced, with a note", iface, *st2, st.PinDir)
			}
			if err := delVeth(); err != nil {
				t.Fatal(err)
			}
			if was, err := detachHopIn(l, p.A, iface); err != nil || !was {
				t.Fatalf("Detach after the interface is gone = %v, %v; want true", was, err)
			}
			if left := hopPinsLeft(t, l); len(left) != 0 {
				t.Errorf("Detach left pins %q", left)
			}
		})
	}
}

// TestAttachBesideForegroundHop checks that Attach refuses an
// interface that a foreground (NewHop) hop already runs on.
func TestAttachBesideForegroundHop(t *testing.T) {
	testutil.RequireRoot(t)
	l := NewPins(testutil.Host(t))
	p := testnet.NewPair(t)
	const iface = "hoptest0"
	addVeth(t, p.A, iface, "hoptest1")
	for _, m := range []qdisc.Method{qdisc.MethodAuto, qdisc.MethodClsact} {
		t.Run(m.String(), func(t *testing.T) {
			cfg := Config{Iface: iface, RateBps: 1_000_000_000, BufferBytes: 1 << 20, Method: m}
			var hop *Hop
			if err := p.A.Do(func() (err error) {
				hop, err = New(cfg)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { hop.Close() })
			before := readTCEgress(t, p.A, iface)
			_, err := attachHopIn(t, l, p.A, cfg)
			if !kernel.IsKind(err, kernel.KindAlreadyAttached) {
				t.Fatalf("Attach beside a foreground hop: %v, want an already-attached error", err)
			}
			t.Logf("%v (fix: %s)", err, kernel.FixOf(err))
			if left := hopPinsLeft(t, l); len(left) != 0 {
				t.Errorf("the refused attach left pins %q", left)
			}
			if after := readTCEgress(t, p.A, iface); !after.equal(before) {
				t.Errorf("the refused attach changed the tc egress from %+v to %+v", before, after)
			}
		})
	}
}

// enableINT tags the testbed's connections with INT until the test ends,
// so that the hop has options to write its record into.
func enableINT(t testing.TB, host kernel.Host) {
	t.Helper()
	n := sockops.New(host)
	peers := []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("fd00::/8")}
	if _, err := n.Enable(sockops.Config{Peers: peers}); err != nil {
		t.Fatalf("enable INT: %v (fix: %s)", err, kernel.FixOf(err))
	}
	t.Cleanup(func() {
		if _, err := n.Disable(); err != nil {
			t.Errorf("disable INT: %v", err)
		}
	})
}

// sendThrough sends one cubic flow of n bytes from the dumbbell's sender
// to its receiver and waits until every byte has arrived intact.
func sendThrough(t testing.TB, d *testbed.Dumbbell, n int64) {
	t.Helper()
	sink := testnet.StartSink(t, d.Receiver, d.Receiver.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := testbed.SendFlow(ctx, d.Senders[0], sink.Addr, testbed.FlowConfig{CC: "cubic", Bytes: n, Seed: 1, Timeout: 50 * time.Second}); err != nil {
		t.Fatalf("flow through the hop: %v", err)
	}
	res, err := sink.WaitResults(ctx, 1)
	if err != nil {
		t.Fatalf("sink: %v", err)
	}
	if r := res[0]; !r.OK || r.Bytes != n {
		t.Fatalf("sink got %d of %d bytes, ok=%v: %v", r.Bytes, n, r.OK, r.Err)
	}
}
