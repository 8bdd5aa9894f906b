// Package testnet builds testbed topologies for tests and tears them down
// when the test ends, failing the test if the teardown fails. It is apart
// from testutil because testbed's own tests use testutil, and this package
// uses testbed.
package testnet

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/testbed"
)

// setupTimeout bounds building a topology.
const setupTimeout = 30 * time.Second

// NewPair builds a netns pair (testbed.NewPair) that is torn down at the
// end of the test. Call it before anything that lives inside the pair, so
// that t.Cleanup (last in, first out) removes that first. It skips without
// root.
func NewPair(t testing.TB) *testbed.Pair {
	t.Helper()
	testutil.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	p, err := testbed.NewPair(ctx, "")
	if err != nil {
		t.Fatalf("build netns pair: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("tear down netns pair: %v", err)
		}
	})
	return p
}

// NewDumbbell builds a dumbbell (testbed.NewDumbbell) that is torn down at
// the end of the test. It skips without root, and, naming the vmtests,
// when the kernel lacks the qdisc cfg asks for.
func NewDumbbell(t testing.TB, cfg testbed.DumbbellConfig) *testbed.Dumbbell {
	t.Helper()
	testutil.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	d, err := testbed.NewDumbbell(ctx, cfg)
	if errors.Is(err, testbed.ErrQdiscNotSupported) {
		t.Logf("build dumbbell: %v", err)
		testutil.SkipKernelLacks(t, "fq_codel (an ECN-marking qdisc)")
	}
	if err != nil {
		t.Fatalf("build dumbbell: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("tear down dumbbell: %v", err)
		}
	})
	return d
}

// StartSink starts a testbed sink on h at addr (port 0: any), closed at the
// end of the test.
func StartSink(t testing.TB, h *testbed.Host, addr netip.Addr) *testbed.Sink {
	t.Helper()
	s, err := testbed.StartSink(h, netip.AddrPortFrom(addr, 0))
	if err != nil {
		t.Fatalf("start sink on %s: %v", h.Name, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// RootQdisc names the root qdisc of iface in h's network namespace, as
// "kind handle" (for example "htb 1:"), or "" when it has none.
func RootQdisc(t testing.TB, h *testbed.Host, iface string) string {
	t.Helper()
	var out string
	err := h.Do(func() error {
		l, err := netlink.LinkByName(iface)
		if err != nil {
			return err
		}
		qs, err := netlink.QdiscList(l)
		if err != nil {
			return err
		}
		for _, q := range qs {
			if q.Attrs().Parent == netlink.HANDLE_ROOT {
				out = q.Type() + " " + netlink.HandleStr(q.Attrs().Handle)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read the root qdisc of %s in %s: %v", iface, h.Name, err)
	}
	return out
}
