package telemetry

import (
	"bytes"
	"errors"
	"testing"
)

// tcpSegment returns a TCP header with the given options (a multiple of 4
// bytes) followed by payload. Checksums are left at zero: the parser does not
// check them.
func tcpSegment(src, dst uint16, flags byte, opts, payload []byte) []byte {
	hl := 20 + len(opts)
	b := []byte{
		byte(src >> 8), byte(src), byte(dst >> 8), byte(dst),
		0, 0, 0, 1, // sequence number
		0, 0, 0, 2, // acknowledgment number
		byte(hl/4) << 4, flags,
		0xff, 0xff, // window
		0, 0, // checksum
		0, 0, // urgent pointer
	}
	b = append(b, opts...)
	return append(b, payload...)
}

// ipv4Packet returns an IPv4 header without options around seg.
func ipv4Packet(seg []byte) []byte {
	total := 20 + len(seg)
	b := []byte{
		0x45, 0, // version 4, IHL 5; DSCP/ECN
		byte(total >> 8), byte(total),
		0, 0, 0x40, 0, // ID; flags DF, fragment offset 0
		64, 6, 0, 0, // TTL, protocol TCP, checksum
		10, 0, 0, 1, // source
		10, 0, 0, 2, // destination
	}
	return append(b, seg...)
}

// ipv6Packet returns an IPv6 header without extension headers around seg.
func ipv6Packet(seg []byte) []byte {
	b := []byte{
		0x60, 0, 0, 0, // version 6, traffic class, flow label
		byte(len(seg) >> 8), byte(len(seg)),
		6, 64, // next header TCP, hop limit
	}
	b = append(b, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1) // fd00::1
	b = append(b, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2) // fd00::2
	return append(b, seg...)
}

// ethernet returns an Ethernet II frame of the given ethertype around pkt,
// with the VLAN TPIDs given (each followed by VLAN ID 5).
func ethernet(etherType uint16, pkt []byte, vlanTPIDs ...uint16) []byte {
	b := []byte{
		0x02, 0, 0, 0, 0, 2, // destination MAC
		0x02, 0, 0, 0, 0, 1, // source MAC
	}
	for _, tpid := range vlanTPIDs {
		b = append(b, byte(tpid>>8), byte(tpid), 0x00, 0x05)
	}
	b = append(b, byte(etherType>>8), byte(etherType))
	return append(b, pkt...)
}

func TestTCPOptionsFromPacket(t *testing.T) {
	// NOP, NOP, timestamps, then a forward option with 3 empty slots: 40
	// bytes, a full options area.
	opts := []byte{
		0x01, 0x01, 0x08, 0x0a, 0, 0, 0, 1, 0, 0, 0, 2,
		0xfd, 0x1c, 0xcc, 0x10,
		0, 0, 0, 0, 0, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 0,
	}
	payload := []byte("hello")
	seg := tcpSegment(40000, 5201, FlagACK|FlagPSH, opts, payload)
	ack := tcpSegment(5201, 40000, FlagACK, nil, nil)

	// One frame written out byte by byte: Ethernet, IPv4 (total length
	// 0x0030 = 20 + 28), TCP from port 0x1451 (5201) to 0x9c40 (40000),
	// data offset 7 (28 bytes) with SYN|ACK (0x12), options MSS 1460
	// (02 04 05 b4), SACK permitted (04 02), NOP, NOP; and 2 bytes of
	// Ethernet padding after the IP packet.
	literal := []byte{
		0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00,
		0x45, 0x00, 0x00, 0x30, 0x00, 0x00, 0x40, 0x00, 0x40, 0x06, 0x00, 0x00,
		0x0a, 0x00, 0x00, 0x02, 0x0a, 0x00, 0x00, 0x01,
		0x14, 0x51, 0x9c, 0x40, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01,
		0x70, 0x12, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00,
		0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x01, 0x01,
		0xee, 0xee,
	}

	tests := []struct {
		name     string
		frame    []byte
		link     LinkType
		wantOpts []byte
		want     PacketInfo
	}{
		{"ethernet ipv4", ethernet(0x0800, ipv4Packet(seg)), Ethernet, opts, PacketInfo{40000, 5201, FlagACK | FlagPSH, 5}},
		{"ethernet ipv6", ethernet(0x86dd, ipv6Packet(seg)), Ethernet, opts, PacketInfo{40000, 5201, FlagACK | FlagPSH, 5}},
		{"raw ipv4", ipv4Packet(seg), RawIP, opts, PacketInfo{40000, 5201, FlagACK | FlagPSH, 5}},
		{"raw ipv6", ipv6Packet(seg), RawIP, opts, PacketInfo{40000, 5201, FlagACK | FlagPSH, 5}},
		{"no options", ipv4Packet(ack), RawIP, []byte{}, PacketInfo{5201, 40000, FlagACK, 0}},
		{"vlan", ethernet(0x0800, ipv4Packet(seg), 0x8100), Ethernet, opts, PacketInfo{40000, 5201, FlagACK | FlagPSH, 5}},
		{"qinq", ethernet(0x86dd, ipv6Packet(seg), 0x88a8, 0x8100), Ethernet, opts, PacketInfo{40000, 5201, FlagACK | FlagPSH, 5}},
		{"trailing padding", append(ethernet(0x0800, ipv4Packet(ack)), 0, 0, 0, 0, 0, 0), Ethernet, []byte{}, PacketInfo{5201, 40000, FlagACK, 0}},
		{"literal", literal, Ethernet, []byte{0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x01, 0x01}, PacketInfo{5201, 40000, FlagSYN | FlagACK, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, info, err := TCPOptionsFromPacket(tt.frame, tt.link)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tt.wantOpts) {
				t.Fatalf("options = % x, want % x", got, tt.wantOpts)
			}
			if info != tt.want {
				t.Fatalf("info = %+v, want %+v", info, tt.want)
			}
			if _, _, err := FindOption(got); err != nil {
				t.Fatalf("FindOption on the options: %v", err)
			}
		})
	}
}

func TestTCPOptionsFromPacketInvalid(t *testing.T) {
	seg := tcpSegment(1, 2, FlagACK, []byte{1, 1, 1, 1}, []byte("data"))
	v4 := ipv4Packet(seg)
	v6 := ipv6Packet(seg)

	// set returns a copy of b with b[i] = v.
	set := func(b []byte, i int, v byte) []byte {
		out := bytes.Clone(b)
		out[i] = v
		return out
	}
	tests := []struct {
		name  string
		frame []byte
		link  LinkType
	}{
		{"unknown link type", v4, 0},
		{"empty raw", nil, RawIP},
		{"empty ethernet", nil, Ethernet},
		{"short ethernet", make([]byte, 13), Ethernet},
		{"ethernet only", ethernet(0x0800, nil), Ethernet},
		{"arp", ethernet(0x0806, v4), Ethernet},
		{"truncated vlan tag", ethernet(0x8100, nil)[:15], Ethernet},
		{"three vlan tags", ethernet(0x0800, v4, 0x8100, 0x8100, 0x8100), Ethernet},
		{"ethertype ipv6, header ipv4", ethernet(0x86dd, v4), Ethernet},
		{"ip version 5", set(v4, 0, 0x55), RawIP},
		{"ipv4 header truncated", v4[:19], RawIP},
		{"ipv4 IHL 4", set(v4, 0, 0x44), RawIP},
		{"ipv4 IHL past total length", set(v4, 0, 0x4f), RawIP},
		{"ipv4 capture truncated", v4[:len(v4)-1], RawIP},
		{"ipv4 total length too small", set(set(v4, 2, 0), 3, 19), RawIP},
		{"ipv4 not tcp", set(v4, 9, 17), RawIP},
		{"ipv4 first fragment", set(v4, 6, 0x20), RawIP},
		{"ipv4 later fragment", set(v4, 7, 0x01), RawIP},
		{"ipv4 tcp header truncated", ipv4Packet(seg[:19]), RawIP},
		{"ipv4 options truncated", ipv4Packet(seg[:23]), RawIP},
		{"tcp data offset 4", ipv4Packet(set(seg, 12, 0x40)), RawIP},
		{"tcp data offset past segment", ipv4Packet(set(seg, 12, 0xf0)), RawIP},
		{"ipv6 header truncated", v6[:39], RawIP},
		{"ipv6 capture truncated", v6[:len(v6)-1], RawIP},
		{"ipv6 extension header", set(v6, 6, 0), RawIP},
		{"ipv6 not tcp", set(v6, 6, 17), RawIP},
		{"ipv6 jumbo payload length 0", set(set(v6, 4, 0), 5, 0), RawIP},
		{"ethernet ipv6 truncated", ethernet(0x86dd, v6)[:60], Ethernet},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts, info, err := TCPOptionsFromPacket(tt.frame, tt.link)
			if err == nil {
				t.Fatalf("got options % x, %+v; want an error", opts, info)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("%v does not wrap ErrMalformed", err)
			}
		})
	}
}

func TestTCPOptionsFromPacketAliasing(t *testing.T) {
	// The returned slice aliases the frame but must not let an append
	// overwrite the payload behind it.
	seg := tcpSegment(1, 2, FlagACK, []byte{1, 1, 1, 1}, []byte("data"))
	frame := ipv4Packet(seg)
	opts, _, err := TCPOptionsFromPacket(frame, RawIP)
	if err != nil {
		t.Fatal(err)
	}
	_ = append(opts, 'X')
	if !bytes.HasSuffix(frame, []byte("data")) {
		t.Fatalf("append to the options overwrote the payload: % x", frame)
	}
}

func TestLinkTypeString(t *testing.T) {
	for l, want := range map[LinkType]string{Ethernet: "ethernet", RawIP: "raw-ip", 7: "LinkType(7)"} {
		if got := l.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", uint8(l), got, want)
		}
	}
}
