package telemetry

import "time"

// MaxSampleGap is the longest interval, on the consumer's own clock, over
// which a consumer may difference two records of the same hop. It is about
// half the 16.777216 ms wrap period of the timestamp, which leaves room for
// jitter between the consumer's clock and the hop's. See also
// [SampleGapForRate], which is shorter on fast links.
const MaxSampleGap = 8 * time.Millisecond

// TimestampDelta returns the nanoseconds from older to newer, two
// timestamps of the same hop, modulo 2^24. It is right only if less than
// 16.777216 ms passed between them.
func TimestampDelta(newer, older uint32) uint32 {
	return (newer - older) & MaxTimestamp
}

// TxBytesDelta returns the bytes transmitted from older to newer, two TxBytes
// counters of the same hop, computed modulo 2^20 units (128 MiB). It is right
// only if the port sent less than 128 MiB between them.
func TxBytesDelta(newer, older uint32) uint64 {
	return uint64((newer-older)&MaxTxBytes) * TxBytesUnit
}

// QueueBytesFromUnits converts a queue length in units of [QlenUnit] to
// bytes.
func QueueBytesFromUnits(q uint16) uint64 {
	return uint64(q) * QlenUnit
}

// QlenUnits converts a queue length in bytes to units of [QlenUnit], rounded
// down and saturating at [MaxQlen] (5,242,800 bytes).
func QlenUnits(bytes uint64) uint16 {
	return uint16(min(bytes/QlenUnit, MaxQlen))
}

// TxBytesWrapPeriod returns how long a port at rateBps, sending flat out,
// takes to wrap the TxBytes counter (128 MiB), or 0 for a zero rate.
func TxBytesWrapPeriod(rateBps uint64) time.Duration {
	if rateBps == 0 {
		return 0
	}
	const wrapBits = (MaxTxBytes + 1) * TxBytesUnit * 8
	return time.Duration(wrapBits * uint64(time.Second) / rateBps)
}

// SampleGapForRate returns the longest interval over which a consumer may
// difference two records of a hop whose link runs at rateBps: the smaller of
// [MaxSampleGap] and half of [TxBytesWrapPeriod]. From 100 Gbit/s up (above
// about 67 Gbit/s) the TxBytes counter, not the timestamp, limits the gap.
func SampleGapForRate(rateBps uint64) time.Duration {
	if rateBps == 0 {
		return MaxSampleGap
	}
	return min(MaxSampleGap, TxBytesWrapPeriod(rateBps)/2)
}
