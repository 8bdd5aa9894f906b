// Package telemetry encodes and decodes ccload's in-band network telemetry
// (INT) TCP option.
//
// Data segments carry a FORWARD option with empty hop slots. Each software
// INT hop on the path writes its record (link rate, clock, transmitted
// bytes, queue length) into the first empty slot. The receiver copies the
// hop records back to the sender in an ECHO option on its ACKs, where
// congestion controls such as HPCC and PowerTCP read them.
//
// The option uses the RFC 6994 experimental form: kind 253, a length byte,
// a 16-bit experiment ID ([ExIDForward] or [ExIDEcho]) and 1 to [MaxHops]
// slots of [HopSize] bytes. docs/int-option.md describes the format in
// full; the BPF programs follow the same layout.
//
// Counters on the wire are narrow and wrap around. Use [TimestampDelta] and
// [TxBytesDelta] to difference two records of the same hop, and discard
// pairs further apart than [SampleGapForRate] of the hop's link rate (at most
// [MaxSampleGap], 8 ms).
package telemetry
