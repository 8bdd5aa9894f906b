package hop

// The INT hop on crafted packets, run in the kernel with BPF_PROG_TEST_RUN:
// well-formed forward options get a record and a correct checksum;
// malformed, truncated, foreign and full ones pass through untouched.

import (
	"encoding/binary"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/telemetry"
)

// craftTCP builds an Ethernet/IPv4/TCP packet with the given TCP options
// (padded with NOPs to a multiple of 4) and a valid TCP checksum.
func craftTCP(opts []byte, payload int) []byte {
	return testutil.TCPSegment{Src: [4]byte{198, 18, 0, 2}, Dst: [4]byte{198, 19, 0, 2}, Sport: 40000, Dport: 5201,
		Seq: 1000, Ack: 2000, Flags: 0x18, Window: 512, Options: opts, Payload: payload}.Ethernet()
}

func forwardOption(t *testing.T, slots int, hops ...telemetry.Hop) []byte {
	t.Helper()
	b, err := telemetry.Option{Direction: telemetry.Forward, Slots: slots, Hops: hops}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestHopOnCraftedPackets(t *testing.T) {
	testutil.RequireRoot(t)
	objs, err := load(Config{RateBps: 1_000_000_000, BufferBytes: 1 << 20})
	if err != nil {
		t.Fatalf("load the INT hop: %v", err)
	}
	defer objs.Close()
	prog := objs.IntHop

	upstream := telemetry.Hop{RateBps: 10_000_000_000, Timestamp: 1234, TxBytes: 99, Qlen: 7}
	nop2 := []byte{1, 1}
	ts := []byte{8, 10, 0, 0, 0, 1, 0, 0, 0, 2}
	tests := []struct {
		name    string
		opts    []byte
		written int // slot the hop must fill, or -1 for "packet unchanged"
	}{
		{"empty 3-slot option after timestamps", append(append(append([]byte{}, nop2...), ts...), forwardOption(t, 3)...), 0},
		{"second slot after an upstream hop", forwardOption(t, 3, upstream), 1},
		{"4 slots, no timestamps", forwardOption(t, 4, upstream, upstream), 2},
		{"full option", forwardOption(t, 2, upstream, upstream), -1},
		{"echo option: hops never touch it", func() []byte {
			b, _ := telemetry.Option{Direction: telemetry.Echo, Slots: 1, Hops: []telemetry.Hop{upstream}}.Marshal()
			return b
		}(), -1},
		{"foreign ExID", []byte{253, 12, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0, 0}, -1},
		{"length not 4+8N", []byte{253, 13, 0xCC, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0}, -1},
		{"header only", []byte{253, 4, 0xCC, 0x10}, -1},
		{"option longer than the options area", []byte{253, 36, 0xCC, 0x10, 0, 0, 0, 0}, -1},
		{"length 1", []byte{253, 1, 0xCC, 0x10}, -1},
		{"length 0 after NOPs", []byte{1, 1, 253, 0}, -1},
		{"end of options before ours", append([]byte{0, 0, 0, 0}, forwardOption(t, 1)...), -1},
		{"unknown kind with bad length first", append([]byte{30, 50}, forwardOption(t, 1)...), -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := craftTCP(tc.opts, 100)
			out := make([]byte, len(in)+64)
			ret, err := prog.Run(&ebpf.RunOptions{Data: in, DataOut: out})
			if err != nil {
				t.Fatalf("test run: %v", err)
			}
			if ret != 0 {
				t.Fatalf("verdict %d, want TC_ACT_OK", ret)
			}
			out = out[:len(in)]
			ip := out[14:]
			tcp := ip[20:]
			if got, want := binary.BigEndian.Uint16(tcp[16:]), testutil.TCPChecksum(ip[12:16], ip[16:20], tcp); got != want {
				t.Fatalf("TCP checksum %#04x after the hop, want %#04x", got, want)
			}
			if tc.written < 0 {
				if string(out) != string(in) {
					t.Fatalf("the hop changed a packet it must leave alone:\n in %x\nout %x", in, out)
				}
				return
			}
			opt, found, err := telemetry.FindOption(tcp[20 : (tcp[12]>>4)*4])
			if err != nil || !found {
				t.Fatalf("no valid option after the hop: found=%v err=%v", found, err)
			}
			if len(opt.Hops) != tc.written+1 {
				t.Fatalf("hops after the hop: %+v, want %d", opt.Hops, tc.written+1)
			}
			if h := opt.Hops[tc.written]; h.RateBps != 1_000_000_000 {
				t.Fatalf("the hop wrote %+v, want a record at 1 Gbit/s", h)
			}
			if string(out[14+20+(int(tcp[12]>>4)*4):]) != string(in[14+20+(int(in[14+20+12]>>4)*4):]) {
				t.Fatal("the payload changed")
			}
		})
	}
}
