package onramp_test

import (
	"fmt"

	"github.com/ccload/ccload/onramp"
)

// The worked example of docs/onramp-option.md: a STAMP on a data segment and
// the ECHO that answers it, and what the sender reads from the ECHO when its
// clock's low 32 bits read 60,000 ns and its flow's cumulative pause is
// 145,000 ns.
func ExampleParseOption() {
	stampWire := []byte{
		0xfd, 0x0c, 0xcc, 0x20, // kind 253, length 12, ExID 0xCC20
		0xff, 0xff, 0xd8, 0xf0, // tx
		0x00, 0x01, 0xe8, 0x48, // pause
	}
	echoWire := []byte{
		0xfd, 0x10, 0xcc, 0x21, // kind 253, length 16, ExID 0xCC21
		0x00, 0x00, 0x75, 0x30, // owd
		0xff, 0xff, 0xd8, 0xf0, // tx, the STAMP's
		0x00, 0x01, 0xe8, 0x48, // pause, the STAMP's
	}
	stamp, err := onramp.ParseOption(stampWire)
	if err != nil {
		fmt.Println(err)
		return
	}
	echo, err := onramp.ParseOption(echoWire)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(stamp)
	fmt.Println(echo)

	e := echo.Echo
	const nowTx, nowPause = 60_000, 145_000
	fmt.Printf("owd %d ns (no clock: %v)\n", e.OWDNs, e.NoClock())
	fmt.Printf("rtt %d ns\n", onramp.TxDelta(nowTx, e.TxNs))
	fmt.Printf("paused %d ns since the segment left\n", onramp.PauseDelta(nowPause, e.PauseNs))
	// Output:
	// stamp tx=4294957296ns pause=125000ns
	// echo owd=30000ns tx=4294957296ns pause=125000ns
	// owd 30000 ns (no clock: false)
	// rtt 70000 ns
	// paused 20000 ns since the segment left
}

// The one-way delay of the worked example, as the receiver computes it: the
// segment left at tx = 2^32 − 10,000 on the sender's clock, which is 1,500 ns
// ahead of the receiver's, and arrived when the receiver's clock read
// 18,500 (mod 2^32, after the wrap).
func ExampleOneWayDelay() {
	fmt.Println(onramp.OneWayDelay(18_500, 1<<32-10_000, 1_500))
	// Output:
	// 30000
}

// Finding the STAMP in the options area of a data segment that also carries
// TCP timestamps and a one-slot INT FORWARD option: 12 + 12 + 12 = 36 bytes.
func ExampleFindOption() {
	opts := []byte{
		0x01, 0x01, 0x08, 0x0a, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x02, // NOP, NOP, timestamps
		0xfd, 0x0c, 0xcc, 0x20, 0xff, 0xff, 0xd8, 0xf0, 0x00, 0x01, 0xe8, 0x48, // On-Ramp STAMP
		0xfd, 0x0c, 0xcc, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // INT FORWARD, 1 empty slot
	}
	o, found, err := onramp.FindOption(opts)
	fmt.Println(o, found, err)
	// Output:
	// stamp tx=4294957296ns pause=125000ns true <nil>
}

// A pure ACK whose room for an ECHO the tc program left unfilled: the PAD
// is found, and ignored.
func ExampleFindOptions() {
	opts := []byte{
		0x01, 0x01, 0x08, 0x0a, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x04, // NOP, NOP, timestamps
		0xfd, 0x10, 0xcc, 0x2f, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // On-Ramp PAD, 16 bytes
		0x00, 0x00, 0x00, 0x00,
	}
	all, err := onramp.FindOptions(opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, o := range all {
		if o.ExID == onramp.ExIDPad {
			fmt.Println("ignored:", o)
			continue
		}
		fmt.Println("sample:", o)
	}
	// Output:
	// ignored: pad 16
}
