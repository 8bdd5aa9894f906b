package hop

// Upgrades in place: a hop pinned by one build, swapped for another build
// (a salt stands for it) while a TCP flow crosses it, with each attach
// method, with and without ACK padding; and the two pins a clsact swap
// killed midway leaves, sorted out by Recover.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	tc "github.com/florianl/go-tc"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/qdisc"
	"github.com/ccload/ccload/testbed"
)

// upgradeSalt stands for a newer build of the hop's object.
const upgradeSalt = 7

// sideState is what runs on one side of a hop's interface: the program,
// and the attachment that runs it (a TCX link's ID, or a cls_bpf
// filter's priority and handle).
type sideState struct {
	Method qdisc.Method
	Prog   ebpf.ProgramID
	Link   link.ID
	Filter string // "pref P handle H"
}

// readSide reads side dir of the hop pinned in pinDir on iface, inside h.
func readSide(t testing.TB, h *testbed.Host, iface, pinDir string, dir qdisc.Direction) sideState {
	t.Helper()
	var s sideState
	path := qdisc.SidePin(pinDir, dir)
	err := h.Do(func() error {
		info, err := qdisc.InspectPinned(iface, dir, path)
		if err != nil {
			return err
		}
		if !info.Attached {
			return fmt.Errorf("%s is not attached", path)
		}
		s.Method, s.Prog = info.Method, info.ProgramID
		if info.Method == qdisc.MethodTCX {
			lnk, err := link.LoadPinnedLink(path, nil)
			if err != nil {
				return err
			}
			defer lnk.Close()
			li, err := lnk.Info()
			if err != nil {
				return err
			}
			s.Link = li.ID
			return nil
		}
		fs, err := qdisc.Filters(iface, dir)
		if err != nil {
			return err
		}
		for _, f := range fs {
			if f.ProgramID == s.Prog {
				s.Filter = fmt.Sprintf("pref %d handle %#x", f.Prio, f.Handle)
			}
		}
		if s.Filter == "" {
			return fmt.Errorf("no filter runs program %d", s.Prog)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read the %s side of the hop on %s: %v", dir, iface, err)
	}
	return s
}

// hopStats returns the counters of the one hop h lists.
func hopStats(t testing.TB, l *Pins, h *testbed.Host) Status {
	t.Helper()
	hops := hopsIn(t, l, h)
	if len(hops) != 1 {
		t.Fatalf("%d hops listed, want 1: %+v", len(hops), hops)
	}
	return hops[0]
}

// TestUpgradeInPlace attaches a hop on a dumbbell's bottleneck, sends a
// TCP flow through it, and attaches it again from a newer build while
// the flow runs: every side runs a new program on the same attachment
// (TCX link, or cls_bpf filter), the counters and queue model carry on,
// the flow arrives intact, and no upgrade is left to do.
func TestUpgradeInPlace(t *testing.T) {
	testutil.RequireRoot(t)
	host := testutil.Host(t)
	enableINT(t, host)
	d := testnet.NewDumbbell(t, testbed.DumbbellConfig{Senders: 1, BottleneckRate: 1_000_000_000, BufferBytes: 1 << 20})
	iface := d.BottleneckIface

	for _, tt := range []struct {
		method qdisc.Method
		ackPad bool
	}{
		{qdisc.MethodAuto, false}, {qdisc.MethodAuto, true},
		{qdisc.MethodClsact, false}, {qdisc.MethodClsact, true},
	} {
		t.Run(fmt.Sprintf("%s ack-padding=%v", tt.method, tt.ackPad), func(t *testing.T) {
			old, next := NewPins(host), NewPins(host, WithBuildSalt(upgradeSalt))
			cfg := Config{Iface: iface, RateBps: d.Config.BottleneckRate, BufferBytes: d.Config.BufferBytes,
				BurstBytes: d.BurstBytes(), ECNThreshold: 30_000, ACKPadding: tt.ackPad, Method: tt.method}
			st, err := attachHopIn(t, old, d.Router, cfg)
			if err != nil {
				t.Fatalf("Attach: %v (fix: %s)", err, kernel.FixOf(err))
			}
			if st.UpgradeAvailable || st.Object != old.object().String() {
				t.Fatalf("Attach reports object %q, upgrade available %v; want %s and none", st.Object, st.UpgradeAvailable, old.object())
			}
			if s := hopStats(t, next, d.Router); !s.UpgradeAvailable {
				t.Fatalf("the newer build sees no upgrade to do: %+v", s)
			}
			sides := []qdisc.Direction{qdisc.Egress}
			if tt.ackPad {
				sides = append(sides, qdisc.Ingress)
			}
			before := map[qdisc.Direction]sideState{}
			for _, side := range sides {
				before[side] = readSide(t, d.Router, iface, st.PinDir, side)
			}

			sink := testnet.StartSink(t, d.Receiver, d.Receiver.Addr)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			type flowEnd struct {
				res testbed.FlowResult
				err error
			}
			done := make(chan flowEnd, 1)
			go func() {
				res, err := testbed.SendFlow(ctx, d.Senders[0], sink.Addr, testbed.FlowConfig{CC: "cubic", For: 2 * time.Second, Timeout: 45 * time.Second, Seed: 15})
				done <- flowEnd{res, err}
			}()
			var s0 Stats
			for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && s0.Records == 0; time.Sleep(50 * time.Millisecond) {
				s0 = hopStats(t, old, d.Router).Stats
			}
			if s0.Records == 0 {
				t.Fatalf("the hop wrote no record for the flow: %+v", s0)
			}

			up, err := attachHopIn(t, next, d.Router, cfg)
			if err != nil {
				t.Fatalf("Attach from the newer build: %v (fix: %s)", err, kernel.FixOf(err))
			}
			t.Logf("Attach from the newer build: %q", up.Notes)
			if up.UpgradeAvailable || up.Object != next.object().String() || up.PinDir != st.PinDir || !up.Attached {
				t.Errorf("after the upgrade: %+v; want object %s, no upgrade, the same pins %s", *up, next.object(), st.PinDir)
			}
			for _, side := range sides {
				b, a := before[side], readSide(t, d.Router, iface, st.PinDir, side)
				if a.Prog == b.Prog || a.Method != b.Method || a.Link != b.Link || a.Filter != b.Filter {
					t.Errorf("%s: %+v before the upgrade, %+v after; want another program on the same attachment", side, b, a)
				}
			}
			s1 := hopStats(t, next, d.Router).Stats
			if s1.Packets < s0.Packets || s1.Records < s0.Records || s1.EnqueuedBytes < s0.EnqueuedBytes {
				t.Errorf("counters went from %+v to %+v across the upgrade: they were reset", s0, s1)
			}

			end := <-done
			if end.err != nil {
				t.Fatalf("the flow across the upgrade: %v", end.err)
			}
			res, err := sink.WaitResults(ctx, 1)
			if err != nil || len(res) != 1 || !res[0].OK || res[0].Bytes != end.res.Bytes {
				t.Fatalf("the sink got %+v (%v); the sender sent %d bytes", res, err, end.res.Bytes)
			}
			s2 := hopStats(t, next, d.Router)
			if s2.Stats.Records <= s1.Records || s2.UpgradeAvailable {
				t.Errorf("after the flow: %+v; want more records than %d just after the upgrade, and no upgrade", s2, s1.Records)
			}
			t.Logf("flow of %d bytes intact across the upgrade; records %d before, %d just after, %d at the end",
				end.res.Bytes, s0.Records, s1.Records, s2.Stats.Records)

			// The same build again: refused, as before upgrades.
			if _, err := attachHopIn(t, next, d.Router, cfg); !kernel.IsKind(err, kernel.KindAlreadyAttached) {
				t.Errorf("Attach of the build that runs: %v, want an already-attached error", err)
			}
			if err := d.Router.Do(func() error {
				st, err := next.Upgrade(iface)
				if err == nil && st.Object != next.object().String() {
					err = fmt.Errorf("Upgrade of the build that runs reports object %s", st.Object)
				}
				return err
			}); err != nil {
				t.Error(err)
			}
			if was, err := detachHopIn(next, d.Router, iface); err != nil || !was {
				t.Errorf("Detach = %v, %v", was, err)
			}
		})
	}
}

// TestUpgradeKeepsACKPadding checks that an upgrade in place refuses to
// turn ACK padding on or off, and changes nothing then.
func TestUpgradeKeepsACKPadding(t *testing.T) {
	testutil.RequireRoot(t)
	host := testutil.Host(t)
	p := testnet.NewPair(t)
	iface, err := p.A.Interface()
	if err != nil {
		t.Fatal(err)
	}
	old, next := NewPins(host), NewPins(host, WithBuildSalt(upgradeSalt))
	cfg := Config{Iface: iface, RateBps: 1_000_000_000, BufferBytes: 1 << 20}
	st, err := attachHopIn(t, old, p.A, cfg)
	if err != nil {
		t.Fatal(err)
	}
	before := readSide(t, p.A, iface, st.PinDir, qdisc.Egress)
	pad := cfg
	pad.ACKPadding = true
	if _, err := attachHopIn(t, next, p.A, pad); !kernel.IsKind(err, kernel.KindAlreadyAttached) || kernel.FixOf(err) == "" {
		t.Errorf("an upgrade that turns ACK padding on: %v, want an already-attached error with a fix", err)
	}
	if after := readSide(t, p.A, iface, st.PinDir, qdisc.Egress); after != before {
		t.Errorf("the refused upgrade changed %+v into %+v", before, after)
	}
	if o, _, _ := pin.ReadObject(filepath.Join(st.PinDir, pinObject)); o != old.object() {
		t.Errorf("the refused upgrade changed the record to %s", o.Short())
	}
}

// swapFilterIn makes the cls_bpf filter on side dir of iface, inside h,
// that runs program old run prog instead, as qdisc.ReplacePinned's second
// step does.
func swapFilterIn(h *testbed.Host, iface string, dir qdisc.Direction, old ebpf.ProgramID, prog *ebpf.Program) error {
	return h.Do(func() error {
		ifi, err := qdisc.LookupInterface(iface)
		if err != nil || ifi == nil {
			return errors.Join(err, errors.New("no such interface"))
		}
		nl, err := tc.Open(&tc.Config{})
		if err != nil {
			return err
		}
		defer nl.Close()
		parent := uint32(0xfffffff3)
		if dir == qdisc.Ingress {
			parent = 0xfffffff2
		}
		fs, err := nl.Filter().Get(&tc.Msg{Family: unix.AF_UNSPEC, Ifindex: uint32(ifi.Index), Parent: parent})
		if err != nil {
			return err
		}
		for _, f := range fs {
			if f.BPF == nil || f.BPF.ID == nil || ebpf.ProgramID(*f.BPF.ID) != old {
				continue
			}
			fd, flags, name := uint32(prog.FD()), uint32(tc.BpfActDirect), "int_hop"
			return nl.Filter().Replace(&tc.Object{
				Msg:       tc.Msg{Family: unix.AF_UNSPEC, Ifindex: uint32(ifi.Index), Handle: f.Handle, Parent: parent, Info: f.Info},
				Attribute: tc.Attribute{Kind: "bpf", BPF: &tc.Bpf{FD: &fd, Name: &name, Flags: &flags}},
			})
		}
		return fmt.Errorf("no filter runs program %d", old)
	})
}

// TestRecoverKilledUpgrade lays out what an upgrade killed in a clsact
// swap leaves, the new program pinned beside the old one, before and
// after the filter runs it, and checks that Recover leaves a complete
// hop attached with the program the filter runs, and no second pin; and
// that the next Attach of the newer build finishes the upgrade.
func TestRecoverKilledUpgrade(t *testing.T) {
	testutil.RequireRoot(t)
	for _, swapped := range []bool{false, true} {
		t.Run(fmt.Sprintf("filter swapped=%v", swapped), func(t *testing.T) {
			host := testutil.Host(t)
			p := testnet.NewPair(t)
			iface, err := p.A.Interface()
			if err != nil {
				t.Fatal(err)
			}
			old, next := NewPins(host), NewPins(host, WithBuildSalt(upgradeSalt))
			cfg := Config{Iface: iface, RateBps: 1_000_000_000, BufferBytes: 1 << 20, Method: qdisc.MethodClsact}
			st, err := attachHopIn(t, old, p.A, cfg)
			if err != nil {
				t.Fatal(err)
			}
			path := qdisc.SidePin(st.PinDir, qdisc.Egress)
			before := readSide(t, p.A, iface, st.PinDir, qdisc.Egress)

			objs, err := load(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer objs.Close()
			own, err := objs.IntHop.Clone()
			if err != nil {
				t.Fatal(err)
			}
			defer own.Close()
			if err := own.Pin(qdisc.ReplacingPin(path)); err != nil {
				t.Fatal(err)
			}
			info, err := own.Info()
			if err != nil {
				t.Fatal(err)
			}
			newID, _ := info.ID()
			want := before
			if swapped {
				if err := swapFilterIn(p.A, iface, qdisc.Egress, before.Prog, objs.IntHop); err != nil {
					t.Fatal(err)
				}
				want.Prog = newID
			}

			var removed []string
			if err := p.A.Do(func() (err error) { removed, err = old.Recover(); return err }); err != nil || len(removed) != 0 {
				t.Fatalf("Recover = %q, %v; want the hop kept", removed, err)
			}
			if after := readSide(t, p.A, iface, st.PinDir, qdisc.Egress); after != want {
				t.Errorf("after Recover the egress is %+v, want %+v", after, want)
			}
			if kernel.Exists(qdisc.ReplacingPin(path)) {
				t.Errorf("Recover left %s", qdisc.ReplacingPin(path))
			}
			if s := hopStats(t, old, p.A); !s.Attached || s.UpgradeAvailable {
				t.Errorf("after Recover: %+v; want the hop attached, recorded as the old build", s)
			}

			up, err := attachHopIn(t, next, p.A, cfg)
			if err != nil || up.UpgradeAvailable || !up.Attached {
				t.Fatalf("Attach of the newer build after Recover: %+v, %v; want the upgrade finished", up, err)
			}
			if after := readSide(t, p.A, iface, st.PinDir, qdisc.Egress); after.Prog == want.Prog || after.Filter != want.Filter {
				t.Errorf("after the upgrade the egress is %+v; want another program than %+v in the same filter", after, want)
			}
		})
	}
}
