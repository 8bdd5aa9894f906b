package telemetry

import (
	"bytes"
	"testing"
)

// fuzzOptionSeeds returns valid and nearly valid INT options.
func fuzzOptionSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	for _, o := range []Option{
		{Direction: Forward, Slots: 1},
		{Direction: Forward, Slots: 3, Hops: testHops()[:2]},
		{Direction: Echo, Slots: 4, Hops: testHops()},
		{Direction: Echo, Slots: 2, Hops: testHops()[2:3]},
	} {
		b, err := o.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	return append(seeds,
		[]byte{},
		[]byte{0xfd, 0x02},
		[]byte{0xfd, 0x0c, 0xcc, 0x10, 0, 0, 0, 0, 0, 0, 0, 1},
		[]byte{0xfd, 0x0c, 0xcc, 0x11, 0xd0, 0, 0, 0, 0, 0, 0, 0},
		[]byte{0xfd, 0x14, 0xcc, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0x20, 0, 0, 0, 0, 0, 0, 0},
	)
}

// FuzzParseOption checks that ParseOption never panics and that the codec is
// canonical: whatever parses marshals back to the same bytes.
func FuzzParseOption(f *testing.F) {
	for _, s := range fuzzOptionSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := ParseOption(b)
		if err != nil {
			return
		}
		if len(o.Hops) > o.Slots || o.Slots < 1 || o.Slots > MaxHops {
			t.Fatalf("ParseOption(% x) = %v: inconsistent slots", b, o)
		}
		out, err := o.Marshal()
		if err != nil {
			t.Fatalf("ParseOption(% x) = %v, which does not marshal: %v", b, o, err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("not canonical: % x parses to %v, which marshals to % x", b, o, out)
		}
	})
}

// FuzzFindOption checks that FindOption never panics, and that an option it
// finds is in the input byte for byte.
func FuzzFindOption(f *testing.F) {
	ts := []byte{0x01, 0x01, 0x08, 0x0a, 0, 0, 0, 1, 0, 0, 0, 2}
	for _, s := range fuzzOptionSeeds(f) {
		f.Add(s)
		f.Add(append(bytes.Clone(ts), s...))
	}
	f.Add([]byte{0xfd, 0x08, 0xf9, 0x89, 1, 2, 3, 4, 0xfd, 0x0c, 0xcc, 0x10, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 1, 0, 0xfd})
	f.Add([]byte{0x08, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		o, found, err := FindOption(b)
		if err != nil || !found {
			return
		}
		out, err := o.Marshal()
		if err != nil {
			t.Fatalf("FindOption(% x) found %v, which does not marshal: %v", b, o, err)
		}
		if !bytes.Contains(b, out) {
			t.Fatalf("FindOption(% x) found %v, whose bytes % x are not in the input", b, o, out)
		}
	})
}

// FuzzTCPOptionsFromPacket checks that TCPOptionsFromPacket never panics and
// returns an options area that a TCP header can hold.
func FuzzTCPOptionsFromPacket(f *testing.F) {
	opt, err := (Option{Direction: Forward, Slots: 3, Hops: testHops()[:1]}).Marshal()
	if err != nil {
		f.Fatal(err)
	}
	seg := tcpSegment(40000, 5201, FlagACK, opt, []byte("payload"))
	f.Add(ethernet(0x0800, ipv4Packet(seg)), uint8(Ethernet))
	f.Add(ethernet(0x86dd, ipv6Packet(seg), 0x8100), uint8(Ethernet))
	f.Add(ipv4Packet(seg), uint8(RawIP))
	f.Add(ipv6Packet(seg), uint8(RawIP))
	f.Add([]byte{0x45}, uint8(RawIP))
	f.Fuzz(func(t *testing.T, frame []byte, link uint8) {
		opts, info, err := TCPOptionsFromPacket(frame, LinkType(link))
		if err != nil {
			return
		}
		if len(opts) > 40 || len(opts)%4 != 0 {
			t.Fatalf("options area of %d bytes", len(opts))
		}
		if info.PayloadLen < 0 || info.PayloadLen > len(frame) {
			t.Fatalf("payload length %d in a %d-byte frame", info.PayloadLen, len(frame))
		}
		_, _, _ = FindOption(opts)
	})
}
