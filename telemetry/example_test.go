package telemetry_test

import (
	"fmt"

	"github.com/ccload/ccload/telemetry"
)

// The worked example of docs/int-option.md: a FORWARD option with 3 slots,
// two of them filled by hops.
func ExampleParseOption() {
	wire := []byte{
		0xfd, 0x1c, 0xcc, 0x10,
		0x90, 0xf4, 0x24, 0x01, 0x86, 0xa0, 0x00, 0x64,
		0x6f, 0xff, 0xff, 0x00, 0x00, 0x01, 0xff, 0xff,
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	}
	o, err := telemetry.ParseOption(wire)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s, %d slots, %d hops, full=%v\n", o.Direction, o.Slots, len(o.Hops), o.Full())
	for i, h := range o.Hops {
		fmt.Printf("hop %d: %s, ts %d ns, txBytes %d (x128 = %d B), qlen %d (x80 = %d B)\n",
			i+1, telemetry.FormatRate(h.RateBps), h.Timestamp, h.TxBytes,
			uint64(h.TxBytes)*telemetry.TxBytesUnit, h.Qlen, h.QueueBytes())
	}
	// Output:
	// forward, 3 slots, 2 hops, full=false
	// hop 1: 100Gbit/s, ts 1000000 ns, txBytes 100000 (x128 = 12800000 B), qlen 100 (x80 = 8000 B)
	// hop 2: 25Gbit/s, ts 16777200 ns, txBytes 1 (x128 = 128 B), qlen 65535 (x80 = 5242800 B)
}

// A hop record to the wire and back.
func ExampleEncodeHop() {
	w, err := telemetry.EncodeHop(telemetry.Hop{RateBps: 10e9, Timestamp: 0x123456, TxBytes: 0xabcde, Qlen: 0x0102})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%#016x\n", w)
	h, _ := telemetry.DecodeHop(w)
	fmt.Println(h)
	// Output:
	// 0x5123456abcde0102
	// 10Gbit/s ts=1193046ns tx=703710x128B q=258x80B
}

// Differencing two records of the same hop across the wrap of both
// counters.
func ExampleTimestampDelta() {
	older := telemetry.Hop{RateBps: 100e9, Timestamp: 0xfffc18, TxBytes: 0xfffff}
	newer := telemetry.Hop{RateBps: 100e9, Timestamp: 0x0003e8, TxBytes: 0x00060}
	dt := telemetry.TimestampDelta(newer.Timestamp, older.Timestamp)
	dtx := telemetry.TxBytesDelta(newer.TxBytes, older.TxBytes)
	fmt.Printf("%d ns, %d bytes, %d bit/s\n", dt, dtx, dtx*8*1e9/uint64(dt))
	// Output:
	// 2000 ns, 12416 bytes, 49664000000 bit/s
}

// Finding the option in the options area of a captured ACK.
func ExampleFindOption() {
	opts := []byte{
		0x01, 0x01, 0x08, 0x0a, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x02, // NOP, NOP, timestamps
		0xfd, 0x0c, 0xcc, 0x11, 0x50, 0x00, 0x00, 0x10, 0x00, 0x02, 0x00, 0x03, // INT echo, 1 slot
	}
	o, found, err := telemetry.FindOption(opts)
	fmt.Println(o, found, err)
	// Output:
	// echo 1/1 [10Gbit/s ts=1ns tx=2x128B q=3x80B] true <nil>
}
