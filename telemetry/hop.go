package telemetry

import "fmt"

// Hop is the record one INT hop writes into a slot. Timestamp, TxBytes and
// Qlen hold the values as on the wire, in their wire units.
type Hop struct {
	// RateBps is the link rate of the hop's egress port in bit/s; it must be
	// one of [SupportedRates].
	RateBps uint64
	// Timestamp is the hop's clock in nanoseconds modulo 2^24. It wraps every
	// 16.777216 ms; see [TimestampDelta].
	Timestamp uint32
	// TxBytes is the number of bytes the egress port has transmitted, in
	// units of [TxBytesUnit], modulo 2^20. It wraps every 128 MiB; see
	// [TxBytesDelta].
	TxBytes uint32
	// Qlen is the egress queue length when the packet was scheduled, in
	// units of [QlenUnit], saturating at [MaxQlen]; see [QlenUnits].
	Qlen uint16
}

// QueueBytes returns the queue length in bytes.
func (h Hop) QueueBytes() uint64 { return QueueBytesFromUnits(h.Qlen) }

// String formats the hop for humans, for example
// "10Gbit/s ts=1000ns tx=5x128B q=3x80B".
func (h Hop) String() string {
	return fmt.Sprintf("%s ts=%dns tx=%dx%dB q=%dx%dB",
		FormatRate(h.RateBps), h.Timestamp, h.TxBytes, TxBytesUnit, h.Qlen, QlenUnit)
}

// EncodeHop returns the 64-bit word of a hop record. The rate must have a
// code, and Timestamp and TxBytes must fit their widths: out-of-range values
// are errors, not truncated, so that a caller who forgot to reduce a counter
// modulo 2^24 or 2^20 hears about it.
func EncodeHop(h Hop) (uint64, error) {
	code, err := RateCode(h.RateBps)
	if err != nil {
		return 0, fmt.Errorf("encode hop: %w", err)
	}
	if h.Timestamp > MaxTimestamp {
		return 0, fmt.Errorf("encode hop: timestamp %d does not fit in %d bits", h.Timestamp, TimestampBits)
	}
	if h.TxBytes > MaxTxBytes {
		return 0, fmt.Errorf("encode hop: txBytes %d does not fit in %d bits", h.TxBytes, TxBytesBits)
	}
	return uint64(code)<<rateCodeShift |
		uint64(h.Timestamp)<<timestampShift |
		uint64(h.TxBytes)<<txBytesShift |
		uint64(h.Qlen)<<qlenShift, nil
}

// DecodeHop returns the hop record of a 64-bit word. A word with rate code 0
// is an empty slot, not a record, and is an error, as is a reserved rate
// code. Every word DecodeHop accepts encodes back to itself.
func DecodeHop(w uint64) (Hop, error) {
	code := uint8(w >> rateCodeShift)
	if code == 0 {
		if w != 0 {
			return Hop{}, fmt.Errorf("decode hop %#016x: rate code 0 (empty slot) with other bits set: %w", w, ErrMalformed)
		}
		return Hop{}, fmt.Errorf("decode hop: empty slot")
	}
	rate, err := RateFromCode(code)
	if err != nil {
		return Hop{}, fmt.Errorf("decode hop %#016x: %w: %w", w, ErrMalformed, err)
	}
	return Hop{
		RateBps:   rate,
		Timestamp: uint32(w>>timestampShift) & MaxTimestamp,
		TxBytes:   uint32(w>>txBytesShift) & MaxTxBytes,
		Qlen:      uint16(w >> qlenShift),
	}, nil
}
