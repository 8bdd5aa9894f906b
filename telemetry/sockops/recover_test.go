package sockops

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/testutil"
)

// TestRecover lays out what killed commands leave of INT, and checks that
// Recover cleans it up and keeps what is whole: an INT directory that a
// disable cut short, holders of the INT store that hold nothing (a CC
// whose pins are gone, the sockops program once INT is disabled), and a
// store that a command pinned before it could record its holder.
func TestRecover(t *testing.T) {
	testutil.RequireRoot(t)
	host := testutil.Host(t)
	n := New(host)
	spec, err := loadIntSockops()
	if err != nil {
		t.Fatal(err)
	}
	storeSpec := spec.Maps[intSockopsMapIntStore]
	pinned := map[string]bool{"hpcc": true} // the CCs whose pins are there
	ccPinned := func(name string) bool { return pinned[name] }

	if _, err := n.Enable(Config{Peers: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}}); err != nil {
		t.Fatalf("enable: %v (fix: %s)", err, kernel.FixOf(err))
	}
	t.Cleanup(func() { n.Disable() })
	for _, cc := range []string{"powertcp", "hpcc"} {
		m, err := n.Store().Acquire(cc, storeSpec)
		if err != nil {
			t.Fatal(err)
		}
		m.Close()
	}
	removed, err := n.Recover(ccPinned)
	if err != nil || len(removed) != 1 {
		t.Errorf("Recover = %q, %v; want powertcp dropped from the holders", removed, err)
	}
	if holders, _ := n.Store().Holders(); !slices.Equal(holders, []string{"hpcc", "int"}) {
		t.Errorf("holders %v, want hpcc and int", holders)
	}

	// A disable killed between detaching and removing the pins.
	if err := os.Remove(filepath.Join(n.dir(), pinStats)); err != nil {
		t.Fatal(err)
	}
	removed, err = n.Recover(ccPinned)
	if err != nil || len(removed) != 1 {
		t.Errorf("Recover = %q, %v; want INT's pins removed", removed, err)
	}
	if st, err := n.Status(); err != nil || st.Enabled || kernel.Exists(n.dir()) {
		t.Errorf("after Recover INT is %+v, %v; want it disabled, with no pins", st, err)
	}
	if holders, _ := n.Store().Holders(); !slices.Equal(holders, []string{"hpcc"}) {
		t.Errorf("holders %v, want hpcc", holders)
	}

	// The last holder's pins are gone: the store goes.
	delete(pinned, "hpcc")
	if _, err := n.Recover(ccPinned); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(host.PinRoot()); len(left) != 0 {
		t.Errorf("pins left after the last holder: %v", names(left))
	}

	// A store pinned by a command killed before it recorded its holder.
	if _, err := n.Store().Acquire("powertcp", storeSpec); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(n.Store().Dir(), "holders")); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Recover(ccPinned); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(host.PinRoot()); len(left) != 0 {
		t.Errorf("a store with no holder was kept: %v", names(left))
	}
}

func names(entries []os.DirEntry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}
