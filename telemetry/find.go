package telemetry

import (
	"encoding/binary"
	"fmt"
)

// TCP option kinds that have no length byte.
const (
	optEOL = 0 // end of option list
	optNOP = 1 // no operation (padding)
)

// FindOption walks a TCP options area (the bytes between the fixed 20-byte
// TCP header and the payload) and decodes the first INT option, FORWARD or
// ECHO, in it. Kind 253 options with another experiment ID, or too short to
// hold one, are skipped, as is everything after an end-of-list byte.
//
// It returns found == false and a nil error if there is no INT option. A
// TLV with a length below 2 or running past the end of the area is an error
// wrapping [ErrMalformed], as is an INT option that [ParseOption] rejects.
func FindOption(tcpOptions []byte) (opt Option, found bool, err error) {
	b := tcpOptions
	for i := 0; i < len(b); {
		kind := b[i]
		switch kind {
		case optEOL:
			return Option{}, false, nil
		case optNOP:
			i++
			continue
		}
		if i+1 >= len(b) {
			return Option{}, false, fmt.Errorf("find INT option: kind %d at offset %d has no length byte: %w", kind, i, ErrMalformed)
		}
		n := int(b[i+1])
		if n < 2 {
			return Option{}, false, fmt.Errorf("find INT option: kind %d at offset %d has length %d: %w", kind, i, n, ErrMalformed)
		}
		if i+n > len(b) {
			return Option{}, false, fmt.Errorf("find INT option: kind %d at offset %d has length %d, past the end of %d bytes: %w", kind, i, n, len(b), ErrMalformed)
		}
		if kind == OptionKind && n >= HeaderSize {
			if _, ours := directionOf(binary.BigEndian.Uint16(b[i+2:])); ours {
				o, err := ParseOption(b[i : i+n])
				if err != nil {
					return Option{}, false, fmt.Errorf("find INT option: offset %d: %w", i, err)
				}
				return o, true, nil
			}
		}
		i += n
	}
	return Option{}, false, nil
}
