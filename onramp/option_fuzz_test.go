package onramp

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// fuzzOptionSeeds returns valid and nearly valid On-Ramp options.
func fuzzOptionSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	for _, o := range testOptions() {
		b, err := o.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	return append(seeds,
		[]byte{},
		[]byte{0xfd},
		[]byte{0xfd, 0x02},
		[]byte{0xfd, 0x04, 0xcc, 0x20},
		[]byte{0xfd, 0x0c, 0xcc, 0x21, 0, 0, 0, 0, 0, 0, 0, 0},
		[]byte{0xfd, 0x10, 0xcc, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		[]byte{0xfd, 0x0c, 0xcc, 0x2f, 0, 0, 0, 0, 0, 0, 0, 1},
		[]byte{0xfd, 0x14, 0xcc, 0x2f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		[]byte{0xfd, 0x0c, 0xcc, 0x10, 0, 0, 0, 0, 0, 0, 0, 0},
		[]byte{0xfd, 0x0b, 0xcc, 0x20, 0, 0, 0, 0, 0, 0, 0, 0},
	)
}

// FuzzParseOption checks that ParseOption never panics and that the codec is
// canonical: whatever parses marshals back to the same bytes, and parses
// to an Option whose other parts are zero.
func FuzzParseOption(f *testing.F) {
	for _, s := range fuzzOptionSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := ParseOption(b)
		if err != nil {
			if o != (Option{}) {
				t.Fatalf("ParseOption(% x) failed (%v) but returned %+v", b, err, o)
			}
			return
		}
		if o.Len() != len(b) {
			t.Fatalf("ParseOption(% x) = %v, whose Len() is %d", b, o, o.Len())
		}
		out, err := o.Marshal()
		if err != nil {
			t.Fatalf("ParseOption(% x) = %+v, which does not marshal: %v", b, o, err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("not canonical: % x parses to %v, which marshals to % x", b, o, out)
		}
	})
}

// refTLV is an On-Ramp option's place in an options area, as refWalk finds
// it.
type refTLV struct{ off, n int }

// refWalk is a second, plain reading of the rules of a TCP options area:
// it lists the kind-253 TLVs whose ExID is one of On-Ramp's, in order, up
// to an end-of-list byte, and reports whether the TLV walk broke before it
// got there (a length byte missing, below 2 or past the end). It does not
// parse the options.
func refWalk(b []byte) (ours []refTLV, broken bool) {
	off := 0
	for off < len(b) && b[off] != 0 {
		if b[off] == 1 {
			off++
			continue
		}
		if len(b)-off < 2 || b[off+1] < 2 || int(b[off+1]) > len(b)-off {
			return ours, true
		}
		n := int(b[off+1])
		if b[off] == 253 && n >= 4 {
			switch binary.BigEndian.Uint16(b[off+2 : off+4]) {
			case 0xCC20, 0xCC21, 0xCC2F:
				ours = append(ours, refTLV{off, n})
			}
		}
		off += n
	}
	return ours, false
}

// FuzzFindOption checks that FindOption and FindOptions never panic and
// agree with refWalk: FindOption returns the first On-Ramp option, which
// re-marshals to the bytes at its position, or the error of a broken walk
// or option before it; FindOptions returns them all, or an error if the
// walk or any of them is broken.
func FuzzFindOption(f *testing.F) {
	ts := []byte{0x01, 0x01, 0x08, 0x0a, 0, 0, 0, 1, 0, 0, 0, 2}
	intFwd := []byte{0xfd, 0x0c, 0xcc, 0x10, 0, 0, 0, 0, 0, 0, 0, 0}
	for _, s := range fuzzOptionSeeds(f) {
		f.Add(s)
		f.Add(cat(ts, s))
		f.Add(cat(ts, s, intFwd))
		f.Add(cat(intFwd, s, []byte{0, 0, 0, 0}))
	}
	f.Add(cat([]byte{0xfd, 0x08, 0xf9, 0x89, 1, 2, 3, 4}, workedStampWire))
	f.Add(cat(workedEchoWire, workedStampWire))
	f.Add(cat(workedStampWire, []byte{8, 0xff}))
	f.Add([]byte{1, 1, 0, 0xfd})
	f.Add([]byte{0x08, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		ours, broken := refWalk(b)

		o, found, err := FindOption(b)
		switch {
		case len(ours) > 0:
			first := b[ours[0].off : ours[0].off+ours[0].n]
			want, perr := ParseOption(first)
			if perr != nil {
				if err == nil {
					t.Fatalf("FindOption(% x) = %v, %v; the option at offset %d does not parse: %v", b, o, found, ours[0].off, perr)
				}
				break
			}
			if err != nil || !found || o != want {
				t.Fatalf("FindOption(% x) = %v, %v, %v; want %v at offset %d", b, o, found, err, want, ours[0].off)
			}
			out, merr := o.Marshal()
			if merr != nil {
				t.Fatalf("FindOption(% x) found %+v, which does not marshal: %v", b, o, merr)
			}
			if !bytes.Equal(out, first) {
				t.Fatalf("FindOption(% x) found %v, which marshals to % x, not to % x at offset %d", b, o, out, first, ours[0].off)
			}
		case broken:
			if err == nil {
				t.Fatalf("FindOption(% x) = %v, %v; want an error for the broken walk", b, o, found)
			}
		default:
			if err != nil || found {
				t.Fatalf("FindOption(% x) = %v, %v, %v; want nothing", b, o, found, err)
			}
		}
		if err != nil && (found || o != (Option{})) {
			t.Fatalf("FindOption(% x) returns %v, found %v, with error %v", b, o, found, err)
		}

		opts, err := FindOptions(b)
		wantErr := broken
		for _, r := range ours {
			if _, perr := ParseOption(b[r.off : r.off+r.n]); perr != nil {
				wantErr = true
			}
		}
		if wantErr {
			if err == nil || opts != nil {
				t.Fatalf("FindOptions(% x) = %v, %v; want an error", b, opts, err)
			}
			return
		}
		if err != nil || len(opts) != len(ours) {
			t.Fatalf("FindOptions(% x) = %v, %v; want %d options", b, opts, err, len(ours))
		}
		for i, r := range ours {
			out, merr := opts[i].Marshal()
			if merr != nil || !bytes.Equal(out, b[r.off:r.off+r.n]) {
				t.Fatalf("FindOptions(% x)[%d] = %v marshals to % x (%v), not to % x at offset %d", b, i, opts[i], out, merr, b[r.off:r.off+r.n], r.off)
			}
		}
	})
}
