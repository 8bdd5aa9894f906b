package stats

import (
	"math"
	"time"
)

// FCT is one completed flow: its size and its flow completion time.
type FCT struct {
	Bytes    int64
	Duration time.Duration
	// QueueDelay is the longest the bottleneck's queue would have held a
	// packet at any of its readings while the flow lived (the caller
	// decides the span; the bench takes the connection's whole life): the
	// largest backlog read, at the line rate. It is valid only when Queued
	// is set.
	QueueDelay time.Duration
	Queued     bool
}

// Size bucket names, in the order Buckets reports them. KB is 1000 bytes
// and MB is 1e6 bytes.
const (
	BucketSmall  = "<10KB"    // Bytes < 10_000
	BucketMedium = "10KB-1MB" // 10_000 <= Bytes <= 1_000_000
	BucketLarge  = ">1MB"     // Bytes > 1_000_000
	BucketAll    = "all"      // every flow
)

// Bucket boundaries in bytes; see BucketOf.
const (
	SmallLimit = 10_000    // smallest size in the medium bucket
	LargeLimit = 1_000_000 // largest size in the medium bucket
)

// BucketOf returns the name of the size bucket a flow of bytes belongs to:
// BucketSmall below 10_000 bytes, BucketMedium from 10_000 to 1_000_000
// bytes inclusive, BucketLarge above 1_000_000 bytes.
func BucketOf(bytes int64) string {
	switch {
	case bytes < SmallLimit:
		return BucketSmall
	case bytes <= LargeLimit:
		return BucketMedium
	default:
		return BucketLarge
	}
}

// BucketSummary describes the FCTs of the flows in one size bucket. FCTs
// are in microseconds. Slowdown is FCT / ideal FCT for the flow's size; it
// is not clamped, so values below 1 (a flow faster than the ideal model)
// show up as they are. Percentiles use the nearest-rank definition (see
// Percentile). All statistics are 0 when Count is 0.
type BucketSummary struct {
	Name  string
	Count int

	MeanUs float64
	P50Us  float64
	P99Us  float64
	P999Us float64

	// SlowdownCount is how many flows have a slowdown: those whose ideal
	// FCT is positive. It equals Count unless ideal is nil or returns 0.
	SlowdownCount int
	MeanSlowdown  float64
	P50Slowdown   float64
	P99Slowdown   float64
	P999Slowdown  float64
}

// Buckets summarises fcts by flow size. It always returns four summaries,
// in this order: BucketSmall, BucketMedium, BucketLarge, BucketAll (empty
// buckets included, with Count 0). ideal gives the ideal FCT of a flow of a
// given size, for instance a closure over IdealFCT; flows for which it
// returns 0 or less are left out of the slowdown statistics (but not of
// the FCT statistics), and a nil ideal leaves all slowdowns at 0.
func Buckets(fcts []FCT, ideal func(bytes int64) time.Duration) []BucketSummary {
	names := []string{BucketSmall, BucketMedium, BucketLarge, BucketAll}
	fctUs := make(map[string][]float64, len(names))
	slow := make(map[string][]float64, len(names))
	for _, f := range fcts {
		us := float64(f.Duration) / float64(time.Microsecond)
		b := BucketOf(f.Bytes)
		fctUs[b] = append(fctUs[b], us)
		fctUs[BucketAll] = append(fctUs[BucketAll], us)
		if ideal == nil {
			continue
		}
		if id := ideal(f.Bytes); id > 0 {
			s := float64(f.Duration) / float64(id)
			slow[b] = append(slow[b], s)
			slow[BucketAll] = append(slow[BucketAll], s)
		}
	}
	out := make([]BucketSummary, len(names))
	for i, name := range names {
		us := Sorted(fctUs[name])
		sd := Sorted(slow[name])
		out[i] = BucketSummary{
			Name:          name,
			Count:         len(us),
			MeanUs:        mean(us),
			P50Us:         Percentile(us, 50),
			P99Us:         Percentile(us, 99),
			P999Us:        Percentile(us, 99.9),
			SlowdownCount: len(sd),
			MeanSlowdown:  mean(sd),
			P50Slowdown:   Percentile(sd, 50),
			P99Slowdown:   Percentile(sd, 99),
			P999Slowdown:  Percentile(sd, 99.9),
		}
	}
	return out
}

// HeaderBytes is the per-packet overhead IdealFCT adds to each segment:
// 14 bytes of Ethernet header, 20 of IPv4 and 20 of TCP without options.
// It leaves out the Ethernet preamble, inter-frame gap and frame check
// sequence, and TCP options such as timestamps, so the ideal is slightly
// optimistic.
const HeaderBytes = 14 + 20 + 20

// IdealFCT returns the completion time of a flow of bytes bytes alone on an
// idle path: one base RTT for the TCP handshake, one base RTT for the data
// to reach the receiver and the last acknowledgement to return, and the
// serialisation of the payload plus HeaderBytes per segment at rateBps:
//
//	2·baseRTT + (bytes + ⌈bytes/mss⌉·HeaderBytes)·8 / rateBps
//
// rounded to the nearest nanosecond. A flow of 0 bytes or less costs only
// the two RTTs. If rateBps or mss is not positive there is no meaningful
// ideal and IdealFCT returns 0, which Buckets treats as "no slowdown".
func IdealFCT(bytes int64, rateBps float64, baseRTT time.Duration, mss int) time.Duration {
	if !(rateBps > 0) || mss <= 0 {
		return 0
	}
	rtts := 2 * baseRTT
	if bytes <= 0 {
		return rtts
	}
	segments := bytes / int64(mss)
	if bytes%int64(mss) != 0 {
		segments++
	}
	wire := float64(bytes) + float64(segments)*HeaderBytes
	serial := wire * 8 / rateBps // seconds
	return rtts + time.Duration(math.Round(serial*1e9))
}
