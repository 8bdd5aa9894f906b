package telemetry

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// Option is a decoded INT option.
type Option struct {
	// Direction is Forward or Echo.
	Direction Direction
	// Slots is the number of hop slots on the wire, 1 to MaxHops.
	Slots int
	// Hops are the filled slots in path order, first hop first. The slots
	// after them are empty. len(Hops) <= Slots.
	Hops []Hop
}

// Full reports whether every slot holds a record. A hop that finds the
// forward option full adds nothing, so a full option may describe only the
// first Slots hops of a longer path.
func (o Option) Full() bool {
	return o.Slots > 0 && len(o.Hops) >= o.Slots
}

// Len returns the size of the option on the wire in bytes: 4 + 8*Slots.
func (o Option) Len() int {
	return HeaderSize + HopSize*o.Slots
}

// AddHop records h in the first empty slot, as an INT hop does, and reports
// whether there was one. On a full option it changes nothing and returns
// false. It never writes into the array behind the caller's Hops slice.
func (o *Option) AddHop(h Hop) bool {
	if o.Full() {
		return false
	}
	o.Hops = append(o.Hops[:len(o.Hops):len(o.Hops)], h)
	return true
}

// Marshal returns the option in wire format: kind, length, ExID, then Slots
// 8-byte words, the hop records first and zeros (empty slots) after them.
// It fails if the direction is invalid, Slots is out of range, there are more
// hops than slots, or a hop does not encode (see [EncodeHop]).
func (o Option) Marshal() ([]byte, error) {
	exID, err := o.Direction.ExID()
	if err != nil {
		return nil, fmt.Errorf("marshal INT option: %w", err)
	}
	if o.Slots < 1 || o.Slots > MaxHops {
		return nil, fmt.Errorf("marshal INT option: %d slots, want 1 to %d", o.Slots, MaxHops)
	}
	if len(o.Hops) > o.Slots {
		return nil, fmt.Errorf("marshal INT option: %d hops in %d slots", len(o.Hops), o.Slots)
	}
	b := make([]byte, o.Len())
	b[0] = OptionKind
	b[1] = byte(o.Len())
	binary.BigEndian.PutUint16(b[2:], exID)
	for i, h := range o.Hops {
		w, err := EncodeHop(h)
		if err != nil {
			return nil, fmt.Errorf("marshal INT option: hop %d: %w", i, err)
		}
		binary.BigEndian.PutUint64(b[HeaderSize+i*HopSize:], w)
	}
	return b, nil
}

// ParseOption decodes one INT option. b starts at the kind byte and holds
// exactly the option: len(b) must equal the length byte.
//
// It returns an error wrapping [ErrNotINT] for another kind or experiment
// ID, and one wrapping [ErrMalformed] for a bad length or slot count, a
// reserved rate code, a filled slot after an empty one, or an empty slot
// (rate code 0) with any other bit set. Every option it accepts marshals
// back to b byte for byte.
func ParseOption(b []byte) (Option, error) {
	if len(b) < 2 {
		return Option{}, fmt.Errorf("parse INT option: %d bytes, no room for kind and length: %w", len(b), ErrMalformed)
	}
	if b[0] != OptionKind {
		return Option{}, fmt.Errorf("parse INT option: kind %d: %w", b[0], ErrNotINT)
	}
	if int(b[1]) != len(b) {
		return Option{}, fmt.Errorf("parse INT option: length byte %d, but %d bytes given: %w", b[1], len(b), ErrMalformed)
	}
	if len(b) < HeaderSize {
		return Option{}, fmt.Errorf("parse INT option: length %d leaves no room for an ExID: %w", len(b), ErrNotINT)
	}
	exID := binary.BigEndian.Uint16(b[2:])
	dir, ok := directionOf(exID)
	if !ok {
		return Option{}, fmt.Errorf("parse INT option: ExID %#04x: %w", exID, ErrNotINT)
	}
	body := len(b) - HeaderSize
	if body%HopSize != 0 || body == 0 || body > MaxHops*HopSize {
		return Option{}, fmt.Errorf("parse INT option: length %d, want 4+8N with N from 1 to %d: %w", len(b), MaxHops, ErrMalformed)
	}
	o := Option{Direction: dir, Slots: body / HopSize}
	for i := range o.Slots {
		w := binary.BigEndian.Uint64(b[HeaderSize+i*HopSize:])
		if w == 0 {
			continue
		}
		h, err := DecodeHop(w)
		if err != nil {
			return Option{}, fmt.Errorf("parse INT option: slot %d: %w", i, err)
		}
		if len(o.Hops) != i {
			return Option{}, fmt.Errorf("parse INT option: slot %d is filled after empty slot %d: %w", i, len(o.Hops), ErrMalformed)
		}
		o.Hops = append(o.Hops, h)
	}
	return o, nil
}

// String formats the option for humans, for example
// "forward 1/3 [10Gbit/s ts=1000ns tx=5x128B q=3x80B]".
func (o Option) String() string {
	hops := make([]string, len(o.Hops))
	for i, h := range o.Hops {
		hops[i] = h.String()
	}
	return fmt.Sprintf("%s %d/%d [%s]", o.Direction, len(o.Hops), o.Slots, strings.Join(hops, ", "))
}
