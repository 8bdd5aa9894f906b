package onramp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Wire constants of On-Ramp's TCP options. docs/onramp-option.md is the
// normative description; the BPF programs follow the same layout.
const (
	// OptionKind is the TCP option kind: 253, the RFC 6994 experimental
	// kind, which ccload's INT option shares.
	OptionKind = 253

	// StampLen is the size in bytes of a STAMP option: kind, length, ExID,
	// tx and pause.
	StampLen = 12
	// EchoLen is the size in bytes of an ECHO option: kind, length, ExID,
	// owd, tx and pause.
	EchoLen = 16
)

// RFC 6994 experiment IDs of On-Ramp's options. They follow INT's 0xCC10
// and 0xCC11: ccload's experiments are 0xCCx0 to 0xCCxF, On-Ramp's 0xCC2x.
const (
	// ExIDStamp is the experiment ID of a STAMP option, which the sender
	// writes on its data segments.
	ExIDStamp uint16 = 0xCC20
	// ExIDEcho is the experiment ID of an ECHO option, which the receiver
	// writes on its pure ACKs.
	ExIDEcho uint16 = 0xCC21
	// ExIDPad is the experiment ID of a PAD option: room reserved for a
	// STAMP or an ECHO that was not filled. Receivers ignore it.
	ExIDPad uint16 = 0xCC2F
)

// NoClock is the reserved value of [Echo.OWDNs], 0x80000000 on the wire:
// the receiver had no clock offset for the sender, so it could not compute
// a one-way delay. A sender never pauses on such an ECHO.
const NoClock int32 = math.MinInt32

// headerLen is the size in bytes of kind, length and ExID.
const headerLen = 4

var (
	// ErrNotOnRamp means that the bytes hold a TCP option, but not one of
	// On-Ramp's: another kind, or kind 253 with another experiment ID (INT's,
	// for example).
	ErrNotOnRamp = errors.New("not a ccload On-Ramp option")

	// ErrMalformed means that the bytes claim to be an On-Ramp option (or a
	// TCP options area) but break the format.
	ErrMalformed = errors.New("malformed On-Ramp option")
)

// Stamp is the payload of a STAMP option, written by the sender's tc egress
// program on a data segment.
type Stamp struct {
	// TxNs is the sender's CLOCK_TAI in ns, modulo 2^32, at the segment's
	// departure time: the earliest departure time (EDT) at which it leaves
	// the sender's fq qdisc. It wraps every 4.294967296 s.
	TxNs uint32
	// PauseNs is the flow's cumulative On-Ramp pause in ns, modulo 2^32,
	// when the segment departed.
	PauseNs uint32
}

// Echo is the payload of an ECHO option, written by the receiver's tc
// egress program on a pure ACK. It answers the newest STAMP the receiver
// got.
type Echo struct {
	// OWDNs is the one-way delay of the echoed STAMP's segment in ns, as the
	// receiver computed it (see [OneWayDelay]), or [NoClock].
	OWDNs int32
	// TxNs is the echoed STAMP's TxNs, unchanged.
	TxNs uint32
	// PauseNs is the echoed STAMP's PauseNs, unchanged.
	PauseNs uint32
}

// NoClock reports whether the ECHO carries no one-way delay because the
// receiver had no clock offset for the sender (OWDNs is [NoClock]). TxNs and
// PauseNs are still the STAMP's.
func (e Echo) NoClock() bool { return e.OWDNs == NoClock }

// Option is a decoded On-Ramp option. ExID says which kind it is, and only
// the matching part is meaningful; the others are zero:
//
//   - [ExIDStamp]: Stamp,
//   - [ExIDEcho]: Echo,
//   - [ExIDPad]: PadLen, the option's length, [StampLen] or [EchoLen].
type Option struct {
	// ExID is ExIDStamp, ExIDEcho or ExIDPad.
	ExID uint16
	// Stamp is the payload of a STAMP.
	Stamp Stamp
	// Echo is the payload of an ECHO.
	Echo Echo
	// PadLen is the length of a PAD in bytes, including kind, length and
	// ExID.
	PadLen int
}

// Len returns the size of the option on the wire in bytes: [StampLen] for a
// STAMP, [EchoLen] for an ECHO, PadLen for a PAD, and 0 for an unknown ExID.
func (o Option) Len() int {
	switch o.ExID {
	case ExIDStamp:
		return StampLen
	case ExIDEcho:
		return EchoLen
	case ExIDPad:
		return o.PadLen
	default:
		return 0
	}
}

// Marshal returns the option in wire format. It fails, with an error
// wrapping [ErrNotOnRamp], if ExID is not one of On-Ramp's, and with one
// wrapping [ErrMalformed] if a PAD's PadLen is neither [StampLen] nor
// [EchoLen] or a part that does not belong to the ExID is not zero.
func (o Option) Marshal() ([]byte, error) {
	var stray bool
	switch o.ExID {
	case ExIDStamp:
		stray = o.Echo != (Echo{}) || o.PadLen != 0
	case ExIDEcho:
		stray = o.Stamp != (Stamp{}) || o.PadLen != 0
	case ExIDPad:
		if o.PadLen != StampLen && o.PadLen != EchoLen {
			return nil, fmt.Errorf("marshal On-Ramp option: PAD of %d bytes, want %d or %d: %w", o.PadLen, StampLen, EchoLen, ErrMalformed)
		}
		stray = o.Stamp != (Stamp{}) || o.Echo != (Echo{})
	default:
		return nil, fmt.Errorf("marshal On-Ramp option: ExID %#04x: %w", o.ExID, ErrNotOnRamp)
	}
	if stray {
		return nil, fmt.Errorf("marshal On-Ramp option: %s with fields of another kind set (Stamp %+v, Echo %+v, PadLen %d): %w",
			exIDName(o.ExID), o.Stamp, o.Echo, o.PadLen, ErrMalformed)
	}
	b := make([]byte, o.Len())
	b[0] = OptionKind
	b[1] = byte(len(b))
	binary.BigEndian.PutUint16(b[2:], o.ExID)
	switch o.ExID {
	case ExIDStamp:
		binary.BigEndian.PutUint32(b[4:], o.Stamp.TxNs)
		binary.BigEndian.PutUint32(b[8:], o.Stamp.PauseNs)
	case ExIDEcho:
		binary.BigEndian.PutUint32(b[4:], uint32(o.Echo.OWDNs))
		binary.BigEndian.PutUint32(b[8:], o.Echo.TxNs)
		binary.BigEndian.PutUint32(b[12:], o.Echo.PauseNs)
	}
	return b, nil
}

// ParseOption decodes one On-Ramp option. b starts at the kind byte and
// holds exactly the option: len(b) must equal the length byte.
//
// It returns an error wrapping [ErrNotOnRamp] for another kind or
// experiment ID, and one wrapping [ErrMalformed] for a length byte that
// differs from len(b), a length other than the ExID's ([StampLen] for a
// STAMP, [EchoLen] for an ECHO, either for a PAD), or a PAD whose payload is
// not all zero. Every option it accepts marshals back to b byte for byte.
func ParseOption(b []byte) (Option, error) {
	if len(b) < 2 {
		return Option{}, fmt.Errorf("parse On-Ramp option: %d bytes, no room for kind and length: %w", len(b), ErrMalformed)
	}
	if b[0] != OptionKind {
		return Option{}, fmt.Errorf("parse On-Ramp option: kind %d: %w", b[0], ErrNotOnRamp)
	}
	if int(b[1]) != len(b) {
		return Option{}, fmt.Errorf("parse On-Ramp option: length byte %d, but %d bytes given: %w", b[1], len(b), ErrMalformed)
	}
	if len(b) < headerLen {
		return Option{}, fmt.Errorf("parse On-Ramp option: length %d leaves no room for an ExID: %w", len(b), ErrNotOnRamp)
	}
	o := Option{ExID: binary.BigEndian.Uint16(b[2:])}
	switch o.ExID {
	case ExIDStamp:
		if len(b) != StampLen {
			return Option{}, fmt.Errorf("parse On-Ramp option: STAMP of length %d, want %d: %w", len(b), StampLen, ErrMalformed)
		}
		o.Stamp = Stamp{
			TxNs:    binary.BigEndian.Uint32(b[4:]),
			PauseNs: binary.BigEndian.Uint32(b[8:]),
		}
	case ExIDEcho:
		if len(b) != EchoLen {
			return Option{}, fmt.Errorf("parse On-Ramp option: ECHO of length %d, want %d: %w", len(b), EchoLen, ErrMalformed)
		}
		o.Echo = Echo{
			OWDNs:   int32(binary.BigEndian.Uint32(b[4:])),
			TxNs:    binary.BigEndian.Uint32(b[8:]),
			PauseNs: binary.BigEndian.Uint32(b[12:]),
		}
	case ExIDPad:
		if len(b) != StampLen && len(b) != EchoLen {
			return Option{}, fmt.Errorf("parse On-Ramp option: PAD of length %d, want %d or %d: %w", len(b), StampLen, EchoLen, ErrMalformed)
		}
		for i, c := range b[headerLen:] {
			if c != 0 {
				return Option{}, fmt.Errorf("parse On-Ramp option: PAD byte %d is %#02x, want 0: %w", headerLen+i, c, ErrMalformed)
			}
		}
		o.PadLen = len(b)
	default:
		return Option{}, fmt.Errorf("parse On-Ramp option: ExID %#04x: %w", o.ExID, ErrNotOnRamp)
	}
	return o, nil
}

// isOurs reports whether exID is one of On-Ramp's.
func isOurs(exID uint16) bool {
	return exID == ExIDStamp || exID == ExIDEcho || exID == ExIDPad
}

// exIDName names an On-Ramp ExID for messages.
func exIDName(exID uint16) string {
	switch exID {
	case ExIDStamp:
		return "STAMP"
	case ExIDEcho:
		return "ECHO"
	case ExIDPad:
		return "PAD"
	default:
		return fmt.Sprintf("ExID %#04x", exID)
	}
}

// String formats the option for traces, for example
// "stamp tx=4294957296ns pause=125000ns",
// "echo owd=30000ns tx=4294957296ns pause=125000ns" ("owd=none" for
// [NoClock]) or "pad 16".
func (o Option) String() string {
	switch o.ExID {
	case ExIDStamp:
		return fmt.Sprintf("stamp tx=%dns pause=%dns", o.Stamp.TxNs, o.Stamp.PauseNs)
	case ExIDEcho:
		owd := "none"
		if !o.Echo.NoClock() {
			owd = fmt.Sprintf("%dns", o.Echo.OWDNs)
		}
		return fmt.Sprintf("echo owd=%s tx=%dns pause=%dns", owd, o.Echo.TxNs, o.Echo.PauseNs)
	case ExIDPad:
		return fmt.Sprintf("pad %d", o.PadLen)
	default:
		return fmt.Sprintf("Option(ExID %#04x)", o.ExID)
	}
}

// TCP option kinds that have no length byte.
const (
	optEOL = 0 // end of option list
	optNOP = 1 // no operation (padding)
)

// walk calls fn for each On-Ramp option in a TCP options area, in order,
// with its offset, until fn returns false. It stops at an end-of-list byte.
// A TLV with a length below 2 or running past the end of the area, or an
// On-Ramp option that ParseOption rejects, ends the walk with an error
// wrapping ErrMalformed.
func walk(b []byte, fn func(off int, o Option) bool) error {
	for i := 0; i < len(b); {
		kind := b[i]
		switch kind {
		case optEOL:
			return nil
		case optNOP:
			i++
			continue
		}
		if i+1 >= len(b) {
			return fmt.Errorf("kind %d at offset %d has no length byte: %w", kind, i, ErrMalformed)
		}
		n := int(b[i+1])
		if n < 2 {
			return fmt.Errorf("kind %d at offset %d has length %d: %w", kind, i, n, ErrMalformed)
		}
		if i+n > len(b) {
			return fmt.Errorf("kind %d at offset %d has length %d, past the end of %d bytes: %w", kind, i, n, len(b), ErrMalformed)
		}
		if kind == OptionKind && n >= headerLen && isOurs(binary.BigEndian.Uint16(b[i+2:])) {
			o, err := ParseOption(b[i : i+n])
			if err != nil {
				return fmt.Errorf("offset %d: %w", i, err)
			}
			if !fn(i, o) {
				return nil
			}
		}
		i += n
	}
	return nil
}

// FindOption walks a TCP options area (the bytes between the fixed 20-byte
// TCP header and the payload) and decodes the first On-Ramp option in it:
// a STAMP, an ECHO or a PAD (which the caller ignores). Kind 253 options
// with another experiment ID (INT's 0xCC10 and 0xCC11, TCP Fast Open's
// 0xF989, ...) or too short to hold one are skipped, as is everything after
// an end-of-list byte. The walk stops at the option found; what follows it
// is not checked.
//
// It returns found == false and a nil error if there is no On-Ramp option.
// A TLV with a length below 2 or running past the end of the area is an
// error wrapping [ErrMalformed], as is an On-Ramp option that [ParseOption]
// rejects.
func FindOption(tcpOptions []byte) (opt Option, found bool, err error) {
	err = walk(tcpOptions, func(_ int, o Option) bool {
		opt, found = o, true
		return false
	})
	if err != nil {
		return Option{}, false, fmt.Errorf("find On-Ramp option: %w", err)
	}
	return opt, found, nil
}

// FindOptions walks a whole TCP options area, as [FindOption] does, and
// decodes every On-Ramp option in it, in order. ccload's programs put at
// most one on a segment, beside other experiments' options (INT's) and
// Linux's own. It returns nil if there is none, and nil and an error
// wrapping [ErrMalformed] if any TLV before the end of the list is broken or
// any On-Ramp option is malformed.
func FindOptions(tcpOptions []byte) ([]Option, error) {
	var opts []Option
	err := walk(tcpOptions, func(_ int, o Option) bool {
		opts = append(opts, o)
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("find On-Ramp options: %w", err)
	}
	return opts, nil
}

// TxDelta returns newer − older modulo 2^32: the nanoseconds between two tx
// timestamps of the same host's clock, for example between a segment's
// departure and the sender's clock now (an RTT) or between two STAMPs. It
// is right only if the true difference is below 2^32 ns (4.294967296 s),
// and never negative: pass the later timestamp first.
func TxDelta(newer, older uint32) uint32 { return newer - older }

// PauseDelta returns newer − older modulo 2^32: how long, in ns, On-Ramp
// paused the flow between two samples of its cumulative pause, for example
// between the departures of two echoed segments. It is right only if the
// flow paused for less than 2^32 ns (4.294967296 s) in between.
func PauseDelta(newer, older uint32) uint32 { return newer - older }

// OneWayDelay returns the one-way delay that a receiver writes into an
// ECHO: rx − (tx − offset) modulo 2^32, as a signed number of ns. rxNs is
// the receiver's CLOCK_TAI (mod 2^32) when the segment arrived, txNs the
// STAMP's tx, and offsetNs the sender's clock minus the receiver's, from
// the clock agent's map. Only the low 32 bits of each matter, so the result
// is right whenever the true delay is within ±2^31 ns (±2.147 s). The one
// result that would read as [NoClock], −2^31, is returned as −2^31 + 1.
func OneWayDelay(rxNs, txNs uint32, offsetNs int64) int32 {
	owd := int32(rxNs - txNs + uint32(offsetNs))
	if owd == NoClock {
		return NoClock + 1
	}
	return owd
}
