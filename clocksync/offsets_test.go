package clocksync

import (
	"net/netip"
	"testing"

	"github.com/ccload/ccload/internal/testutil"
)

// TestClockMapReadByBPF writes entries into a clock map, as the agent
// does, and reads them back with clock_read under BPF_PROG_TEST_RUN: the
// offset extrapolated along the drift (also past the 60 s clamp), the
// error, expiry, IPv4 (v4-mapped) and IPv6 keys, and a deleted peer.
func TestClockMapReadByBPF(t *testing.T) {
	testutil.RequireRoot(t)
	pins := testutil.Host(t)
	o, err := OpenForAgent(pins)
	if err != nil {
		t.Fatalf("open the clock map: %v", err)
	}
	defer o.Close()
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
