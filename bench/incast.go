package bench

import (
	"math"
	"time"

	"github.com/ccload/ccload/bench/stats"
	"github.com/ccload/ccload/testbed"
)

// incastPeriod is the time between two incasts.
const incastPeriod = 250 * time.Millisecond

// incastStarts returns when each incast of a run of c starts, after the
// start of its traffic: the first after a tenth of the run, then one every
// incastPeriod while at least half a period of the run is left. plan sends
// them, incastDrains reads them back.
func incastStarts(c Config) []time.Duration {
	var out []time.Duration
	for at := c.Duration / 10; at+incastPeriod/2 < c.Duration; at += incastPeriod {
		out = append(out, at)
	}
	return out
}

// incastDrainConfig is how the bench judges an incast's drain at rateBps:
// back to one GSO packet (64 KiB, the least a busy hop that forwards GSO
// packets holds) for 1.5 ms before the next incast starts, with the peak
// sought and the utilisation measured within 100 ms.
func incastDrainConfig(rateBps uint64) stats.DrainConfig {
	return stats.DrainConfig{
		RateBps: float64(rateBps), NearZero: 64 << 10, Hold: 1500 * time.Microsecond,
		PeakWindow: 100 * time.Millisecond, UtilWindow: 100 * time.Millisecond, Within: incastPeriod,
	}
}

// incastDrains analyses every incast in samples. starts are on the
// samples' clock; each incast's flows all start at once (workload.Incast),
// so its last flow starts when it does.
func incastDrains(samples []testbed.QueueSample, starts []time.Duration, cfg stats.DrainConfig) *IncastDrain {
	readings := make([]stats.QueueReading, len(samples))
	for i, x := range samples {
		readings[i] = stats.QueueReading{T: x.At, Backlog: float64(x.BacklogBytes), Sent: float64(x.SentBytes)}
	}
	res := &IncastDrain{Incasts: len(starts)}
	var peaks, rtts, utils []float64
	for _, at := range starts {
		d := stats.Drain(readings, at, at, cfg)
		peaks = append(peaks, d.Peak)
		if !d.Drained {
			continue
		}
		res.Drained++
		rtts = append(rtts, d.RTTs)
		if !math.IsNaN(d.UtilAfter) {
			utils = append(utils, d.UtilAfter)
		}
	}
	res.PeakP50Bytes = percentileOf(peaks, 50)
	res.DrainRTTsP50, res.DrainRTTsP90, res.DrainRTTsMax = percentileOf(rtts, 50), percentileOf(rtts, 90), percentileOf(rtts, 100)
	res.UtilAfterDrainP50, res.UtilAfterDrainMin = percentileOf(utils, 50), percentileOf(utils, 0)
	return res
}

// percentileOf is the p-th percentile of xs, or nil for none.
func percentileOf(xs []float64, p float64) *float64 {
	if len(xs) == 0 {
		return nil
	}
	v := stats.Percentile(stats.Sorted(xs), p)
	return &v
}
