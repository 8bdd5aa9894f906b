package telemetry

// Error is a sentinel error of this package. It is a string constant so that
// the package holds no mutable state; compare with errors.Is.
type Error string

// Error implements error.
func (e Error) Error() string { return string(e) }

const (
	// ErrNotINT means that the bytes hold a TCP option, but not one of
	// ccload's: another kind, or kind 253 with another experiment ID.
	ErrNotINT Error = "not a ccload INT option"

	// ErrMalformed means that the bytes claim to be a ccload INT option (or a
	// TCP options area, or a packet) but break the format.
	ErrMalformed Error = "malformed"

	// ErrUnsupportedRate means that a link rate has no rate code.
	ErrUnsupportedRate Error = "unsupported link rate"
)
