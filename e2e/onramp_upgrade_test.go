package e2e

import (
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/ccload/ccload/clocksync"
	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/onramp"
	"github.com/ccload/ccload/qdisc"
	"github.com/ccload/ccload/testbed"
)

// onRampAttachment is what identifies one attached On-Ramp program: the
// program, and the TCX or cgroup link that runs it (0 for a cls_bpf
// filter, which InspectPinned finds by its program).
type onRampAttachment struct {
	prog ebpf.ProgramID
	link link.ID
}

// onRampAttachments reads, in the calling thread's network namespace, the
// attachments of On-Ramp pinned in dir for iface (both sides) and of the
// sockops program pinned in sockopsDir.
func onRampAttachments(iface, dir, sockopsDir string) (map[string]onRampAttachment, error) {
	out := map[string]onRampAttachment{}
	for _, side := range qdisc.Sides() {
		path := qdisc.SidePin(dir, side)
		info, err := qdisc.InspectPinned(iface, side, path)
		if err != nil {
			return nil, err
		}
		if !info.Attached {
			return nil, errors.New("On-Ramp's " + side.String() + " program is not attached")
		}
		a := onRampAttachment{prog: info.ProgramID}
		if info.Method == qdisc.MethodTCX {
			if a.link, err = pinnedLinkID(path); err != nil {
				return nil, err
			}
		}
		out[side.String()] = a
	}
	path := filepath.Join(sockopsDir, "link")
	lnk, err := link.LoadPinnedLink(path, nil)
	if err != nil {
		return nil, err
	}
	defer lnk.Close()
	info, err := lnk.Info()
	if err != nil {
		return nil, err
	}
	out["sockops"] = onRampAttachment{prog: info.Program, link: info.ID}
	return out, nil
}

// pinnedLinkID returns the ID of the link pinned at path.
func pinnedLinkID(path string) (link.ID, error) {
	lnk, err := link.LoadPinnedLink(path, nil)
	if err != nil {
		return 0, err
	}
	defer lnk.Close()
	info, err := lnk.Info()
	if err != nil {
		return 0, err
	}
	return info.ID, nil
}

// programMaps returns the IDs of the maps program id uses, by name.
func programMaps(id ebpf.ProgramID) (map[string]ebpf.MapID, error) {
	prog, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return nil, err
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		return nil, err
	}
	ids, _ := info.MapIDs()
	out := map[string]ebpf.MapID{}
	for _, mid := range ids {
		m, err := ebpf.NewMapFromID(mid)
		if err != nil {
			continue
		}
		if mi, err := m.Info(); err == nil {
			out[mi.Name] = mid
		}
		m.Close()
	}
	return out, nil
}

// onRampEnd is one end of a pair with On-Ramp: its host, its interface,
// and the directory of its pins.
type onRampEnd struct {
	h      *testbed.Host
	iface  string
	pinDir string
}

// enableOnRampEnds enables On-Ramp with o and cfg on both ends of p, and
// disables it with off when the test ends (the build that will have it
// then). It skips the test on a kernel without sch_fq.
func enableOnRampEnds(t *testing.T, p *testbed.Pair, o, off *onramp.OnRamp, cfg onramp.Config) []onRampEnd {
	t.Helper()
	ends := []onRampEnd{{h: p.A, iface: ifaceOf(t, p.A)}, {h: p.B, iface: ifaceOf(t, p.B)}}
	for i := range ends {
		e := &ends[i]
		c := cfg
		c.Iface = e.iface
		var st *onramp.Status
		err := e.h.Do(func() (err error) { st, err = o.Enable(c); return err })
		if errors.Is(err, qdisc.ErrNoFQ) {
			testutil.SkipKernelLacks(t, "sch_fq")
		}
		if err != nil {
			t.Fatal(err)
		}
		e.pinDir = st.PinDir
		t.Cleanup(func() {
			if err := e.h.Do(func() error { _, err := off.Disable(e.iface); return err }); err != nil {
				t.Errorf("disable On-Ramp on %s: %v", e.iface, err)
			}
		})
	}
	return ends
}

// upgradeOnRampEnds enables On-Ramp with newer on every end that has it,
// as a newer ccload does, and returns the notes of the upgrades.
func upgradeOnRampEnds(t *testing.T, ends []onRampEnd, newer *onramp.OnRamp, cfg onramp.Config) []string {
	t.Helper()
	var notes []string
	for _, e := range ends {
		c := cfg
		c.Iface = e.iface
		err := e.h.Do(func() error {
			st, err := newer.Enable(c)
			if st != nil {
				notes = append(notes, st.Notes...)
			}
			return err
		})
		if err != nil {
			t.Fatalf("upgrade On-Ramp on %s: %v", e.iface, err)
		}
	}
	t.Logf("notes: %s", strings.Join(notes, "; "))
	return notes
}

// TestOnRampUpgradeInPlace swaps another build of On-Ramp (salt 7: a
// different object identity) in for the one running, on both ends of a
// flow that On-Ramp keeps pausing (the receiver's clock says every packet
// took 30 ms), as a newer ccload's `onramp enable` or daemon does. The
// programs must change and the links stay (the TCX links and the
// sockops program's cgroup link keep their IDs; with clsact the filters
// keep running), the new programs must run on the maps that were pinned
// (the flow table with each flow's pause, the counters, the sockets'
// storage), the flow must keep being paused and arrive intact, and each
// build must see the other's pins as an upgrade to make.
func TestOnRampUpgradeInPlace(t *testing.T) {
	testutil.RequireRoot(t)
	host := testutil.Host(t)
	p := testnet.NewPair(t)
	old := onramp.New(host)
	newer := onramp.New(host, onramp.WithBuildSalt(7))
	cfg := onramp.Config{Peers: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}, Threshold: time.Millisecond, MaxPause: 5 * time.Millisecond}
	ends := enableOnRampEnds(t, p, old, old, cfg)
	err := p.B.Do(func() error {
		return clocksync.PublishFixed(host, []netip.Addr{p.A.Addr}, 30*time.Millisecond, 1000, time.Hour)
	})
	if err != nil {
		t.Fatal(err)
	}
	status := func(o *onramp.OnRamp) onramp.Status {
		t.Helper()
		var sts []onramp.Status
		if err := p.A.Do(func() (err error) { sts, err = o.Status(); return err }); err != nil {
			t.Fatal(err)
		}
		if len(sts) != 1 {
			t.Fatalf("status lists %d interfaces of the sender, want 1: %+v", len(sts), sts)
		}
		return sts[0]
	}
	st := status(old)
	if st.UpgradeAvailable || !status(newer).UpgradeAvailable {
		t.Fatalf("before the upgrade: the build that enabled On-Ramp sees an upgrade: %v, the newer build: %v; want false, true",
			st.UpgradeAvailable, status(newer).UpgradeAvailable)
	}
	sockopsDir := filepath.Join(host.PinRoot(), "onramp", "sockops")
	attachments := func() map[string]onRampAttachment {
		t.Helper()
		var a map[string]onRampAttachment
		if err := p.A.Do(func() (err error) { a, err = onRampAttachments(ends[0].iface, st.PinDir, sockopsDir); return err }); err != nil {
			t.Fatal(err)
		}
		return a
	}
	before := attachments()
	// The old programs go once swapped out: read their maps now.
	oldSockops, err := programMaps(before["sockops"].prog)
	if err != nil {
		t.Fatal(err)
	}
	flows, err := ebpf.LoadPinnedMap(filepath.Join(st.PinDir, "onramp_flows"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer flows.Close()
	flowsInfo, err := flows.Info()
	if err != nil {
		t.Fatal(err)
	}
	flowsID, _ := flowsInfo.ID()

	sink := testnet.StartSink(t, p.B, p.B.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sent := make(chan error, 1)
	go func() {
		_, err := testbed.SendFlow(ctx, p.A, sink.Addr, testbed.FlowConfig{CC: "cubic", For: 12 * time.Second, Seed: 7, Timeout: 80 * time.Second})
		sent <- err
	}()
	// Wait for the flow to be paused, bounded.
	var pausesBefore uint64
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if s := status(old); s.Flows > 0 && s.Pauses > 0 {
			pausesBefore = s.Pauses
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no flow paused in 5 s: %+v", status(old))
		}
	}

	notes := upgradeOnRampEnds(t, ends, newer, cfg)
	for _, want := range []string{"upgraded On-Ramp's tc programs", "upgraded On-Ramp's sockops program"} {
		if !slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, want) }) {
			t.Errorf("no note says %q", want)
		}
	}
	after := attachments()
	for what, b := range before {
		a := after[what]
		if a.prog == b.prog {
			t.Errorf("%s: still program %d after the upgrade", what, a.prog)
		}
		if a.link != b.link {
			t.Errorf("%s: link %d became link %d: the upgrade attached anew", what, b.link, a.link)
		}
	}
	t.Logf("programs before %v, after %v", before, after)
	maps, err := programMaps(after["egress"].prog)
	if err != nil {
		t.Fatal(err)
	}
	if maps["onramp_flows"] != flowsID {
		t.Errorf("the new egress program uses flow table %d, not the pinned one, %d", maps["onramp_flows"], flowsID)
	}
	newSockops, err := programMaps(after["sockops"].prog)
	if err != nil {
		t.Fatal(err)
	}
	if oldSockops["onramp_sk"] == 0 || newSockops["onramp_sk"] != oldSockops["onramp_sk"] {
		t.Errorf("the new sockops program uses socket storage %d, the old one %d", newSockops["onramp_sk"], oldSockops["onramp_sk"])
	}
	if !status(old).UpgradeAvailable || status(newer).UpgradeAvailable {
		t.Errorf("after the upgrade: the old build sees an upgrade: %v, the newer build: %v; want true, false",
			status(old).UpgradeAvailable, status(newer).UpgradeAvailable)
	}

	// The flow goes on, paused by the new programs on the old state.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if s := status(newer); s.Pauses > pausesBefore {
			t.Logf("%d pauses before the upgrade, %d since", pausesBefore, s.Pauses-pausesBefore)
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("no pause in 5 s after the upgrade (%d before): %+v", pausesBefore, status(newer))
			break
		}
	}
	if err := <-sent; err != nil {
		t.Fatalf("the flow across the upgrade: %v", err)
	}
	got, err := sink.WaitResults(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !got[0].OK {
		t.Errorf("the flow across the upgrade arrived corrupt or short: %+v", got[0])
	}
}

// TestOnRampUpgradeAcrossLayouts upgrades to a build whose flow table
// cannot take over the pinned one, as when a release changes
// struct onramp_flow: the running build's pinned onramp_flows is swapped
// for a table of another value size before another build (salt 9)
// enables On-Ramp on the same interfaces. The new build must say that it
// attached anew and that flows lost their state, and then run whole: its
// own flow table pinned, both sides attached, a flow stamped, paused and
// delivered intact; and the new build disables it, at the cleanup.
func TestOnRampUpgradeAcrossLayouts(t *testing.T) {
	testutil.RequireRoot(t)
	host := testutil.Host(t)
	p := testnet.NewPair(t)
	old := onramp.New(host)
	newer := onramp.New(host, onramp.WithBuildSalt(9))
	cfg := onramp.Config{Peers: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}, Threshold: time.Millisecond, MaxPause: 5 * time.Millisecond}
	ends := enableOnRampEnds(t, p, old, newer, cfg)
	var want *ebpf.MapInfo
	for _, e := range ends {
		// An older release's flow table: same name and key, another value.
		path := filepath.Join(e.pinDir, "onramp_flows")
		cur, err := ebpf.LoadPinnedMap(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		want, err = cur.Info()
		cur.Close()
		if err != nil {
			t.Fatal(err)
		}
		older, err := ebpf.NewMap(&ebpf.MapSpec{Name: "onramp_flows", Type: ebpf.LRUHash, KeySize: want.KeySize,
			ValueSize: want.ValueSize - 8, MaxEntries: want.MaxEntries})
		if err != nil {
			t.Fatal(err)
		}
		if err := cur.Unpin(); err != nil {
			older.Close()
			t.Fatal(err)
		}
		err = older.Pin(path)
		older.Close()
		if err != nil {
			t.Fatal(err)
		}
	}

	notes := upgradeOnRampEnds(t, ends, newer, cfg)
	if n := len(slices.DeleteFunc(slices.Clone(notes), func(n string) bool {
		return !strings.Contains(n, "attached anew, and its flows lost their state")
	})); n != len(ends) {
		t.Errorf("%d notes say that On-Ramp was attached anew and flows lost their state, want %d (one per interface)", n, len(ends))
	}

	var st onramp.Status
	if err := p.A.Do(func() error {
		sts, err := newer.Status()
		if err == nil && len(sts) != 1 {
			err = errors.New("not one interface")
		}
		if err == nil {
			st = sts[0]
		}
		return err
	}); err != nil {
		t.Fatalf("status after the upgrade: %v", err)
	}
	if st.UpgradeAvailable {
		t.Errorf("the new build sees an upgrade to make after attaching anew")
	}
	flows, err := ebpf.LoadPinnedMap(filepath.Join(st.PinDir, "onramp_flows"), nil)
	if err != nil {
		t.Fatal(err)
	}
	info, err := flows.Info()
	flows.Close()
	if err != nil {
		t.Fatal(err)
	}
	if info.ValueSize != want.ValueSize {
		t.Errorf("pinned flow table has %d-byte values after the upgrade, want this build's %d", info.ValueSize, want.ValueSize)
	}
	if err := p.A.Do(func() error {
		_, err := onRampAttachments(ends[0].iface, st.PinDir, filepath.Join(host.PinRoot(), "onramp", "sockops"))
		return err
	}); err != nil {
		t.Fatalf("after attaching anew: %v", err)
	}

	// The receiver's clock says every packet took 30 ms: the new build
	// must stamp, echo and pause the flow.
	if err := p.B.Do(func() error {
		return clocksync.PublishFixed(host, []netip.Addr{p.A.Addr}, 30*time.Millisecond, 1000, time.Hour)
	}); err != nil {
		t.Fatal(err)
	}
	sink := testnet.StartSink(t, p.B, p.B.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := testbed.SendFlow(ctx, p.A, sink.Addr, testbed.FlowConfig{CC: "cubic", For: 2 * time.Second, Seed: 9, Timeout: 50 * time.Second}); err != nil {
		t.Fatalf("a flow after the upgrade: %v", err)
	}
	got, err := sink.WaitResults(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !got[0].OK {
		t.Errorf("the flow after the upgrade arrived corrupt or short: %+v", got[0])
	}
	if err := p.A.Do(func() error {
		sts, err := newer.Status()
		if err == nil && (len(sts) != 1 || sts[0].Pauses == 0) {
			err = errors.New("no pause")
		}
		return err
	}); err != nil {
		t.Errorf("the new build on the sender after the flow: %v", err)
	}
}
