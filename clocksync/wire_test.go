package clocksync

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"net/netip"
	"reflect"
	"testing"
)

func wireSamples() []Message {
	return []Message{
		{Type: TypeProbe, Index: 0, Seq: 1},
		{Type: TypeProbe, Index: 1, Seq: math.MaxUint32},
		{Type: TypeReply, Index: 1, Seq: 7, Reply: Reply{ProbeRecv: [2]int64{1_700_000_000_000_000_000, 1_700_000_000_000_004_000}}},
		{Type: TypeReply, Index: 0, Seq: 8, Reply: Reply{
			ProbeRecv: [2]int64{-5, 6}, PrevSeq: 7, HasPrev: true, PrevSend: [2]int64{100, 200},
		}},
		{Type: TypeEdges, Seq: 3, Edges: []WireEdge{
			{Peer: netip.MustParseAddr("198.18.1.2"), Ref: 42, Offset: -5e6, Drift: 20e-6, Err: 150},
			{Peer: netip.MustParseAddr("fd00:18:1::2"), Ref: 43, Offset: 0.5, Drift: -1e-9, Err: 20},
		}},
		{Type: TypeEdges, Seq: 4},
	}
}

func TestWireRoundTrip(t *testing.T) {
	for _, m := range wireSamples() {
		b, err := m.Append(nil)
		if err != nil {
			t.Fatalf("Append(%+v): %v", m, err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("Decode(Append(%+v)): %v", m, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("round trip of %+v gave %+v", m, got)
		}
	}
}

func TestWireProbeIsSmall(t *testing.T) {
	b, err := Message{Type: TypeProbe}.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != headerLen {
		t.Errorf("a probe is %d bytes, want the %d-byte header alone", len(b), headerLen)
	}
}

func TestWireRejects(t *testing.T) {
	valid := func(m Message) []byte {
		b, err := m.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	reply := valid(wireSamples()[3])
	edges := valid(wireSamples()[4])
	mutate := func(b []byte, at int, v byte) []byte {
		c := bytes.Clone(b)
		c[at] = v
		return c
	}
	nanEdge := bytes.Clone(edges)
	copy(nanEdge[16+24:], []byte{0x7f, 0xf8, 0, 0, 0, 0, 0, 1})
	zeroErr := bytes.Clone(edges)
	copy(zeroErr[16+40:], make([]byte, 8))
	withFloat := func(at int, f float64) []byte {
		c := bytes.Clone(edges)
		binary.BigEndian.PutUint64(c[16+at:], math.Float64bits(f))
		return c
	}
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"short header", []byte("ccCK\x01\x01\x00")},
		{"bad magic", mutate(reply, 0, 'x')},
		{"bad version", mutate(reply, 4, 2)},
		{"unknown type", mutate(reply, 5, 9)},
		{"reserved byte", mutate(reply, 6, 1)},
		{"pair index 2", mutate(reply, 7, 2)},
		{"probe with a body", append(valid(wireSamples()[0]), 0)},
		{"short reply", reply[:len(reply)-1]},
		{"long reply", append(bytes.Clone(reply), 0)},
		{"reply flag 2", mutate(reply, 12+23, 2)},
		{"edges count too high", mutate(edges, 13, 3)},
		{"edges count beyond the maximum", mutate(edges, 13, MaxEdgesPerMessage+1)},
		{"edges truncated", edges[:len(edges)-1]},
		{"edges with index 1", mutate(edges, 7, 1)},
		{"edge offset NaN", nanEdge},
		{"edge error zero", zeroErr},
		// Weights of 1/error² that overflow or vanish would make the
		// mesh unsolvable for every peer.
		{"edge error tiny", withFloat(40, 1e-200)},
		{"edge error huge", withFloat(40, 1e200)},
		{"edge offset beyond 1000 s", withFloat(24, 2e12)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Decode(tc.b); !errors.Is(err, ErrMalformed) {
				t.Errorf("Decode(% x) = %v, want ErrMalformed", tc.b, err)
			}
		})
	}
}

func TestWireAppendRefuses(t *testing.T) {
	tooMany := Message{Type: TypeEdges, Edges: make([]WireEdge, MaxEdgesPerMessage+1)}
	for i := range tooMany.Edges {
		tooMany.Edges[i] = WireEdge{Peer: netip.MustParseAddr("198.18.0.1"), Err: 1}
	}
	for _, m := range []Message{
		{Type: 9},
		{Type: TypeProbe, Index: 2},
		tooMany,
		{Type: TypeEdges, Edges: []WireEdge{{Err: 1}}},
		{Type: TypeEdges, Edges: []WireEdge{{Peer: netip.MustParseAddr("198.18.0.1"), Err: 0}}},
		{Type: TypeEdges, Edges: []WireEdge{{Peer: netip.MustParseAddr("198.18.0.1"), Err: 1, Drift: 0.5}}},
	} {
		if b, err := m.Append(nil); err == nil {
			t.Errorf("Append(%+v) = % x, want an error", m, b)
		}
	}
}

// FuzzDecode checks that Decode never panics and that the format is
// canonical: whatever decodes encodes back to the same bytes.
func FuzzDecode(f *testing.F) {
	for _, m := range wireSamples() {
		b, err := m.Append(nil)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("ccCK"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		out, err := m.Append(nil)
		if err != nil {
			t.Fatalf("Decode(% x) = %+v, which does not encode: %v", b, m, err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("Decode(% x) encodes back as % x", b, out)
		}
	})
}
