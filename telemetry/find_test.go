package telemetry

import (
	"errors"
	"testing"
)

func TestFindOption(t *testing.T) {
	// Forward, 1 slot, empty.
	fwd := []byte{0xfd, 0x0c, 0xcc, 0x10, 0, 0, 0, 0, 0, 0, 0, 0}
	// Echo, 1 slot: code 5 (10 Gbit/s), ts 0x000001, txBytes 0x00002,
	// qlen 0x0003 -> 0x5_000001_00002_0003.
	echo := []byte{0xfd, 0x0c, 0xcc, 0x11, 0x50, 0x00, 0x00, 0x10, 0x00, 0x02, 0x00, 0x03}
	echoHop := Hop{RateBps: 10e9, Timestamp: 1, TxBytes: 2, Qlen: 3}
	// NOP, NOP, timestamps (kind 8, length 10, TSval, TSecr), as Linux
	// writes them.
	ts := []byte{0x01, 0x01, 0x08, 0x0a, 0, 0, 0, 1, 0, 0, 0, 2}
	// Kind 253 with the TCP Fast Open ExID 0xf989 and a cookie.
	foreign := []byte{0xfd, 0x08, 0xf9, 0x89, 1, 2, 3, 4}
	// NOP, NOP, SACK (kind 5) with one block.
	sack := []byte{0x01, 0x01, 0x05, 0x0a, 0, 0, 0, 1, 0, 0, 0, 2}

	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	tests := []struct {
		name  string
		in    []byte
		found bool
		dir   Direction
		hops  int
	}{
		{"nil", nil, false, 0, 0},
		{"only NOPs", []byte{1, 1, 1, 1}, false, 0, 0},
		{"only EOL", []byte{0, 0, 0, 0}, false, 0, 0},
		{"alone", fwd, true, Forward, 0},
		{"after timestamps", cat(ts, fwd), true, Forward, 0},
		{"echo after timestamps", cat(ts, echo), true, Echo, 1},
		{"NOP padding before", cat([]byte{1, 1, 1, 1}, echo), true, Echo, 1},
		{"other options after", cat(echo, sack), true, Echo, 1},
		{"EOL padding after", cat(ts, fwd, []byte{0, 0, 0, 0}), true, Forward, 0},
		{"foreign ExID skipped", cat(foreign, echo), true, Echo, 1},
		{"only a foreign ExID", cat(ts, foreign), false, 0, 0},
		{"kind 253 without ExID skipped", cat([]byte{0xfd, 0x02, 1, 1}, fwd), true, Forward, 0},
		{"first of two", cat(echo, fwd), true, Echo, 1},
		{"hidden after EOL", cat(ts, []byte{0}, fwd), false, 0, 0},
		// Bytes after EOL are padding, even if they would not walk.
		{"garbage after EOL", cat([]byte{0}, []byte{8, 0xff}), false, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, found, err := FindOption(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if found != tt.found {
				t.Fatalf("found = %v, want %v", found, tt.found)
			}
			if !found {
				return
			}
			if o.Direction != tt.dir || o.Slots != 1 || len(o.Hops) != tt.hops {
				t.Fatalf("found %v, want %s with %d hops in 1 slot", o, tt.dir, tt.hops)
			}
			if tt.hops == 1 && o.Hops[0] != echoHop {
				t.Fatalf("hop = %+v, want %+v", o.Hops[0], echoHop)
			}
		})
	}
}

func TestFindOptionMalformed(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
	}{
		{"length 0", []byte{0x08, 0x00, 0, 0}},
		{"length 1", []byte{0x01, 0x05, 0x01}},
		{"no length byte", []byte{0x01, 0x01, 0x08}},
		{"length past the end", []byte{0x08, 0x0a, 0, 0, 0, 1}},
		{"our option past the end", []byte{0xfd, 0x0c, 0xcc, 0x10, 0, 0, 0, 0}},
		{"bad walk before ours", []byte{0x02, 0x01, 0xfd, 0x0c, 0xcc, 0x10, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"our ExID, bad slot count", []byte{0xfd, 0x06, 0xcc, 0x10, 0, 0}},
		{"our ExID, reserved rate", []byte{0xfd, 0x0c, 0xcc, 0x11, 0xd0, 0, 0, 0, 0, 0, 0, 0}},
		{"our ExID, nonzero empty slot", []byte{0xfd, 0x0c, 0xcc, 0x10, 0, 0, 0, 0, 0, 0, 0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, found, err := FindOption(tt.in)
			if err == nil {
				t.Fatalf("FindOption(% x) = %v, %v, want an error", tt.in, o, found)
			}
			if found {
				t.Fatalf("FindOption(% x) reports found with error %v", tt.in, err)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("FindOption(% x): %v does not wrap ErrMalformed", tt.in, err)
			}
		})
	}
}
