package testbed

import (
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// openNetns opens an extra handle on the named namespace, so that the
// kernel namespace outlives its name and its links can be listed after
// the topology is gone. The caller closes the handle.
func openNetns(tb testing.TB, name string) netns.NsHandle {
	tb.Helper()
	ns, err := netns.GetFromName(name)
	if err != nil {
		tb.Fatalf("open netns %s: %v", name, err)
	}
	return ns
}

// keepNetns is openNetns with the handle closed when the test ends.
func keepNetns(tb testing.TB, name string) netns.NsHandle {
	tb.Helper()
	ns := openNetns(tb, name)
	tb.Cleanup(func() { ns.Close() })
	return ns
}

// linkNames lists the links in the namespace behind ns.
func linkNames(tb testing.TB, ns netns.NsHandle) []string {
	tb.Helper()
	nl, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		tb.Fatalf("rtnetlink in kept netns: %v", err)
	}
	defer nl.Close()
	links, err := nl.LinkList()
	if err != nil {
		tb.Fatalf("list links in kept netns: %v", err)
	}
	var names []string
	for _, l := range links {
		names = append(names, l.Attrs().Name)
	}
	return names
}

// assertOnlyLoopback checks that the namespace behind ns, which has lost
// its name, holds no link but lo: Close deleted the veths rather than
// leaving them to die with the namespace.
func assertOnlyLoopback(tb testing.TB, ns netns.NsHandle) {
	tb.Helper()
	if names := linkNames(tb, ns); len(names) != 1 || names[0] != "lo" {
		tb.Errorf("links %v remain in a closed topology's netns, want only lo", names)
	}
}

// TestCleanupAfterPanic builds topologies in functions that defer Close
// and then panic, and checks that `ip netns list` shows none of their
// namespaces afterwards and that no link of theirs remains.
func TestCleanupAfterPanic(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name string
		// build builds a topology, defers its Close, passes every host
		// to record, and panics.
		build func(t *testing.T, record func(hosts ...*Host))
	}{
		{"dumbbell", func(t *testing.T, record func(hosts ...*Host)) {
			d, err := NewDumbbell(testContext(t), DumbbellConfig{Senders: 2, BottleneckRate: 1e9, Prefix: testPrefix("panic")})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			record(append(d.Senders, d.Router, d.Receiver)...)
			panic("dumbbell test panics")
		}},
		{"chain", func(t *testing.T, record func(hosts ...*Host)) {
			c, err := NewChain(testContext(t), ChainConfig{Senders: 2, CrossSenders: 1,
				Hop1: BottleneckConfig{Rate: 1e9}, Hop2: BottleneckConfig{Rate: 5e8}, Prefix: testPrefix("panic")})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			record(append(append(c.Senders, c.CrossSenders...), c.Router1, c.Router2, c.Receiver)...)
			panic("chain test panics")
		}},
	}
	baseline := initVeths(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var names []string
			var kept []netns.NsHandle
			record := func(hosts ...*Host) {
				for _, h := range hosts {
					names = append(names, h.Name)
					kept = append(kept, keepNetns(t, h.Name))
				}
			}
			var recovered any
			func() {
				defer func() { recovered = recover() }()
				tt.build(t, record)
			}()
			if recovered == nil {
				t.Fatal("the build function did not panic")
			}
			if len(names) == 0 {
				t.Fatal("the build function recorded no hosts")
			}
			assertTornDown(t, names, baseline)
			for _, ns := range kept {
				assertOnlyLoopback(t, ns)
			}
		})
	}
}

// TestCleanupAfterSubtest builds a Chain with the tests' helper, which
// registers Close with t.Cleanup, inside a subtest that returns early with
// the topology still open, and checks from the parent, once the subtest
// is over, that nothing of it is left. A failing or skipped subtest leaves
// through the same cleanup path.
func TestCleanupAfterSubtest(t *testing.T) {
	requireRoot(t)
	baseline := initVeths(t)
	var names []string
	var kept []netns.NsHandle
	t.Run("build and return", func(t *testing.T) {
		c := newTestChain(t, ChainConfig{Senders: 1, CrossSenders: 1, Hop1: BottleneckConfig{Rate: 1e9}, Hop2: BottleneckConfig{Rate: 1e9}})
		for _, h := range append([]*Host{c.Router1, c.Router2, c.Receiver}, append(c.Senders, c.CrossSenders...)...) {
			names = append(names, h.Name)
			// Closed by the parent, so that the handles outlive the
			// subtest's cleanup.
			ns := openNetns(t, h.Name)
			kept = append(kept, ns)
			if links := linkNames(t, ns); len(links) < 2 {
				t.Errorf("netns %s has links %v before teardown, want lo and veths", h.Name, links)
			}
		}
	})
	if len(names) == 0 {
		t.Fatal("the subtest recorded no hosts")
	}
	assertTornDown(t, names, baseline)
	for _, ns := range kept {
		defer ns.Close()
		assertOnlyLoopback(t, ns)
	}
}
