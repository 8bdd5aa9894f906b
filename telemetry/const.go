package telemetry

// Wire constants of the INT option. docs/int-option.md is the normative
// description.
const (
	// OptionKind is the TCP option kind: 253, the RFC 6994 experimental kind.
	OptionKind = 253
	// ExIDForward is the experiment ID of a FORWARD option.
	ExIDForward = 0xCC10
	// ExIDEcho is the experiment ID of an ECHO option.
	ExIDEcho = 0xCC11
	// HeaderSize is the size in bytes of kind, length and ExID.
	HeaderSize = 4
	// HopSize is the size in bytes of one hop slot.
	HopSize = 8
	// MaxHops is the largest number of hop slots in one option.
	MaxHops = 4
	// MaxOptionSize is the size in bytes of an option with MaxHops slots.
	MaxOptionSize = HeaderSize + MaxHops*HopSize
	// TxBytesUnit is the unit, in bytes, of a hop's TxBytes counter.
	TxBytesUnit = 128
	// QlenUnit is the unit, in bytes, of a hop's Qlen.
	QlenUnit = 80
)

// Widths in bits of the fields of a hop word.
const (
	RateCodeBits  = 4
	TimestampBits = 24
	TxBytesBits   = 20
	QlenBits      = 16
)

// Largest values of the fields of a hop word.
const (
	MaxTimestamp = 1<<TimestampBits - 1
	MaxTxBytes   = 1<<TxBytesBits - 1
	MaxQlen      = 1<<QlenBits - 1
)

// Bit positions of the fields of a hop word (bit 0 is the least significant).
const (
	qlenShift      = 0
	txBytesShift   = qlenShift + QlenBits
	timestampShift = txBytesShift + TxBytesBits
	rateCodeShift  = timestampShift + TimestampBits
)

// The fields must tile the 64-bit word exactly, or the codec is not
// canonical. One of these constants overflows uint, and the package fails to
// compile, if they do not.
const (
	_ uint = 64 - (rateCodeShift + RateCodeBits)
	_ uint = (rateCodeShift + RateCodeBits) - 64
)
