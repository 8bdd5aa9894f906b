package hop

// The INT hop on frames whose headers the kernel holds outside the skb's
// linear part (testutil.WithFragsTap says how): the fallback in
// bpf/include/tcpkt.h that pulls split headers in must let the hop write
// its record as on a linear frame.

import (
	"testing"
	"time"

	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/qdisc"
)

func TestHopOnSplitHeaders(t *testing.T) {
	testutil.RequireRoot(t)
	objs, err := load(Config{RateBps: 1_000_000_000, BufferBytes: 1 << 20})
	if err != nil {
		t.Fatalf("load the INT hop: %v", err)
	}
	defer objs.Close()

	v4 := craftTCP(forwardOption(t, 3), 200)
	v6 := testutil.TCPSegment{Sport: 40000, Dport: 5201, Seq: 1000, Ack: 2000, Flags: 0x18, Window: 512,
		Options: forwardOption(t, 3), Payload: 200}.EthernetIPv6(
		[16]byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2},
		[16]byte{0xfd, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2})
	tests := []struct {
		name   string
		frame  []byte
		linear int // bytes of the frame in the first part, the skb's linear part
	}{
		{"IPv4, whole frame linear", v4, len(v4)},
		{"IPv4, TCP header in a fragment", v4, 14 + 20},
		{"IPv4, TCP header split", v4, 14 + 20 + 8},
		{"IPv4, IP header split", v4, 14 + 6},
		{"IPv6, whole frame linear", v6, len(v6)},
		{"IPv6, TCP header in a fragment", v6, 14 + 40},
		{"IPv6, options split", v6, 14 + 40 + 24},
		{"IPv6, IP header split", v6, 14 + 10},
	}
	const tap = "ccl-frags0"
	testutil.WithFragsTap(t, tap, func(write func(parts ...[]byte) error) {
		att, err := qdisc.Attach(tap, objs.IntHop, qdisc.AttachOptions{Direction: qdisc.Ingress})
		if err != nil {
			t.Errorf("attach the hop to the tap's ingress: %v", err)
			return
		}
		defer att.Close()
		for _, tc := range tests {
			before, err := readStats(objs.HopStats, objs.HopQueue)
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
				return
			}
			if err := write(tc.frame[:tc.linear], tc.frame[tc.linear:]); err != nil {
				t.Errorf("%s: %v", tc.name, err)
				return
			}
			// The write runs the receive path, tc ingress included, before
			// it returns; the loop only guards against a slower kernel.
			var got Stats
			for range 100 {
				if got, err = readStats(objs.HopStats, objs.HopQueue); err != nil || got.Packets > before.Packets {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
				return
			}
			if got.Packets != before.Packets+1 || got.Records != before.Records+1 || got.Malformed != before.Malformed {
				t.Errorf("%s: the hop counted %d packets, %d records, %d malformed; want 1, 1, 0",
					tc.name, got.Packets-before.Packets, got.Records-before.Records, got.Malformed-before.Malformed)
			}
		}
	})
}
