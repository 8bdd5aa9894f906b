package loader

// Pinned INT hops: AttachHop on a dumbbell's bottleneck, real TCP traffic
// through it, a second attach refused, DetachHop leaving no pin and no tc
// attachment, failures that leave nothing, and pins outliving their
// interface.

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	tc "github.com/florianl/go-tc"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/qdisc"
	"github.com/ccload/ccload/testbed"
)

func TestHopKeyNames(t *testing.T) {
	for _, tt := range []struct {
		key  hopKey
		want string
	}{
		{hopKey{"eth0", 2, 4026531840}, "eth0-2-ns4026531840"},
		{hopKey{"eth0.100", 7, 1}, "eth0%2e100-7-ns1"},
		{hopKey{"a%b", 3, 9}, "a%25b-3-ns9"},
		{hopKey{"veth-a-1", 12, 5}, "veth-a-1-12-ns5"},
		{hopKey{"x.y-ns3", 4, 8}, "x%2ey-ns3-4-ns8"},
	} {
		got := tt.key.String()
		if got != tt.want {
			t.Errorf("%+v names %q, want %q", tt.key, got, tt.want)
		}
		if strings.Contains(got, ".") {
			t.Errorf("%q has a dot, which bpffs refuses", got)
		}
		back, ok := parseHopKey(got)
		if !ok || back != tt.key {
			t.Errorf("parseHopKey(%q) = %+v, %v; want %+v", got, back, ok, tt.key)
		}
	}
	for _, bad := range []string{"eth0", "eth0-3", "eth0-x-ns5", "-3-ns5", "eth0-3-ns", "eth0-0-ns5",
		"eth0.1-3-ns5", "eth0%2E1-3-ns5", "staging-hop-eth0-3-ns5-123"} {
		if k, ok := parseHopKey(bad); ok {
			t.Errorf("parseHopKey(%q) = %+v, want no key", bad, k)
		}
	}
}

func TestHopConfigBytes(t *testing.T) {
	cfg := HopConfig{RateBps: 10_000_000_000, BufferBytes: 1 << 20, ECNThreshold: 30_000, BurstBytes: 64_000, ACKPadding: true}
	for _, tt := range []struct {
		size    uint32
		wantErr bool
	}{{28, false}, {32, false}, {24, true}, {16, true}} {
		b, err := cfg.configBytes(4, tt.size)
		if tt.wantErr {
			if err == nil {
				t.Errorf("size %d: encoded %d bytes into it", tt.size, len(b))
			}
			continue
		}
		if err != nil || len(b) != int(tt.size) {
			t.Fatalf("size %d: %d bytes, %v", tt.size, len(b), err)
		}
		back, err := hopConfigFromBytes(b)
		if err != nil {
			t.Fatal(err)
		}
		if back != cfg {
			t.Errorf("size %d: read back %+v, want %+v", tt.size, back, cfg)
		}
		if b[8] != 4 || b[24] != 1 || slices.ContainsFunc(b[28:], func(c byte) bool { return c != 0 }) {
			t.Errorf("size %d: rate code or padding wrong: %x", tt.size, b)
		}
	}
	b, _ := HopConfig{RateBps: 1e9, BufferBytes: 1}.configBytes(2, 32)
	if back, _ := hopConfigFromBytes(b); back.BurstBytes != defaultHopBurst {
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
		fs, err := nl.Filter().Get(&tc.Msg{Family: unix.AF_UNSPEC, Ifindex: uint32(ifi.Index), Parent: 0xfffffff3})
		if err != nil {
			return err
		}
		for _, f := range fs {
			if f.BPF != nil && f.BPF.ID != nil {
				s.Filters = append(s.Filters, *f.BPF.ID)
			}
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
func hopPinsLeft(t testing.TB, l *Loader) []string {
	t.Helper()
	var left []string
	entries, err := os.ReadDir(l.hopRoot())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	for _, e := range entries {
		left = append(left, filepath.Join(l.hopRoot(), e.Name()))
	}
	entries, err = os.ReadDir(l.pinRoot())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "staging-hop-") {
			left = append(left, filepath.Join(l.pinRoot(), e.Name()))
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

// attachHopIn calls AttachHop inside h; a hop it attaches is detached at
// the end of the test.
func attachHopIn(t testing.TB, l *Loader, h *testbed.Host, cfg HopConfig) (*HopStatus, error) {
	t.Helper()
	var st *HopStatus
	err := h.Do(func() (err error) {
		st, err = l.AttachHop(cfg)
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

func detachHopIn(l *Loader, h *testbed.Host, iface string) (bool, error) {
	var was bool
	err := h.Do(func() (err error) {
		was, err = l.DetachHop(iface)
		return err
	})
	return was, err
}

func hopsIn(t testing.TB, l *Loader, h *testbed.Host) []HopStatus {
	t.Helper()
	var hops []HopStatus
	if err := h.Do(func() (err error) {
		hops, err = l.Hops()
		return err
	}); err != nil {
		t.Fatalf("list the INT hops of %s: %v", h.Name, err)
	}
	return hops
}

// TestPinnedHop attaches a pinned INT hop to a dumbbell's bottleneck with
// each method, sends TCP through it, and removes it.
func TestPinnedHop(t *testing.T) {
	requireKernelCC(t)
	l := New(testHost(t))
	enableINTForTest(t, l, INTConfig{})
	d := newDumbbell(t, 1)
	iface := d.BottleneckIface
	before := readTCEgress(t, d.Router, iface)

	for _, m := range []qdisc.Method{qdisc.MethodAuto, qdisc.MethodClsact} {
		t.Run(m.String(), func(t *testing.T) {
			cfg := HopConfig{Iface: iface, RateBps: d.Config.BottleneckRate, BufferBytes: d.Config.BufferBytes,
				BurstBytes: d.BurstBytes(), ECNThreshold: 30_000, Method: m}
			st, err := attachHopIn(t, l, d.Router, cfg)
			if err != nil {
				t.Fatalf("AttachHop: %v (fix: %s)", err, FixOf(err))
			}
			t.Logf("attached: %+v", *st)
			if !st.Attached || st.Iface != iface || st.RateBps != cfg.RateBps || st.BufferBytes != cfg.BufferBytes ||
				st.BurstBytes != cfg.BurstBytes || st.ECNThreshold != cfg.ECNThreshold || st.Method == qdisc.MethodAuto {
				t.Errorf("AttachHop reports %+v for %+v", *st, cfg)
			}
			if m != qdisc.MethodAuto && st.Method != m {
				t.Errorf("attached with %s, want %s", st.Method, m)
			}
			if k, ok := parseHopKey(filepath.Base(st.PinDir)); !ok || k.ifname != iface || k.ifindex != st.Ifindex || k.netns != st.NetnsInode {
				t.Errorf("pin directory %s does not name %s (index %d, netns %d)", st.PinDir, iface, st.Ifindex, st.NetnsInode)
			}
			for _, pin := range []string{"hop_config", "hop_stats", "hop_queue", "tc_egress"} {
				if !exists(filepath.Join(st.PinDir, pin)) {
					t.Errorf("%s lacks the pin %s", st.PinDir, pin)
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
			if !IsKind(err, KindAlreadyAttached) || !strings.Contains(FixOf(err), "--iface "+iface+" --off") {
				t.Errorf("second AttachHop: %v (fix: %q), want an already-attached error naming --off", err, FixOf(err))
			}
			if now := readTCEgress(t, d.Router, iface); !now.equal(during) {
				t.Errorf("the refused attach changed the tc egress from %+v to %+v", during, now)
			}
			if hops := hopsIn(t, l, d.Receiver); len(hops) != 0 {
				t.Errorf("the receiver's netns lists the router's hop: %+v", hops)
			}

			sink := startSink(t, d.Receiver, d.Receiver.Addr)
			sendFlow(t, d.Senders[0], sink.Addr, "cubic", 4<<20)
			waitSink(t, sink, 1, 4<<20)
			hops := hopsIn(t, l, d.Router)
			if len(hops) != 1 {
				t.Fatalf("Hops() = %+v, want one hop", hops)
			}
			h := hops[0]
			t.Logf("after a 4 MiB flow: %+v", h)
			if !h.Attached || h.PinDir != st.PinDir || h.Rate != "1gbit" || h.Method != st.Method {
				t.Errorf("Hops() reports %+v, want it as AttachHop did: %+v", h, *st)
			}
			if h.Stats.Packets == 0 || h.Stats.Records == 0 || h.Stats.EnqueuedBytes < 4<<20 {
				t.Errorf("the pinned hop wrote no records for real traffic: %+v", h.Stats)
			}

			was, err := detachHopIn(l, d.Router, iface)
			if err != nil || !was {
				t.Fatalf("DetachHop = %v, %v; want true", was, err)
			}
			if left := hopPinsLeft(t, l); len(left) != 0 {
				t.Errorf("DetachHop left pins %q", left)
			}
			if after := readTCEgress(t, d.Router, iface); !after.equal(before) {
				t.Errorf("DetachHop left the tc egress at %+v, want %+v", after, before)
			}
			if was, err := detachHopIn(l, d.Router, iface); err != nil || was {
				t.Errorf("second DetachHop = %v, %v; want false, nil", was, err)
			}
		})
	}
}

// TestAttachHopFailureLeavesNothing makes AttachHop fail before and
// after it has pinned and attached parts of the hop.
func TestAttachHopFailureLeavesNothing(t *testing.T) {
	requireKernelCC(t)
	l := New(testHost(t))
	p := newPair(t)
	const iface = "hoptest0"
	addVeth(t, p.A, iface, "hoptest1")

	// A foreign filter in the slot that clsact would use: AttachHop gets
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

	good := HopConfig{Iface: iface, RateBps: 1_000_000_000, BufferBytes: 1 << 20}
	for _, tt := range []struct {
		name string
		cfg  func(HopConfig) HopConfig
		kind Kind
	}{
		{"no such interface", func(c HopConfig) HopConfig { c.Iface = "nosuch0"; return c }, KindBadParam},
		{"rate without an INT code", func(c HopConfig) HopConfig { c.RateBps = 3_000_000_000; return c }, KindBadParam},
		{"no buffer", func(c HopConfig) HopConfig { c.BufferBytes = 0; return c }, KindBadParam},
		{"clsact slot taken", func(c HopConfig) HopConfig { c.Method = qdisc.MethodClsact; return c }, KindAlreadyAttached},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := attachHopIn(t, l, p.A, tt.cfg(good))
			if !IsKind(err, tt.kind) || FixOf(err) == "" {
				t.Fatalf("AttachHop: %v (fix: %q), want a %s error with a fix", err, FixOf(err), tt.kind)
			}
			t.Logf("%v (fix: %s)", err, FixOf(err))
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
// the same name replaces it, and DetachHop removes it.
func TestPinnedHopInterfaceDeleted(t *testing.T) {
	requireKernelCC(t)
	l := New(testHost(t))
	p := newPair(t)
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
			cfg := HopConfig{Iface: iface, RateBps: 1_000_000_000, BufferBytes: 1 << 20, Method: m}
			st, err := attachHopIn(t, l, p.A, cfg)
			if err != nil {
				t.Fatalf("AttachHop: %v", err)
			}
			if err := delVeth(); err != nil {
				t.Fatal(err)
			}
			hops := hopsIn(t, l, p.A)
			if len(hops) != 1 || hops[0].Attached || hops[0].Iface != iface || len(hops[0].Notes) == 0 {
				t.Fatalf("Hops() after deleting %s = %+v, want it listed as no longer attached", iface, hops)
			}
			t.Logf("left behind: %+v", hops[0])

			addVeth(t, p.A, iface, peer)
			st2, err := attachHopIn(t, l, p.A, cfg)
			if err != nil {
				t.Fatalf("AttachHop on the new %s: %v", iface, err)
			}
			if !st2.Attached || st2.PinDir == st.PinDir || exists(st.PinDir) ||
				!strings.Contains(strings.Join(st2.Notes, " "), "no longer attached") {
				t.Errorf("AttachHop on the new %s: %+v; want the old pins %s replaced, with a note", iface, *st2, st.PinDir)
			}
			if err := delVeth(); err != nil {
				t.Fatal(err)
			}
			if was, err := detachHopIn(l, p.A, iface); err != nil || !was {
				t.Fatalf("DetachHop after the interface is gone = %v, %v; want true", was, err)
			}
			if left := hopPinsLeft(t, l); len(left) != 0 {
				t.Errorf("DetachHop left pins %q", left)
			}
		})
	}
}

// TestAttachHopBesideForegroundHop checks that AttachHop refuses an
// interface that a foreground (NewHop) hop already runs on.
func TestAttachHopBesideForegroundHop(t *testing.T) {
	requireKernelCC(t)
	l := New(testHost(t))
	p := newPair(t)
	const iface = "hoptest0"
	addVeth(t, p.A, iface, "hoptest1")
	for _, m := range []qdisc.Method{qdisc.MethodAuto, qdisc.MethodClsact} {
		t.Run(m.String(), func(t *testing.T) {
			cfg := HopConfig{Iface: iface, RateBps: 1_000_000_000, BufferBytes: 1 << 20, Method: m}
			var hop *Hop
			if err := p.A.Do(func() (err error) {
				hop, err = NewHop(cfg)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { hop.Close() })
			before := readTCEgress(t, p.A, iface)
			_, err := attachHopIn(t, l, p.A, cfg)
			if !IsKind(err, KindAlreadyAttached) {
				t.Fatalf("AttachHop beside a foreground hop: %v, want an already-attached error", err)
			}
			t.Logf("%v (fix: %s)", err, FixOf(err))
			if left := hopPinsLeft(t, l); len(left) != 0 {
				t.Errorf("the refused attach left pins %q", left)
			}
			if after := readTCEgress(t, p.A, iface); !after.equal(before) {
				t.Errorf("the refused attach changed the tc egress from %+v to %+v", before, after)
			}
		})
	}
}
