package qdisc

import (
	"testing"
	"time"

	"github.com/ccload/ccload/internal/testutil"
)

// TestEDTStatsMatchObject checks that edtStatNames names every counter of
// the edt_stats map.
func TestEDTStatsMatchObject(t *testing.T) {
	spec, err := loadEdtDelay()
	if err != nil {
		t.Fatal(err)
	}
	ms := spec.Maps[edtDelayMapEdtStats]
	if ms == nil {
		t.Fatal("object has no edt_stats map")
	}
	if int(ms.MaxEntries) != len(edtStatNames) {
		t.Errorf("edt_stats has %d entries, edtStatNames %d", ms.MaxEntries, len(edtStatNames))
	}
}

// TestEDTDelayConfig loads the program and round-trips the delay through
// its map.
func TestEDTDelayConfig(t *testing.T) {
	testutil.RequireRoot(t)
	e := loadEDT(t)

	tests := []struct {
		delay time.Duration
		err   bool
	}{
		{delay: 0},
		{delay: 5 * time.Millisecond},
		{delay: 1},
		{delay: 10 * time.Second},
		{delay: -time.Millisecond, err: true},
	}
	for _, tt := range tests {
		err := e.SetDelay(tt.delay)
		if (err != nil) != tt.err {
			t.Fatalf("SetDelay(%v) = %v, want error %v", tt.delay, err, tt.err)
		}
		if tt.err {
			continue
		}
		got, err := e.Delay()
		if err != nil || got != tt.delay {
			t.Errorf("Delay() = %v, %v after SetDelay(%v)", got, err, tt.delay)
		}
	}
	if s, err := e.Stats(); err != nil || s != (EDTStats{}) {
		t.Errorf("Stats() of an unattached program = %+v, %v; want zeros", s, err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
