package telemetry

import "fmt"

// Direction tells a FORWARD option from an ECHO option.
type Direction uint8

// The directions of an INT option. The zero Direction is invalid, so that an
// Option whose Direction was never set fails to marshal.
const (
	// Forward is carried by data segments towards the receiver; INT hops
	// write their records into it.
	Forward Direction = iota + 1
	// Echo is carried by ACKs back to the sender; it holds the hop records
	// the receiver saw, and hops never touch it.
	Echo
)

// String returns "forward", "echo", or Direction(N) for an invalid value.
func (d Direction) String() string {
	switch d {
	case Forward:
		return "forward"
	case Echo:
		return "echo"
	default:
		return fmt.Sprintf("Direction(%d)", uint8(d))
	}
}

// ExID returns the RFC 6994 experiment ID of the direction.
func (d Direction) ExID() (uint16, error) {
	switch d {
	case Forward:
		return ExIDForward, nil
	case Echo:
		return ExIDEcho, nil
	default:
		return 0, fmt.Errorf("invalid direction %d", uint8(d))
	}
}

// directionOf returns the direction of an experiment ID, and false if the ID
// is not one of ccload's.
func directionOf(exID uint16) (Direction, bool) {
	switch exID {
	case ExIDForward:
		return Forward, true
	case ExIDEcho:
		return Echo, true
	default:
		return 0, false
	}
}
