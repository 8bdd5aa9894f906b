package testutil

import "encoding/binary"

// TCPSegment describes an IPv4/TCP packet for tests that inject or run
// crafted packets through BPF programs.
type TCPSegment struct {
	Src, Dst     [4]byte
	Sport, Dport uint16
	Seq, Ack     uint32
	Flags        byte   // TCP flags; 0x10 is ACK, 0x18 PSH|ACK
	Window       uint16 // the window field, unscaled
	Options      []byte // TCP options, padded with NOPs to a multiple of 4
	Payload      int    // bytes of payload, 0, 1, 2, ... (mod 256)
}

// IPv4 returns the segment as an IPv4 packet with valid IP and TCP
// checksums.
func (s TCPSegment) IPv4() []byte {
	opts := append([]byte(nil), s.Options...)
	for len(opts)%4 != 0 {
		opts = append(opts, 1) // NOP
	}
	tcpLen := 20 + len(opts)
	pkt := make([]byte, 20+tcpLen+s.Payload)
	pkt[0] = 0x45
	binary.BigEndian.PutUint16(pkt[2:], uint16(len(pkt)))
	pkt[8], pkt[9] = 64, 6
	copy(pkt[12:], s.Src[:])
	copy(pkt[16:], s.Dst[:])
	binary.BigEndian.PutUint16(pkt[10:], Checksum(pkt[:20], 0))
	tcp := pkt[20:]
	binary.BigEndian.PutUint16(tcp[0:], s.Sport)
	binary.BigEndian.PutUint16(tcp[2:], s.Dport)
	binary.BigEndian.PutUint32(tcp[4:], s.Seq)
	binary.BigEndian.PutUint32(tcp[8:], s.Ack)
	tcp[12] = byte(tcpLen/4) << 4
	tcp[13] = s.Flags
	binary.BigEndian.PutUint16(tcp[14:], s.Window)
	copy(tcp[20:], opts)
	for i := range s.Payload {
		tcp[tcpLen+i] = byte(i)
	}
	binary.BigEndian.PutUint16(tcp[16:], TCPChecksum(s.Src[:], s.Dst[:], tcp))
	return pkt
}

// Ethernet returns the segment as an Ethernet frame (zero MAC addresses)
// carrying IPv4.
func (s TCPSegment) Ethernet() []byte {
	frame := make([]byte, 14)
	binary.BigEndian.PutUint16(frame[12:], 0x0800)
	return append(frame, s.IPv4()...)
}

// Checksum is the Internet checksum (RFC 1071) of b, starting from the
// partial sum sum.
func Checksum(b []byte, sum uint32) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// TCPChecksum computes the checksum of segment over the IPv4 pseudo header
// of src and dst, taking the segment's checksum field as zero.
func TCPChecksum(src, dst []byte, segment []byte) uint16 {
	pseudo := make([]byte, 12)
	copy(pseudo, src)
	copy(pseudo[4:], dst)
	pseudo[9] = 6
	binary.BigEndian.PutUint16(pseudo[10:], uint16(len(segment)))
	var sum uint32
	for i := 0; i < 12; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(pseudo[i:]))
	}
	seg := append([]byte(nil), segment...)
	seg[16], seg[17] = 0, 0
	return Checksum(seg, sum)
}

// EthernetIPv6 returns the segment as an Ethernet frame carrying IPv6 from
// src to dst (Src and Dst are ignored), with a valid TCP checksum.
func (s TCPSegment) EthernetIPv6(src, dst [16]byte) []byte {
	v4 := s.IPv4()
	tcp := append([]byte(nil), v4[20:]...)
	pkt := make([]byte, 14+40, 14+40+len(tcp))
	binary.BigEndian.PutUint16(pkt[12:], 0x86dd)
	ip := pkt[14:]
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(len(tcp)))
	ip[6], ip[7] = 6, 64
	copy(ip[8:], src[:])
	copy(ip[24:], dst[:])
	tcp[16], tcp[17] = 0, 0
	var sum uint32
	for _, b := range [][]byte{src[:], dst[:]} {
		for i := 0; i < 16; i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
	}
	sum += uint32(len(tcp)) + 6
	binary.BigEndian.PutUint16(tcp[16:], Checksum(tcp, sum))
	return append(pkt, tcp...)
}

// SkbCtxSize and SkbTstampOff are the size of struct __sk_buff and the
// offset of its tstamp field (linux/bpf.h; the same from 6.1 on), for
// BPF_PROG_TEST_RUN runs of tc programs with a context.
const (
	SkbCtxSize   = 192
	SkbTstampOff = 152
)
