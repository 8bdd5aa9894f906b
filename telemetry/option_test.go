package telemetry

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// testHops are valid hop records, distinct in every field.
func testHops() []Hop {
	return []Hop{
		{RateBps: 100e9, Timestamp: 1_000_000, TxBytes: 100_000, Qlen: 100},
		{RateBps: 25e9, Timestamp: 0xFFFFF0, TxBytes: 1, Qlen: MaxQlen},
		{RateBps: 800e9, Timestamp: 0, TxBytes: MaxTxBytes, Qlen: 0},
		{RateBps: 100e6, Timestamp: MaxTimestamp, TxBytes: 0, Qlen: 1},
	}
}

func TestOptionRoundTrip(t *testing.T) {
	for _, dir := range []Direction{Forward, Echo} {
		for slots := 1; slots <= MaxHops; slots++ {
			for n := 0; n <= slots; n++ {
				o := Option{Direction: dir, Slots: slots, Hops: testHops()[:n]}
				t.Run(fmt.Sprintf("%s/%d-of-%d", dir, n, slots), func(t *testing.T) {
					b, err := o.Marshal()
					if err != nil {
						t.Fatal(err)
					}
					if len(b) != 4+8*slots || int(b[1]) != len(b) || len(b) != o.Len() {
						t.Fatalf("marshalled %d bytes with length byte %d, want %d", len(b), b[1], 4+8*slots)
					}
					got, err := ParseOption(b)
					if err != nil {
						t.Fatal(err)
					}
					if got.Direction != o.Direction || got.Slots != o.Slots || !reflect.DeepEqual(nonNil(got.Hops), nonNil(o.Hops)) {
						t.Fatalf("round trip: got %v, want %v", got, o)
					}
					if got.Full() != (n == slots) {
						t.Fatalf("Full() = %v with %d of %d slots filled", got.Full(), n, slots)
					}
				})
			}
		}
	}
}

// nonNil returns an empty slice for nil, so that DeepEqual treats them alike.
func nonNil(h []Hop) []Hop {
	if h == nil {
		return []Hop{}
	}
	return h
}

func TestOptionMarshalVectors(t *testing.T) {
	// Each hop word is its fields' hex digits side by side, because every
	// field is a whole number of nibbles: rate code (1 hex digit), timestamp
	// (6), txBytes (5), qlen (4). The words are big endian on the wire.
	tests := []struct {
		name string
		opt  Option
		want []byte
	}{
		{
			// docs/int-option.md, "Worked example". Three slots: length
			// 4+8*3 = 28 = 0x1c.
			// Hop 1: code 9 (100 Gbit/s), ts 1,000,000 ns = 0x0f4240,
			//        txBytes 100,000 units = 0x186a0, qlen 100 units = 0x0064
			//        -> 0x9_0f4240_186a0_0064
			// Hop 2: code 6 (25 Gbit/s), ts 0xfffff0, txBytes 0x00001,
			//        qlen 0xffff (saturated) -> 0x6_fffff0_00001_ffff
			// Slot 3 is empty: all zero.
			name: "worked example",
			opt:  Option{Direction: Forward, Slots: 3, Hops: testHops()[:2]},
			want: []byte{
				0xfd, 0x1c, 0xcc, 0x10,
				0x90, 0xf4, 0x24, 0x01, 0x86, 0xa0, 0x00, 0x64,
				0x6f, 0xff, 0xff, 0x00, 0x00, 0x01, 0xff, 0xff,
				0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
			},
		},
		{
			// One slot, full: length 12 = 0x0c, ExID 0xcc11.
			// Hop: code 12 = 0xc (800 Gbit/s), ts 0, txBytes 0xfffff (the
			// largest), qlen 0 -> 0xc_000000_fffff_0000.
			name: "echo one slot",
			opt:  Option{Direction: Echo, Slots: 1, Hops: testHops()[2:3]},
			want: []byte{
				0xfd, 0x0c, 0xcc, 0x11,
				0xc0, 0x00, 0x00, 0x0f, 0xff, 0xff, 0x00, 0x00,
			},
		},
		{
			// Four empty slots, as a sender emits it: length 36 = 0x24.
			name: "forward empty four slots",
			opt:  Option{Direction: Forward, Slots: 4},
			want: append([]byte{0xfd, 0x24, 0xcc, 0x10}, make([]byte, 32)...),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.opt.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, tt.want) {
				t.Fatalf("Marshal() =\n% x\nwant\n% x", b, tt.want)
			}
		})
	}
}

func TestOptionMarshalInvalid(t *testing.T) {
	tests := []struct {
		name string
		opt  Option
	}{
		{"no direction", Option{Slots: 1}},
		{"bad direction", Option{Direction: 3, Slots: 1}},
		{"zero slots", Option{Direction: Forward}},
		{"negative slots", Option{Direction: Forward, Slots: -1}},
		{"five slots", Option{Direction: Forward, Slots: 5}},
		{"more hops than slots", Option{Direction: Echo, Slots: 1, Hops: testHops()[:2]}},
		{"unsupported rate", Option{Direction: Forward, Slots: 2, Hops: []Hop{{RateBps: 3e9}}}},
		{"empty hop", Option{Direction: Forward, Slots: 2, Hops: []Hop{{}}}},
		{"timestamp too wide", Option{Direction: Forward, Slots: 1, Hops: []Hop{{RateBps: 1e9, Timestamp: 1 << 24}}}},
		{"txBytes too wide", Option{Direction: Forward, Slots: 1, Hops: []Hop{{RateBps: 1e9, TxBytes: 1 << 20}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if b, err := tt.opt.Marshal(); err == nil {
				t.Fatalf("Marshal() = % x, want an error", b)
			}
		})
	}
}

// withWord returns b with the 64-bit word of slot i set to w.
func withWord(b []byte, i int, w uint64) []byte {
	out := bytes.Clone(b)
	for k := range 8 {
		out[4+8*i+k] = byte(w >> (56 - 8*k))
	}
	return out
}

func TestParseOptionInvalid(t *testing.T) {
	// A valid FORWARD option with 3 slots, the first one filled.
	valid := []byte{
		0xfd, 0x1c, 0xcc, 0x10,
		0x90, 0xf4, 0x24, 0x01, 0x86, 0xa0, 0x00, 0x64,
		0, 0, 0, 0, 0, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 0,
	}
	if _, err := ParseOption(valid); err != nil {
		t.Fatalf("the base case does not parse: %v", err)
	}
	tests := []struct {
		name string
		in   []byte
		want error // ErrNotINT or ErrMalformed
	}{
		{"nil", nil, ErrMalformed},
		{"one byte", []byte{0xfd}, ErrMalformed},
		{"kind 254", append([]byte{0xfe}, valid[1:]...), ErrNotINT},
		{"kind NOP", append([]byte{0x01}, valid[1:]...), ErrNotINT},
		{"foreign ExID", append([]byte{0xfd, 0x1c, 0xf9, 0x89}, valid[4:]...), ErrNotINT},
		{"next ExID", append([]byte{0xfd, 0x1c, 0xcc, 0x12}, valid[4:]...), ErrNotINT},
		{"kind 253 without ExID", []byte{0xfd, 0x02}, ErrNotINT},
		{"kind 253 with half an ExID", []byte{0xfd, 0x03, 0xcc}, ErrNotINT},
		{"length byte too large", append([]byte{0xfd, 0x24}, valid[2:]...), ErrMalformed},
		{"length byte too small", append([]byte{0xfd, 0x14}, valid[2:]...), ErrMalformed},
		{"length byte below 2", []byte{0xfd, 0x00, 0xcc, 0x10}, ErrMalformed},
		{"no slots", []byte{0xfd, 0x04, 0xcc, 0x10}, ErrMalformed},
		{"partial slot", append([]byte{0xfd, 0x0d, 0xcc, 0x10}, make([]byte, 9)...), ErrMalformed},
		{"short slot", append([]byte{0xfd, 0x0b, 0xcc, 0x10}, make([]byte, 7)...), ErrMalformed},
		{"five slots", append([]byte{0xfd, 0x2c, 0xcc, 0x10}, make([]byte, 40)...), ErrMalformed},
		{"reserved code 13", withWord(valid, 0, 0xD_000000_00000_0000), ErrMalformed},
		{"reserved code 14", withWord(valid, 1, 0xE_000000_00000_0000), ErrMalformed},
		{"reserved code 15", withWord(valid, 0, 0xF_FFFFFF_FFFFF_FFFF), ErrMalformed},
		{"filled after empty", withWord(valid, 2, 0x2_000000_00000_0000), ErrMalformed},
		{"filled after leading empty", withWord(withWord(valid, 0, 0), 1, 0x2_000000_00000_0000), ErrMalformed},
		{"nonzero empty slot first", withWord(valid, 0, 0x0_000000_00000_0001), ErrMalformed},
		{"nonzero empty slot last", withWord(valid, 2, 0x0_800000_00000_0000), ErrMalformed},
		{"nonzero empty slot low bit", withWord(valid, 1, 1), ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := ParseOption(tt.in)
			if err == nil {
				t.Fatalf("ParseOption(% x) = %v, want an error", tt.in, o)
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("ParseOption(% x): %v, want one wrapping %v", tt.in, err, tt.want)
			}
		})
	}
}

func TestOptionAddHop(t *testing.T) {
	hops := testHops()
	o := Option{Direction: Forward, Slots: 2}
	for i, want := range []bool{true, true, false, false} {
		if got := o.AddHop(hops[i]); got != want {
			t.Fatalf("AddHop #%d = %v, want %v", i, got, want)
		}
	}
	if !o.Full() || len(o.Hops) != 2 || o.Hops[0] != hops[0] || o.Hops[1] != hops[1] {
		t.Fatalf("after 4 hops on 2 slots: %v, want the first two hops", o)
	}

	// AddHop must not write into the caller's backing array.
	backing := make([]Hop, 1, 4)
	backing[0] = hops[0]
	o = Option{Direction: Forward, Slots: 3, Hops: backing}
	o.AddHop(hops[1])
	if backing[:2][1] != (Hop{}) {
		t.Fatalf("AddHop wrote into the caller's array: %v", backing[:2])
	}
}

func TestOptionFull(t *testing.T) {
	tests := []struct {
		opt  Option
		want bool
	}{
		{Option{}, false},
		{Option{Slots: 1}, false},
		{Option{Slots: 1, Hops: make([]Hop, 1)}, true},
		{Option{Slots: 3, Hops: make([]Hop, 2)}, false},
		{Option{Slots: 4, Hops: make([]Hop, 4)}, true},
	}
	for _, tt := range tests {
		if got := tt.opt.Full(); got != tt.want {
			t.Errorf("%d of %d slots: Full() = %v, want %v", len(tt.opt.Hops), tt.opt.Slots, got, tt.want)
		}
	}
}

func TestOptionString(t *testing.T) {
	o := Option{Direction: Echo, Slots: 2, Hops: []Hop{{RateBps: 10e9, Timestamp: 1000, TxBytes: 5, Qlen: 3}}}
	want := "echo 1/2 [10Gbit/s ts=1000ns tx=5x128B q=3x80B]"
	if got := o.String(); got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	if got := Direction(9).String(); got != "Direction(9)" {
		t.Fatalf("Direction(9).String() = %q", got)
	}
}
