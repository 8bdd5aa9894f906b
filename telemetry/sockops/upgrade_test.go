package sockops

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
	"github.com/ccload/ccload/internal/sharedmaps"
	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/testbed"
)

// upgradeSalt stands for a newer build of the sockops object.
const upgradeSalt = 7

// linkState is what the pinned INT link runs.
type linkState struct {
	link link.ID
	prog ebpf.ProgramID
}

func readLink(t *testing.T, n *INT) linkState {
	t.Helper()
	lnk, err := link.LoadPinnedLink(filepath.Join(n.dir(), pinLink), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lnk.Close()
	info, err := lnk.Info()
	if err != nil {
		t.Fatal(err)
	}
	return linkState{link: info.ID, prog: info.Program}
}

// storeID returns the ID of the pinned INT store.
func storeID(t *testing.T, n *INT) ebpf.MapID {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(n.Store().PinPath(sharedmaps.INTStore), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	info, err := m.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	return id
}

// tagged reads the counter of tagged segments.
func tagged(t *testing.T, n *INT) uint64 {
	t.Helper()
	st, err := n.Status()
	if err != nil {
		t.Fatal(err)
	}
	return st.Stats["tagged"]
}

// TestUpgradeInPlace enables INT with the build as shipped, runs a TCP
// flow between a netns pair whose peer INT tags, and enables INT again
// from a newer build while the flow runs: the program changes, the link,
// the store and the counters stay (the counters go on from where they
// were), the flow ends with every byte intact, and no upgrade is left to
// do. Upgrade then swaps the first build back, as a rollback would.
func TestUpgradeInPlace(t *testing.T) {
	testutil.RequireRoot(t)
	host := testutil.Host(t)
	p := testnet.NewPair(t)
	cfg := Config{Peers: []netip.Prefix{netip.PrefixFrom(p.B.Addr, 24)}}
	old, next := New(host), New(host, WithBuildSalt(upgradeSalt))

	if _, err := old.Enable(cfg); err != nil {
		t.Fatalf("enable: %v (fix: %s)", err, kernel.FixOf(err))
	}
	t.Cleanup(func() { old.Disable() })
	if up, err := next.UpgradeAvailable(); err != nil || !up {
		t.Fatalf("UpgradeAvailable of the newer build = %v, %v; want true", up, err)
	}
	if st, err := old.Status(); err != nil || st.UpgradeAvailable || st.Object != old.object().String() {
		t.Fatalf("status of the build that enabled INT: %+v, %v; want its object and no upgrade", st, err)
	}
	before, store := readLink(t, old), storeID(t, old)

	sink := testnet.StartSink(t, p.B, p.B.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type flowEnd struct {
		res testbed.FlowResult
		err error
	}
	done := make(chan flowEnd, 1)
	go func() {
		res, err := testbed.SendFlow(ctx, p.A, sink.Addr, testbed.FlowConfig{For: 2 * time.Second, Timeout: 45 * time.Second, Seed: 15})
		done <- flowEnd{res, err}
	}()
	// Upgrade once the flow is tagged: bounded by the flow's own length.
	var t0 uint64
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if t0 = tagged(t, old); t0 > 0 {
			break
		}
	}
	if t0 == 0 {
		t.Fatal("INT tagged no segment of the flow")
	}

	st, err := next.Enable(cfg)
	if err != nil {
		t.Fatalf("enable from the newer build: %v (fix: %s)", err, kernel.FixOf(err))
	}
	t.Logf("enable from the newer build: %q", st.Notes)
	after := readLink(t, next)
	if after.link != before.link || after.prog == before.prog {
		t.Errorf("link %d ran program %d; after the upgrade link %d runs %d: want the same link, another program",
			before.link, before.prog, after.link, after.prog)
	}
	if id := storeID(t, next); id != store {
		t.Errorf("the INT store is map %d after the upgrade, was %d: it must keep its identity", id, store)
	}
	t1 := tagged(t, next)
	if t1 < t0 {
		t.Errorf("tagged went from %d to %d across the upgrade: the counters were reset", t0, t1)
	}
	if st.UpgradeAvailable || st.Object != next.object().String() {
		t.Errorf("status after the upgrade: object %s, upgrade available %v; want %s and none", st.Object, st.UpgradeAvailable, next.object())
	}
	if up, err := next.UpgradeAvailable(); err != nil || up {
		t.Errorf("UpgradeAvailable after the upgrade = %v, %v", up, err)
	}

	end := <-done
	if end.err != nil {
		t.Fatalf("the flow across the upgrade: %v", end.err)
	}
	results, err := sink.WaitResults(ctx, 1)
	if err != nil || len(results) != 1 || !results[0].OK || results[0].Bytes != end.res.Bytes {
		t.Fatalf("the sink got %+v (%v); the sender sent %d bytes", results, err, end.res.Bytes)
	}
	if t2 := tagged(t, next); t2 <= t1 {
		t.Errorf("tagged stayed at %d after the upgrade while the flow ran: the new program tags nothing", t2)
	}
	t.Logf("flow of %d bytes intact across the upgrade; tagged %d before, %d just after, %d at the end",
		end.res.Bytes, t0, t1, tagged(t, next))

	// Rolling back is an upgrade too.
	st, err = old.Upgrade()
	if err != nil {
		t.Fatal(err)
	}
	if back := readLink(t, old); back.link != before.link || back.prog == after.prog || st.UpgradeAvailable {
		t.Errorf("rollback: link %d runs %d (upgrade available: %v); want link %d, not program %d", back.link, back.prog, st.UpgradeAvailable, before.link, after.prog)
	}
	same := readLink(t, old)
	if _, err := old.Upgrade(); err != nil {
		t.Fatal(err)
	}
	if now := readLink(t, old); now != same {
		t.Errorf("Upgrade of the build that runs swapped program %d for %d", same.prog, now.prog)
	}
}

// TestUpgradeRecords checks the record of the object: an INT enabled by a
// ccload that recorded none counts as another build's, and Enable records
// it.
func TestUpgradeRecords(t *testing.T) {
	testutil.RequireRoot(t)
	host := testutil.Host(t)
	n := New(host)
	cfg := Config{Peers: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}}
	if _, err := n.Enable(cfg); err != nil {
		t.Fatalf("enable: %v (fix: %s)", err, kernel.FixOf(err))
	}
	t.Cleanup(func() { n.Disable() })
	path := filepath.Join(n.dir(), pinObject)
	if o, ok, err := pin.ReadObject(path); err != nil || !ok || o != n.object() {
		t.Fatalf("the record after enable: %s, %v, %v; want %s", o.Short(), ok, err, n.object().Short())
	}
	// A pin set from before records has none: unknown, so upgraded.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if st, err := n.Status(); err != nil || !st.UpgradeAvailable || st.Object != "" {
		t.Errorf("status without a record: %+v, %v; want an upgrade available", st, err)
	}
	if _, err := n.Recover(func(string) bool { return false }); err != nil || !kernel.Exists(n.dir()) {
		t.Fatalf("Recover took INT without a record for incomplete: %v", err)
	}
	before := readLink(t, n)
	st, err := n.Enable(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if after := readLink(t, n); after.link != before.link || after.prog == before.prog || st.UpgradeAvailable {
		t.Errorf("enable of INT without a record: link %d runs %d (was %d running %d), upgrade available %v",
			after.link, after.prog, before.link, before.prog, st.UpgradeAvailable)
	}
}
