package stats

import (
	"math/rand/v2"
	"slices"
)

// MinBootstrapRepeats is the fewest repeats PairedTailRatioInterval
// resamples: with fewer, a resample of the repeats is mostly the same few
// runs again, and its interval says little about the next run.
const MinBootstrapRepeats = 5

// Interval is a central interval of a statistic over resamples: Lo and Hi
// bound the middle Level (0.95: 95 %) of Draws resampled values.
type Interval struct {
	Lo    float64 `json:"lo"`
	Hi    float64 `json:"hi"`
	Level float64 `json:"level"`
	Draws int     `json:"draws"`
}

// PairedTailRatioInterval bootstraps the ratio of the p-th percentile of
// without to that of with over repeats: without[i] and with[i] are the
// samples of repeat i in each variant, two runs that share the repeat's
// workload. Each of draws resamples takes len(without) repeats with
// replacement, pools both variants' samples of the repeats it took, and
// computes Percentile(pooled without, p) / Percentile(pooled with, p).
// Resampling whole repeats keeps what one run's samples share (its seed,
// the machine's state during it), which resampling single flows would
// take for independent.
//
// The result holds the middle level of the draws' ratios. seed makes it
// repeatable: the same input gives the same interval. ok is false with
// fewer than MinBootstrapRepeats repeats, with unpaired input, or when a
// draw has no sample in a variant or a percentile of 0 with On-Ramp.
func PairedTailRatioInterval(without, with [][]float64, p float64, draws int, level float64, seed uint64) (Interval, bool) {
	n := len(without)
	if n < MinBootstrapRepeats || len(with) != n || draws < 1 || !(level > 0 && level < 1) {
		return Interval{}, false
	}
	rng := rand.New(rand.NewPCG(seed, uint64(n)))
	ratios := make([]float64, 0, draws)
	var pw, pr []float64
	for range draws {
		pw, pr = pw[:0], pr[:0]
		for range n {
			i := rng.IntN(n)
			pw = append(pw, without[i]...)
			pr = append(pr, with[i]...)
		}
		if len(pw) == 0 || len(pr) == 0 {
			return Interval{}, false
		}
		slices.Sort(pw)
		slices.Sort(pr)
		den := Percentile(pr, p)
		if !(den > 0) {
			return Interval{}, false
		}
		ratios = append(ratios, Percentile(pw, p)/den)
	}
	slices.Sort(ratios)
	tail := 100 * (1 - level) / 2
	return Interval{Lo: Percentile(ratios, tail), Hi: Percentile(ratios, 100-tail), Level: level, Draws: draws}, true
}
