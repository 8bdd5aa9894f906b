package telemetry

import (
	"encoding/binary"
	"fmt"
)

// LinkType is the framing of a captured packet.
type LinkType uint8

// Link types understood by [TCPOptionsFromPacket].
const (
	// Ethernet frames start with a 14-byte Ethernet II header, optionally
	// followed by up to two 802.1Q/802.1ad VLAN tags.
	Ethernet LinkType = iota + 1
	// RawIP packets start with the IPv4 or IPv6 header (for example
	// AF_PACKET on a tun device, or SOCK_DGRAM packet sockets).
	RawIP
)

// String returns "ethernet", "raw-ip", or LinkType(N).
func (l LinkType) String() string {
	switch l {
	case Ethernet:
		return "ethernet"
	case RawIP:
		return "raw-ip"
	default:
		return fmt.Sprintf("LinkType(%d)", uint8(l))
	}
}

// TCP header flag bits, as in [PacketInfo.Flags].
const (
	FlagFIN = 1 << iota
	FlagSYN
	FlagRST
	FlagPSH
	FlagACK
	FlagURG
	FlagECE
	FlagCWR
)

// PacketInfo describes the TCP segment of a captured packet.
type PacketInfo struct {
	// SrcPort and DstPort are the TCP ports.
	SrcPort, DstPort uint16
	// Flags is byte 13 of the TCP header (FlagCWR ... FlagFIN).
	Flags uint8
	// PayloadLen is the number of TCP payload bytes, from the IP length
	// fields.
	PayloadLen int
}

// Header sizes and protocol numbers used by TCPOptionsFromPacket.
const (
	ethHeaderLen  = 14
	vlanTagLen    = 4
	maxVLANTags   = 2
	ipv4MinHeader = 20
	ipv6HeaderLen = 40
	tcpMinHeader  = 20

	etherTypeIPv4   = 0x0800
	etherTypeIPv6   = 0x86DD
	etherTypeVLAN   = 0x8100
	etherTypeQinQ   = 0x88A8
	ipProtoTCP      = 6
	ipv4FlagMF      = 0x2000
	ipv4FragOffMask = 0x1FFF
)

// TCPOptionsFromPacket returns the TCP options area of a captured IPv4 or
// IPv6 TCP packet, and the segment's ports, flags and payload length. The
// options slice aliases frame.
//
// The IP length fields must fit in frame (bytes after the IP packet, such as
// Ethernet padding, are ignored); a truncated capture is an error. IPv4
// fragments, IPv6 extension headers and non-TCP packets are errors too. All
// errors wrap [ErrMalformed]. It never panics.
func TCPOptionsFromPacket(frame []byte, linkType LinkType) (opts []byte, info PacketInfo, err error) {
	var ip []byte
	var wantVersion byte // 0: any
	switch linkType {
	case Ethernet:
		ip, wantVersion, err = stripEthernet(frame)
	case RawIP:
		ip = frame
	default:
		err = fmt.Errorf("unknown link type %d", uint8(linkType))
	}
	if err != nil {
		return nil, PacketInfo{}, fmt.Errorf("TCP options from packet: %w: %w", ErrMalformed, err)
	}
	if len(ip) < 1 {
		return nil, PacketInfo{}, fmt.Errorf("TCP options from packet: no IP header: %w", ErrMalformed)
	}
	v := ip[0] >> 4
	if wantVersion != 0 && v != wantVersion {
		return nil, PacketInfo{}, fmt.Errorf("TCP options from packet: ethertype says IPv%d, header says version %d: %w", wantVersion, v, ErrMalformed)
	}
	var seg []byte
	switch v {
	case 4:
		seg, err = ipv4Payload(ip)
	case 6:
		seg, err = ipv6Payload(ip)
	default:
		err = fmt.Errorf("IP version %d", v)
	}
	if err != nil {
		return nil, PacketInfo{}, fmt.Errorf("TCP options from packet: %w: %w", ErrMalformed, err)
	}
	opts, info, err = tcpOptions(seg)
	if err != nil {
		return nil, PacketInfo{}, fmt.Errorf("TCP options from packet: %w: %w", ErrMalformed, err)
	}
	return opts, info, nil
}

// stripEthernet returns the bytes after the Ethernet header and VLAN tags,
// and the IP version that the ethertype announces.
func stripEthernet(frame []byte) ([]byte, byte, error) {
	if len(frame) < ethHeaderLen {
		return nil, 0, fmt.Errorf("ethernet header: %d bytes, want %d", len(frame), ethHeaderLen)
	}
	off := ethHeaderLen - 2 // the ethertype, or the TPID of a VLAN tag
	for tags := 0; ; tags++ {
		etherType := binary.BigEndian.Uint16(frame[off:])
		switch etherType {
		case etherTypeIPv4:
			return frame[off+2:], 4, nil
		case etherTypeIPv6:
			return frame[off+2:], 6, nil
		case etherTypeVLAN, etherTypeQinQ:
			if tags == maxVLANTags {
				return nil, 0, fmt.Errorf("more than %d VLAN tags", maxVLANTags)
			}
			off += vlanTagLen
			if off+2 > len(frame) {
				return nil, 0, fmt.Errorf("VLAN tag truncated")
			}
		default:
			return nil, 0, fmt.Errorf("ethertype %#04x is not IP", etherType)
		}
	}
}

// ipv4Payload returns the TCP segment of an IPv4 packet, bounded by its total
// length.
func ipv4Payload(ip []byte) ([]byte, error) {
	if len(ip) < ipv4MinHeader {
		return nil, fmt.Errorf("IPv4 header: %d bytes, want %d", len(ip), ipv4MinHeader)
	}
	hl := int(ip[0]&0x0F) * 4
	total := int(binary.BigEndian.Uint16(ip[2:]))
	switch {
	case hl < ipv4MinHeader:
		return nil, fmt.Errorf("IPv4 header length %d", hl)
	case total < hl:
		return nil, fmt.Errorf("IPv4 total length %d shorter than its header (%d)", total, hl)
	case total > len(ip):
		return nil, fmt.Errorf("IPv4 total length %d, but only %d bytes captured", total, len(ip))
	}
	if frag := binary.BigEndian.Uint16(ip[6:]); frag&(ipv4FlagMF|ipv4FragOffMask) != 0 {
		return nil, fmt.Errorf("IPv4 fragment")
	}
	if p := ip[9]; p != ipProtoTCP {
		return nil, fmt.Errorf("IPv4 protocol %d is not TCP", p)
	}
	return ip[hl:total], nil
}

// ipv6Payload returns the TCP segment of an IPv6 packet without extension
// headers, bounded by its payload length.
func ipv6Payload(ip []byte) ([]byte, error) {
	if len(ip) < ipv6HeaderLen {
		return nil, fmt.Errorf("IPv6 header: %d bytes, want %d", len(ip), ipv6HeaderLen)
	}
	if nh := ip[6]; nh != ipProtoTCP {
		return nil, fmt.Errorf("IPv6 next header %d is not TCP (extension headers are not supported)", nh)
	}
	n := int(binary.BigEndian.Uint16(ip[4:]))
	if ipv6HeaderLen+n > len(ip) {
		return nil, fmt.Errorf("IPv6 payload length %d, but only %d bytes captured", n, len(ip)-ipv6HeaderLen)
	}
	return ip[ipv6HeaderLen : ipv6HeaderLen+n], nil
}

// tcpOptions splits a TCP segment into its options area and header fields.
func tcpOptions(seg []byte) ([]byte, PacketInfo, error) {
	if len(seg) < tcpMinHeader {
		return nil, PacketInfo{}, fmt.Errorf("TCP header: %d bytes, want %d", len(seg), tcpMinHeader)
	}
	hl := int(seg[12]>>4) * 4
	switch {
	case hl < tcpMinHeader:
		return nil, PacketInfo{}, fmt.Errorf("TCP data offset %d bytes", hl)
	case hl > len(seg):
		return nil, PacketInfo{}, fmt.Errorf("TCP header of %d bytes in a %d-byte segment", hl, len(seg))
	}
	info := PacketInfo{
		SrcPort:    binary.BigEndian.Uint16(seg[0:]),
		DstPort:    binary.BigEndian.Uint16(seg[2:]),
		Flags:      seg[13],
		PayloadLen: len(seg) - hl,
	}
	return seg[tcpMinHeader:hl:hl], info, nil
}
