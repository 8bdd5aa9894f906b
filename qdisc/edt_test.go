package qdisc

import (
	"reflect"
	"testing"
	"time"

	"github.com/cilium/ebpf/btf"

	"github.com/ccload/ccload/internal/testutil"
)

// TestEDTConfigMatchesBTF checks that edtConfig, which the Go side writes
// into the edt_config map, has the layout of struct edt_config in the
// object.
func TestEDTConfigMatchesBTF(t *testing.T) {
	spec, err := loadEdtDelay()
	if err != nil {
		t.Fatal(err)
	}
	ms := spec.Maps["edt_config"]
	if ms == nil {
		t.Fatal("object has no edt_config map")
	}
	st, ok := btf.As[*btf.Struct](ms.Value)
	if !ok || st.Name != "edt_config" {
		t.Fatalf("edt_config map value is %v, want struct edt_config", ms.Value)
	}

	// Go field name for each C member, in order.
	fields := []struct{ c, goName string }{
		{"delay_ns", "DelayNs"},
	}
	goType := reflect.TypeFor[edtConfig]()
	if len(st.Members) != len(fields) || goType.NumField() != len(fields) {
		t.Fatalf("struct edt_config has %d members, edtConfig %d fields, the table %d",
			len(st.Members), goType.NumField(), len(fields))
	}
	if uintptr(st.Size) != goType.Size() || ms.ValueSize != uint32(goType.Size()) {
		t.Errorf("sizes: BTF %d, map value %d, Go %d", st.Size, ms.ValueSize, goType.Size())
	}
	for i, f := range fields {
		m, gf := st.Members[i], goType.Field(i)
		size, err := btf.Sizeof(m.Type)
		if err != nil {
			t.Fatal(err)
		}
		if m.Name != f.c || gf.Name != f.goName {
			t.Errorf("member %d: C %q, Go %q; want %q, %q", i, m.Name, gf.Name, f.c, f.goName)
		}
		if uintptr(m.Offset.Bytes()) != gf.Offset || uintptr(size) != gf.Type.Size() {
			t.Errorf("%s: C offset %d size %d, Go offset %d size %d",
				f.c, m.Offset.Bytes(), size, gf.Offset, gf.Type.Size())
		}
	}
}

// TestEDTStatsMatchObject checks that edtStatNames names every counter of
// the edt_stats map.
func TestEDTStatsMatchObject(t *testing.T) {
	spec, err := loadEdtDelay()
	if err != nil {
		t.Fatal(err)
	}
	ms := spec.Maps["edt_stats"]
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
