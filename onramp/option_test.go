package onramp

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
)

// The worked example of docs/onramp-option.md. The segment left the sender
// 10 µs before the low 32 bits of its clock wrapped, after On-Ramp had
// paused the flow for 125 µs in all; the sender's clock is 1.5 µs ahead of
// the receiver's, and the segment took 30 µs.
var (
	workedStamp = Option{ExID: ExIDStamp, Stamp: Stamp{TxNs: 1<<32 - 10_000, PauseNs: 125_000}}
	workedEcho  = Option{ExID: ExIDEcho, Echo: Echo{OWDNs: 30_000, TxNs: 1<<32 - 10_000, PauseNs: 125_000}}
)

// Their wire form. STAMP: tx 2^32 − 10,000 = 0xffffd8f0, pause 125,000 =
// 0x0001e848. ECHO: owd 30,000 = 0x00007530, then the STAMP's tx and pause.
var (
	workedStampWire = []byte{
		0xfd, 0x0c, 0xcc, 0x20,
		0xff, 0xff, 0xd8, 0xf0,
		0x00, 0x01, 0xe8, 0x48,
	}
	workedEchoWire = []byte{
		0xfd, 0x10, 0xcc, 0x21,
		0x00, 0x00, 0x75, 0x30,
		0xff, 0xff, 0xd8, 0xf0,
		0x00, 0x01, 0xe8, 0x48,
	}
)

// testOptions are valid options of every kind, with extreme field values.
func testOptions() []Option {
	return []Option{
		workedStamp,
		workedEcho,
		{ExID: ExIDStamp},
		{ExID: ExIDStamp, Stamp: Stamp{TxNs: math.MaxUint32, PauseNs: math.MaxUint32}},
		{ExID: ExIDEcho},
		{ExID: ExIDEcho, Echo: Echo{OWDNs: NoClock, TxNs: 1, PauseNs: 2}},
		{ExID: ExIDEcho, Echo: Echo{OWDNs: math.MaxInt32, TxNs: math.MaxUint32, PauseNs: math.MaxUint32}},
		{ExID: ExIDEcho, Echo: Echo{OWDNs: NoClock + 1}},
		{ExID: ExIDEcho, Echo: Echo{OWDNs: -1_500}},
		{ExID: ExIDPad, PadLen: StampLen},
		{ExID: ExIDPad, PadLen: EchoLen},
	}
}

func TestOptionMarshalVectors(t *testing.T) {
	tests := []struct {
		name string
		opt  Option
		want []byte
	}{
		{"worked example stamp", workedStamp, workedStampWire},
		{"worked example echo", workedEcho, workedEchoWire},
		{
			// A zero STAMP is valid: the clock's low 32 bits read 0, and
			// the flow has never paused.
			name: "stamp zero",
			opt:  Option{ExID: ExIDStamp},
			want: []byte{0xfd, 0x0c, 0xcc, 0x20, 0, 0, 0, 0, 0, 0, 0, 0},
		},
		{
			// tx 0x01020304, pause 0xfffffffe: big endian, field by field.
			name: "stamp byte order",
			opt:  Option{ExID: ExIDStamp, Stamp: Stamp{TxNs: 0x01020304, PauseNs: 0xfffffffe}},
			want: []byte{0xfd, 0x0c, 0xcc, 0x20, 0x01, 0x02, 0x03, 0x04, 0xff, 0xff, 0xff, 0xfe},
		},
		{
			// The receiver has no clock offset for the sender: owd is
			// 0x80000000; tx and pause are still copied.
			name: "echo no clock",
			opt:  Option{ExID: ExIDEcho, Echo: Echo{OWDNs: NoClock, TxNs: 0x0a0b0c0d, PauseNs: 7}},
			want: []byte{0xfd, 0x10, 0xcc, 0x21, 0x80, 0x00, 0x00, 0x00, 0x0a, 0x0b, 0x0c, 0x0d, 0x00, 0x00, 0x00, 0x07},
		},
		{
			// A negative OWD (the clock offset is off by more than the
			// delay) is two's complement: −1,500 = 0xfffffa24.
			name: "echo negative owd",
			opt:  Option{ExID: ExIDEcho, Echo: Echo{OWDNs: -1_500, TxNs: 1, PauseNs: 0}},
			want: []byte{0xfd, 0x10, 0xcc, 0x21, 0xff, 0xff, 0xfa, 0x24, 0, 0, 0, 1, 0, 0, 0, 0},
		},
		{
			name: "echo largest owd",
			opt:  Option{ExID: ExIDEcho, Echo: Echo{OWDNs: math.MaxInt32}},
			want: []byte{0xfd, 0x10, 0xcc, 0x21, 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0},
		},
		{
			// Room reserved on a data segment and not filled.
			name: "pad 12",
			opt:  Option{ExID: ExIDPad, PadLen: 12},
			want: []byte{0xfd, 0x0c, 0xcc, 0x2f, 0, 0, 0, 0, 0, 0, 0, 0},
		},
		{
			// Room reserved on a pure ACK and not filled.
			name: "pad 16",
			opt:  Option{ExID: ExIDPad, PadLen: 16},
			want: []byte{0xfd, 0x10, 0xcc, 0x2f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.opt.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, tt.want) {
				t.Fatalf("Marshal() =\n% x\nwant\n% x", b, tt.want)
			}
			if len(b) != tt.opt.Len() || len(b)%4 != 0 {
				t.Fatalf("Marshal() gave %d bytes; Len() = %d, and options must be a multiple of 4", len(b), tt.opt.Len())
			}
			got, err := ParseOption(tt.want)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.opt {
				t.Fatalf("ParseOption(% x) = %+v, want %+v", tt.want, got, tt.opt)
			}
		})
	}
}

func TestOptionRoundTrip(t *testing.T) {
	for _, o := range testOptions() {
		t.Run(o.String(), func(t *testing.T) {
			b, err := o.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if int(b[1]) != len(b) || len(b) != o.Len() {
				t.Fatalf("marshalled %d bytes with length byte %d, Len() %d", len(b), b[1], o.Len())
			}
			got, err := ParseOption(b)
			if err != nil {
				t.Fatal(err)
			}
			if got != o {
				t.Fatalf("round trip: got %+v, want %+v", got, o)
			}
		})
	}
}

func TestOptionMarshalInvalid(t *testing.T) {
	tests := []struct {
		name string
		opt  Option
		want error
	}{
		{"zero option", Option{}, ErrNotOnRamp},
		{"INT forward ExID", Option{ExID: 0xCC10}, ErrNotOnRamp},
		{"INT echo ExID", Option{ExID: 0xCC11}, ErrNotOnRamp},
		{"next ExID", Option{ExID: 0xCC22}, ErrNotOnRamp},
		{"pad without length", Option{ExID: ExIDPad}, ErrMalformed},
		{"pad of 4", Option{ExID: ExIDPad, PadLen: 4}, ErrMalformed},
		{"pad of 8", Option{ExID: ExIDPad, PadLen: 8}, ErrMalformed},
		{"pad of 13", Option{ExID: ExIDPad, PadLen: 13}, ErrMalformed},
		{"pad of 20", Option{ExID: ExIDPad, PadLen: 20}, ErrMalformed},
		{"pad of -12", Option{ExID: ExIDPad, PadLen: -12}, ErrMalformed},
		{"pad with stamp", Option{ExID: ExIDPad, PadLen: 12, Stamp: Stamp{TxNs: 1}}, ErrMalformed},
		{"pad with echo", Option{ExID: ExIDPad, PadLen: 16, Echo: Echo{PauseNs: 1}}, ErrMalformed},
		{"stamp with echo", Option{ExID: ExIDStamp, Echo: Echo{OWDNs: 1}}, ErrMalformed},
		{"stamp with pad length", Option{ExID: ExIDStamp, PadLen: 12}, ErrMalformed},
		{"echo with stamp", Option{ExID: ExIDEcho, Stamp: Stamp{PauseNs: 1}}, ErrMalformed},
		{"echo with pad length", Option{ExID: ExIDEcho, PadLen: 16}, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.opt.Marshal()
			if err == nil {
				t.Fatalf("Marshal() = % x, want an error", b)
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Marshal(): %v, want one wrapping %v", err, tt.want)
			}
		})
	}
}

// cat concatenates byte slices into a new one.
func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func TestParseOptionInvalid(t *testing.T) {
	zeros := func(n int) []byte { return make([]byte, n) }
	tests := []struct {
		name string
		in   []byte
		want error // ErrNotOnRamp or ErrMalformed
	}{
		{"nil", nil, ErrMalformed},
		{"empty", []byte{}, ErrMalformed},
		{"one byte", []byte{0xfd}, ErrMalformed},

		// Not ours.
		{"kind 254", cat([]byte{0xfe}, workedStampWire[1:]), ErrNotOnRamp},
		{"kind NOP", cat([]byte{0x01}, workedStampWire[1:]), ErrNotOnRamp},
		{"kind EOL", cat([]byte{0x00}, workedEchoWire[1:]), ErrNotOnRamp},
		{"kind timestamps", []byte{0x08, 0x0a, 0, 0, 0, 1, 0, 0, 0, 2}, ErrNotOnRamp},
		{"INT forward", cat([]byte{0xfd, 0x0c, 0xcc, 0x10}, zeros(8)), ErrNotOnRamp},
		{"INT echo", []byte{0xfd, 0x0c, 0xcc, 0x11, 0x50, 0, 0, 0x10, 0, 0x02, 0, 0x03}, ErrNotOnRamp},
		{"TCP Fast Open ExID", []byte{0xfd, 0x08, 0xf9, 0x89, 1, 2, 3, 4}, ErrNotOnRamp},
		{"ExID between echo and pad", cat([]byte{0xfd, 0x0c, 0xcc, 0x22}, zeros(8)), ErrNotOnRamp},
		{"ExID before stamp", cat([]byte{0xfd, 0x0c, 0xcc, 0x1f}, zeros(8)), ErrNotOnRamp},
		{"ExID after pad", cat([]byte{0xfd, 0x0c, 0xcc, 0x30}, zeros(8)), ErrNotOnRamp},
		{"ExID byte-swapped", cat([]byte{0xfd, 0x0c, 0x20, 0xcc}, zeros(8)), ErrNotOnRamp},
		{"kind 253 without ExID", []byte{0xfd, 0x02}, ErrNotOnRamp},
		{"kind 253 with half an ExID", []byte{0xfd, 0x03, 0xcc}, ErrNotOnRamp},

		// Length byte and buffer disagree.
		{"stamp truncated", workedStampWire[:11], ErrMalformed},
		{"stamp header only", workedStampWire[:4], ErrMalformed},
		{"echo truncated", workedEchoWire[:12], ErrMalformed},
		{"stamp with a byte more", cat(workedStampWire, []byte{0}), ErrMalformed},
		{"echo followed by another option", cat(workedEchoWire, []byte{1, 1, 1, 1}), ErrMalformed},
		{"length byte 16 on 12 bytes", cat([]byte{0xfd, 0x10}, workedStampWire[2:]), ErrMalformed},
		{"length byte 12 on 16 bytes", cat([]byte{0xfd, 0x0c}, workedEchoWire[2:]), ErrMalformed},
		{"length byte 0", []byte{0xfd, 0x00, 0xcc, 0x20}, ErrMalformed},
		{"length byte 1", []byte{0xfd, 0x01, 0xcc, 0x20}, ErrMalformed},

		// Consistent length byte, wrong length for the ExID.
		{"stamp of 16", cat([]byte{0xfd, 0x10, 0xcc, 0x20}, zeros(12)), ErrMalformed},
		{"stamp of 8", cat([]byte{0xfd, 0x08, 0xcc, 0x20}, zeros(4)), ErrMalformed},
		{"stamp of 4", []byte{0xfd, 0x04, 0xcc, 0x20}, ErrMalformed},
		{"stamp of 13", cat([]byte{0xfd, 0x0d, 0xcc, 0x20}, zeros(9)), ErrMalformed},
		{"echo of 12", cat([]byte{0xfd, 0x0c, 0xcc, 0x21}, zeros(8)), ErrMalformed},
		{"echo of 20", cat([]byte{0xfd, 0x14, 0xcc, 0x21}, zeros(16)), ErrMalformed},
		{"echo of 4", []byte{0xfd, 0x04, 0xcc, 0x21}, ErrMalformed},
		{"pad of 4", []byte{0xfd, 0x04, 0xcc, 0x2f}, ErrMalformed},
		{"pad of 8", cat([]byte{0xfd, 0x08, 0xcc, 0x2f}, zeros(4)), ErrMalformed},
		{"pad of 14", cat([]byte{0xfd, 0x0e, 0xcc, 0x2f}, zeros(10)), ErrMalformed},
		{"pad of 20", cat([]byte{0xfd, 0x14, 0xcc, 0x2f}, zeros(16)), ErrMalformed},
		{"pad of 40", cat([]byte{0xfd, 0x28, 0xcc, 0x2f}, zeros(36)), ErrMalformed},

		// PAD payload not zero.
		{"pad 12 first byte set", cat([]byte{0xfd, 0x0c, 0xcc, 0x2f, 0x01}, zeros(7)), ErrMalformed},
		{"pad 12 last byte set", cat([]byte{0xfd, 0x0c, 0xcc, 0x2f}, zeros(7), []byte{0x80}), ErrMalformed},
		{"pad 16 middle byte set", cat([]byte{0xfd, 0x10, 0xcc, 0x2f}, zeros(5), []byte{0x10}, zeros(6)), ErrMalformed},
		{"pad 16 holding an echo", cat([]byte{0xfd, 0x10, 0xcc, 0x2f}, workedEchoWire[4:]), ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := ParseOption(tt.in)
			if err == nil {
				t.Fatalf("ParseOption(% x) = %v, want an error", tt.in, o)
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("ParseOption(% x): %v, want one wrapping %v", tt.in, err, tt.want)
			}
			if o != (Option{}) {
				t.Fatalf("ParseOption(% x) failed but returned %+v", tt.in, o)
			}
		})
	}
}

func TestOptionEchoNoClock(t *testing.T) {
	tests := []struct {
		owd  int32
		want bool
	}{
		{NoClock, true},
		{NoClock + 1, false},
		{0, false},
		{-1, false},
		{math.MaxInt32, false},
	}
	for _, tt := range tests {
		if got := (Echo{OWDNs: tt.owd, TxNs: 5, PauseNs: 6}).NoClock(); got != tt.want {
			t.Errorf("Echo{OWDNs: %d}.NoClock() = %v, want %v", tt.owd, got, tt.want)
		}
	}
	b, err := (Option{ExID: ExIDEcho, Echo: Echo{OWDNs: NoClock}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b[4:8], []byte{0x80, 0, 0, 0}) {
		t.Fatalf("NoClock is % x on the wire, want 80 00 00 00", b[4:8])
	}
}

func TestOptionString(t *testing.T) {
	tests := []struct {
		opt  Option
		want string
	}{
		{workedStamp, "stamp tx=4294957296ns pause=125000ns"},
		{workedEcho, "echo owd=30000ns tx=4294957296ns pause=125000ns"},
		{Option{ExID: ExIDEcho, Echo: Echo{OWDNs: -1500, TxNs: 1, PauseNs: 2}}, "echo owd=-1500ns tx=1ns pause=2ns"},
		{Option{ExID: ExIDEcho, Echo: Echo{OWDNs: NoClock, TxNs: 1, PauseNs: 2}}, "echo owd=none tx=1ns pause=2ns"},
		{Option{ExID: ExIDPad, PadLen: 12}, "pad 12"},
		{Option{ExID: ExIDPad, PadLen: 16}, "pad 16"},
		{Option{ExID: 0xCC10}, "Option(ExID 0xcc10)"},
		{Option{}, "Option(ExID 0x0000)"},
	}
	for _, tt := range tests {
		if got := tt.opt.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

func TestOptionLen(t *testing.T) {
	tests := []struct {
		opt  Option
		want int
	}{
		{Option{ExID: ExIDStamp}, StampLen},
		{Option{ExID: ExIDEcho}, EchoLen},
		{Option{ExID: ExIDPad, PadLen: 12}, 12},
		{Option{ExID: ExIDPad, PadLen: 16}, 16},
		{Option{ExID: 0xCC11}, 0},
	}
	for _, tt := range tests {
		if got := tt.opt.Len(); got != tt.want {
			t.Errorf("%v: Len() = %d, want %d", tt.opt, got, tt.want)
		}
	}
	if StampLen != 12 || EchoLen != 16 || OptionKind != 253 {
		t.Fatalf("wire constants changed: StampLen %d, EchoLen %d, OptionKind %d", StampLen, EchoLen, OptionKind)
	}
}

func TestOptionDeltas(t *testing.T) {
	tests := []struct {
		name         string
		newer, older uint32
		want         uint32
	}{
		{"equal", 5, 5, 0},
		{"forward", 1_000, 400, 600},
		// The worked example: the ECHO arrives when the sender's clock's
		// low 32 bits read 60,000, after they wrapped.
		{"across the wrap", 60_000, 1<<32 - 10_000, 70_000},
		{"just across the wrap", 0, math.MaxUint32, 1},
		{"largest", math.MaxUint32, 0, math.MaxUint32},
		// Passing the timestamps the wrong way round reads as nearly a
		// whole period, not as a negative number.
		{"reversed", 400, 1_000, 1<<32 - 600},
	}
	for _, tt := range tests {
		if got := TxDelta(tt.newer, tt.older); got != tt.want {
			t.Errorf("%s: TxDelta(%d, %d) = %d, want %d", tt.name, tt.newer, tt.older, got, tt.want)
		}
		if got := PauseDelta(tt.newer, tt.older); got != tt.want {
			t.Errorf("%s: PauseDelta(%d, %d) = %d, want %d", tt.name, tt.newer, tt.older, got, tt.want)
		}
	}
}

func TestOptionOneWayDelay(t *testing.T) {
	tests := []struct {
		name   string
		rx, tx uint32
		offset int64
		want   int32
	}{
		// The worked example: tx is 10 µs before the wrap, the sender's
		// clock is 1.5 µs ahead, and the segment takes 30 µs, so the
		// receiver reads 2^32 − 10,000 − 1,500 + 30,000 = 18,500 mod 2^32.
		{"worked example", 18_500, 1<<32 - 10_000, 1_500, 30_000},
		{"synchronised", 2_000, 1_000, 0, 1_000},
		{"sender behind", 2_000, 1_000, -300, 700},
		// A sender hours ahead: only the offset's low 32 bits matter.
		{"large offset", 123, uint32((3_600_000_000_000 + 123 - 40_000) % (1 << 32)), 3_600_000_000_000, 40_000},
		{"large negative offset", 40_000, uint32((1<<43 - 7_200_000_000_000) % (1 << 32)), -7_200_000_000_000 - 1<<40, 40_000},
		// A clock offset that is off by more than the delay.
		{"negative", 1_000, 2_000, 500, -500},
		{"largest", math.MaxInt32, 0, 0, math.MaxInt32},
		{"smallest", 1<<31 + 1, 0, 0, NoClock + 1},
		// −2^31 is NoClock on the wire, so it must never be written as
		// a measurement.
		{"would read as no clock", 1 << 31, 0, 0, NoClock + 1},
		{"would read as no clock via the offset", 0, 0, 1 << 31, NoClock + 1},
	}
	for _, tt := range tests {
		if got := OneWayDelay(tt.rx, tt.tx, tt.offset); got != tt.want {
			t.Errorf("%s: OneWayDelay(%d, %d, %d) = %d, want %d", tt.name, tt.rx, tt.tx, tt.offset, got, tt.want)
		}
	}
}

// Options areas for the FindOption tests.
var (
	// NOP, NOP, timestamps (kind 8, length 10, TSval, TSecr), as Linux
	// writes them.
	optTS = []byte{0x01, 0x01, 0x08, 0x0a, 0, 0, 0, 1, 0, 0, 0, 2}
	// INT FORWARD with 1 empty slot, and INT ECHO with 1 hop.
	optINTForward = []byte{0xfd, 0x0c, 0xcc, 0x10, 0, 0, 0, 0, 0, 0, 0, 0}
	optINTEcho    = []byte{0xfd, 0x0c, 0xcc, 0x11, 0x50, 0x00, 0x00, 0x10, 0x00, 0x02, 0x00, 0x03}
	// Kind 253 with the TCP Fast Open ExID 0xf989 and a cookie.
	optForeign = []byte{0xfd, 0x08, 0xf9, 0x89, 1, 2, 3, 4}
	// NOP, NOP, SACK (kind 5) with one block.
	optSACK = []byte{0x01, 0x01, 0x05, 0x0a, 0, 0, 0, 1, 0, 0, 0, 2}
	// PADs as sockops reserves them on data segments and pure ACKs.
	optPad12 = []byte{0xfd, 0x0c, 0xcc, 0x2f, 0, 0, 0, 0, 0, 0, 0, 0}
	optPad16 = []byte{0xfd, 0x10, 0xcc, 0x2f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
)

func TestFindOption(t *testing.T) {
	pad12 := Option{ExID: ExIDPad, PadLen: 12}
	pad16 := Option{ExID: ExIDPad, PadLen: 16}
	tests := []struct {
		name  string
		in    []byte
		found bool
		want  Option
	}{
		{"nil", nil, false, Option{}},
		{"only NOPs", []byte{1, 1, 1, 1}, false, Option{}},
		{"only EOL", []byte{0, 0, 0, 0}, false, Option{}},
		{"only timestamps", optTS, false, Option{}},
		{"stamp alone", workedStampWire, true, workedStamp},
		{"echo alone", workedEchoWire, true, workedEcho},
		{"data segment: timestamps, stamp, INT forward", cat(optTS, workedStampWire, optINTForward), true, workedStamp},
		{"data segment: INT forward first", cat(optTS, optINTForward, workedStampWire), true, workedStamp},
		{"pure ACK: timestamps, echo, INT echo", cat(optTS, workedEchoWire, optINTEcho), true, workedEcho},
		{"pure ACK: INT echo first", cat(optINTEcho, workedEchoWire), true, workedEcho},
		{"unfilled data segment", cat(optTS, optPad12), true, pad12},
		{"unfilled pure ACK", cat(optTS, optPad16), true, pad16},
		{"NOP padding before", cat([]byte{1, 1, 1, 1}, workedEchoWire), true, workedEcho},
		{"single NOPs between", cat([]byte{1}, optINTEcho, []byte{1, 1, 1}, workedEchoWire), true, workedEcho},
		{"SACK after", cat(workedEchoWire, optSACK), true, workedEcho},
		{"SACK before", cat(optSACK, workedEchoWire), true, workedEcho},
		{"EOL padding after", cat(optTS, workedStampWire, []byte{0, 0, 0, 0}), true, workedStamp},
		{"foreign ExID skipped", cat(optForeign, workedEchoWire), true, workedEcho},
		{"only other experiments", cat(optTS, optForeign, optINTForward), false, Option{}},
		{"kind 253 without ExID skipped", cat([]byte{0xfd, 0x02, 1, 1}, workedStampWire), true, workedStamp},
		{"kind 253 with half an ExID skipped", cat([]byte{0xfd, 0x03, 0xcc, 1}, workedStampWire), true, workedStamp},
		// A foreign ExID is never parsed, however odd its length.
		{"odd foreign option skipped", cat([]byte{0xfd, 0x05, 0xcc, 0x30, 0xff}, workedStampWire), true, workedStamp},
		{"first of two", cat(workedEchoWire, workedStampWire), true, workedEcho},
		{"pad before a stamp", cat(optPad16, workedStampWire), true, pad16},
		{"hidden after EOL", cat(optTS, []byte{0}, workedStampWire), false, Option{}},
		// Bytes after EOL are padding, even if they would not walk.
		{"garbage after EOL", cat([]byte{0}, []byte{8, 0xff}), false, Option{}},
		{"malformed ours after EOL", cat([]byte{0}, workedStampWire[:8]), false, Option{}},
		// The walk stops at the option found.
		{"garbage after ours", cat(workedStampWire, []byte{8, 0xff}), true, workedStamp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, found, err := FindOption(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if found != tt.found || o != tt.want {
				t.Fatalf("FindOption(% x) = %v, %v; want %v, %v", tt.in, o, found, tt.want, tt.found)
			}
		})
	}
}

func TestFindOptionMalformed(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
	}{
		{"length 0", []byte{0x08, 0x00, 0, 0}},
		{"length 1", []byte{0x01, 0x05, 0x01}},
		{"no length byte", []byte{0x01, 0x01, 0x08}},
		{"kind 253 without length byte", []byte{0x01, 0x01, 0x01, 0xfd}},
		{"length past the end", []byte{0x08, 0x0a, 0, 0, 0, 1}},
		{"stamp past the end", workedStampWire[:8]},
		{"echo past the end", cat(optTS, workedEchoWire[:15])},
		{"bad walk before ours", cat([]byte{0x02, 0x01}, workedStampWire)},
		{"bad walk after an INT option", cat(optINTEcho, []byte{0x05, 0x00}, workedEchoWire)},
		{"stamp of 16", cat([]byte{0xfd, 0x10, 0xcc, 0x20}, make([]byte, 12))},
		{"echo of 12", cat(optTS, []byte{0xfd, 0x0c, 0xcc, 0x21}, make([]byte, 8))},
		{"pad of 20", cat([]byte{0xfd, 0x14, 0xcc, 0x2f}, make([]byte, 16))},
		{"pad not zero", cat(optTS, []byte{0xfd, 0x0c, 0xcc, 0x2f, 0, 0, 0, 0, 0, 0, 0, 1})},
		{"stamp of 4", []byte{0xfd, 0x04, 0xcc, 0x20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, found, err := FindOption(tt.in)
			if err == nil {
				t.Fatalf("FindOption(% x) = %v, %v, want an error", tt.in, o, found)
			}
			if found || o != (Option{}) {
				t.Fatalf("FindOption(% x) returns %v, found %v, with error %v", tt.in, o, found, err)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("FindOption(% x): %v does not wrap ErrMalformed", tt.in, err)
			}
			opts, err := FindOptions(tt.in)
			if err == nil || opts != nil || !errors.Is(err, ErrMalformed) {
				t.Fatalf("FindOptions(% x) = %v, %v; want nil and an error wrapping ErrMalformed", tt.in, opts, err)
			}
		})
	}
}

func TestFindOptions(t *testing.T) {
	pad12 := Option{ExID: ExIDPad, PadLen: 12}
	tests := []struct {
		name string
		in   []byte
		want []Option
	}{
		{"nil", nil, nil},
		{"only timestamps and INT", cat(optTS, optINTEcho), nil},
		{"one", cat(optTS, workedEchoWire, optINTEcho), []Option{workedEcho}},
		{"all in order", cat(workedStampWire, optINTForward, optPad12, workedEchoWire), []Option{workedStamp, pad12, workedEcho}},
		{"skipping foreign and NOPs", cat(optForeign, []byte{1}, workedStampWire, []byte{1, 1, 1}, workedStampWire), []Option{workedStamp, workedStamp}},
		{"stopping at EOL", cat(workedStampWire, []byte{0}, workedEchoWire), []Option{workedStamp}},
		{"ignoring garbage after EOL", cat(workedEchoWire, []byte{0, 8, 0xff}), []Option{workedEcho}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FindOptions(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("FindOptions(% x) = %v, want %v", tt.in, got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("FindOptions(% x) = %v, want %v", tt.in, got, tt.want)
				}
			}
		})
	}
	// FindOption looks no further than the option it finds; FindOptions
	// walks the whole area.
	in := cat(workedStampWire, []byte{8, 0xff})
	if _, found, err := FindOption(in); !found || err != nil {
		t.Fatalf("FindOption(% x) = %v, %v; want found", in, found, err)
	}
	if opts, err := FindOptions(in); !errors.Is(err, ErrMalformed) {
		t.Fatalf("FindOptions(% x) = %v, %v; want an error wrapping ErrMalformed", in, opts, err)
	}
}

// TestOptionWorkedExampleInDoc checks that the hex dumps in the worked
// example of docs/onramp-option.md are what Marshal produces for those
// options, and that the field tables show the same bytes.
func TestOptionWorkedExampleInDoc(t *testing.T) {
	doc, err := os.ReadFile("../docs/onramp-option.md")
	if err != nil {
		t.Fatalf("read the format documentation: %v", err)
	}
	for _, o := range []Option{workedStamp, workedEcho} {
		b, err := o.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		dump := hex.Dump(b)
		if !strings.Contains(string(doc), "```\n"+dump+"```\n") {
			t.Errorf("docs/onramp-option.md does not hold the dump of %v:\n%s", o, dump)
		}
	}
	for _, line := range []string{
		"| 2–3 | `cc 20` | ExID | 0xCC20: STAMP |",
		"| 4–7 | `ff ff d8 f0` | tx | 4,294,957,296 ns = 2^32 − 10,000 |",
		"| 8–11 | `00 01 e8 48` | pause | 125,000 ns |",
		"| 2–3 | `cc 21` | ExID | 0xCC21: ECHO |",
		"| 4–7 | `00 00 75 30` | owd | 30,000 ns |",
		"| 8–11 | `ff ff d8 f0` | tx | the STAMP's |",
		"| 12–15 | `00 01 e8 48` | pause | the STAMP's |",
		"0xcc21\t00007530ffffd8f00001e848",
	} {
		if !strings.Contains(string(doc), line) {
			t.Errorf("docs/onramp-option.md lacks the line %q", line)
		}
	}
	// The numbers of the story around the dumps.
	if got := OneWayDelay(18_500, workedStamp.Stamp.TxNs, 1_500); got != workedEcho.Echo.OWDNs {
		t.Errorf("OneWayDelay of the worked example = %d, want %d", got, workedEcho.Echo.OWDNs)
	}
	if workedEcho.Echo.TxNs != workedStamp.Stamp.TxNs || workedEcho.Echo.PauseNs != workedStamp.Stamp.PauseNs {
		t.Errorf("the worked example's ECHO does not copy its STAMP")
	}
}
