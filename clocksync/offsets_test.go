package clocksync

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ccload/ccload/internal/testutil"
)

// TestClockMapReadByBPF writes entries into a clock map, as the agent
// does, and reads them back with clock_read under BPF_PROG_TEST_RUN: the
// offset extrapolated along the drift (also past the 60 s clamp), the
// error, expiry, IPv4 (v4-mapped) and IPv6 keys, and a deleted peer.
func TestClockMapReadByBPF(t *testing.T) {
	o := openTestMap(t)
	const ref = 1_800_000_000_000_000_000 // ns, CLOCK_TAI in 2027
	entries := []Entry{
		{Peer: netip.MustParseAddr("198.18.1.2"), OffsetNs: 5_000_123, Drift: 20e-6, ErrorNs: 150},
		{Peer: netip.MustParseAddr("198.18.2.2"), OffsetNs: -3_000_456, Drift: -15.5e-6, ErrorNs: 4000},
		{Peer: netip.MustParseAddr("fd00:19::2"), OffsetNs: -7, Drift: 0, ErrorNs: 20},
		{Peer: netip.MustParseAddr("fd00:18::9"), OffsetNs: 1 << 40, Drift: 499e-6, ErrorNs: 1 << 31},
	}
	for i := range entries {
		e := &entries[i]
		e.RefNs, e.UpdatedNs = ref, ref
		// Long enough for a read past the extrapolation clamp.
		e.ValidUntilNs = ref + 3*maxExtrapolation
		if err := o.Put(*e); err != nil {
			t.Fatalf("put %s: %v", e.Peer, err)
		}
	}
	if err := checkReader(t, o); err != nil {
		t.Fatalf("read the map from BPF: %v", err)
	}
	for _, e := range entries {
		got, ok, err := o.Get(e.Peer)
		if err != nil || !ok {
			t.Fatalf("get %s: %v, found %v", e.Peer, err, ok)
		}
		if got.OffsetNs != e.OffsetNs || got.ErrorNs != e.ErrorNs || got.RefNs != e.RefNs || driftQ32(got.Drift) != driftQ32(e.Drift) {
			t.Errorf("get %s = %+v, want %+v", e.Peer, got, e)
		}
	}
	if err := o.Delete(entries[0].Peer); err != nil {
		t.Fatalf("delete %s: %v", entries[0].Peer, err)
	}
	if _, ok, err := o.Get(entries[0].Peer); err != nil || ok {
		t.Errorf("get %s after delete: found %v, %v", entries[0].Peer, ok, err)
	}
	if err := checkReader(t, o); err != nil {
		t.Fatalf("read the map from BPF after a delete: %v", err)
	}
}

// openTestMap opens a clock map for an agent under a test's own pin root,
// closed at the end of the test.
func openTestMap(t *testing.T) *Offsets {
	t.Helper()
	testutil.RequireRoot(t)
	o, err := OpenForAgent(testutil.Host(t))
	if err != nil {
		t.Fatalf("open the clock map: %v", err)
	}
	t.Cleanup(func() { o.Close() })
	return o
}

// manualClock is a Clock that reads what the test sets.
type manualClock struct{ now int64 }

func (c *manualClock) Now() int64                   { return c.now }
func (c *manualClock) FromKernel(t time.Time) int64 { return t.UnixNano() }

// TestPublishKeepsEntryUntilItExpires has an agent publish a peer's offset,
// then windows that estimate nothing for it: the entry stays, unchanged,
// until its ValidUntilNs has passed, and is deleted by the first window
// after that. (An entry deleted at the first empty window took a peer's
// offset from the data path whenever its agent stopped one window before
// this one: TestClockCLI saw it.)
func TestPublishKeepsEntryUntilItExpires(t *testing.T) {
	o := openTestMap(t)
	const (
		start  = 1_800_000_000_000_000_000 // ns, CLOCK_TAI in 2027
		window = int64(300 * time.Millisecond)
	)
	clock := &manualClock{now: start}
	a := &Agent{cfg: Config{Offsets: o, Clock: clock, Logf: t.Logf}, published: map[netip.Addr]bool{}}
	peer := netip.MustParseAddr("198.18.7.2")
	e := Entry{Peer: peer, OffsetNs: 1234, RefNs: start, ErrorNs: 50, UpdatedNs: start, ValidUntilNs: start + uint64(validWindows*window)}
	a.publish([]Entry{e})

	for w := int64(1); w <= validWindows+1; w++ {
		clock.now = start + w*window
		a.publish(nil)
		got, ok, err := o.Get(peer)
		if err != nil {
			t.Fatal(err)
		}
		expired := uint64(clock.now) >= e.ValidUntilNs
		switch {
		case expired && ok:
			t.Errorf("window %d, past the entry's expiry: still published: %+v", w, got)
		case !expired && !ok:
			t.Errorf("window %d, before the entry's expiry: deleted", w)
		case !expired && got.OffsetNs != e.OffsetNs:
			t.Errorf("window %d: entry changed to %+v", w, got)
		}
	}
}
