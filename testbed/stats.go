package testbed

import "slices"

// QueueStats summarises the backlog of a series of QueueSamples, in bytes.
type QueueStats struct {
	// Mean, P50 (median), P99 and Max backlog in bytes.
	Mean, P50, P99, Max float64
	// N is the number of samples summarised.
	N int
}

// Summarize returns the mean, median, 99th percentile and maximum of the
// samples' BacklogBytes.
//
// Percentiles use the nearest-rank method: the p-th percentile of N sorted
// values is the value at 1-based rank ceil(p/100 * N), so it is always one of
// the samples. No samples yield the zero QueueStats.
func Summarize(samples []QueueSample) QueueStats {
	n := len(samples)
	if n == 0 {
		return QueueStats{}
	}

	backlog := make([]uint32, n)
	var sum float64
	for i, s := range samples {
		backlog[i] = s.BacklogBytes
		sum += float64(s.BacklogBytes)
	}
	slices.Sort(backlog)

	return QueueStats{
		Mean: sum / float64(n),
		P50:  float64(nearestRank(backlog, 50)),
		P99:  float64(nearestRank(backlog, 99)),
		Max:  float64(backlog[n-1]),
		N:    n,
	}
}

// nearestRank returns the p-th percentile (0 < p <= 100) of sorted, which
// must not be empty.
func nearestRank(sorted []uint32, p int) uint32 {
	rank := (p*len(sorted) + 99) / 100 // ceil(p*N/100) in integers
	rank = max(rank, 1)
	return sorted[rank-1]
}
