package stats

import (
	"cmp"
	"slices"
	"time"
)

// Jain returns Jain's fairness index of xs, (Σx)² / (n·Σx²): 1 when all
// values are equal, 1/n when one value takes everything. Values are meant
// to be finite and nonnegative (rates, throughputs). Two special cases,
// chosen so that the result is never NaN for finite input: an empty slice
// gives 0 (nothing to be fair about), and all zeros give 1 (every flow
// gets the same, nothing).
func Jain(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum, sumSq float64
	for _, x := range xs {
		sum += x
		sumSq += x * x
	}
	if sumSq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sumSq)
}

// jainSlack lets equal rates pass a zero tolerance despite rounding in
// Jain's sums.
const jainSlack = 1e-12

// ConvergenceTime measures how long the flows take to share fairly after
// an event at from (a flow joining or leaving).
//
// rates holds one rate series per flow, on a common grid of timestamps:
// the output of RateSeries with the same window for every flow. At each
// timestamp t ≥ from found in any series, the active flows are those whose
// series has a point at exactly t, that is a rate for the window starting
// at t; a flow that has not started yet or has finished has none there and
// does not count. If a series has several points at one timestamp, the
// last one (in input order) counts.
//
// The flows are converged at t when Jain's index of the active flows'
// rates is at least 1 − tolerance (one active flow is always converged).
// ConvergenceTime returns s − from, where s is the earliest timestamp that
// starts a run of converged timestamps lasting at least hold (the run's
// last timestamp is at least s + hold; hold ≤ 0 accepts a single
// timestamp), and true. If no run lasts long enough before the data ends,
// it returns 0 and false.
func ConvergenceTime(rates [][]Point, from time.Duration, tolerance float64, hold time.Duration) (time.Duration, bool) {
	active := make(map[time.Duration][]float64)
	for _, series := range rates {
		pts := make([]Point, 0, len(series))
		for _, p := range series {
			if p.T >= from {
				pts = append(pts, p)
			}
		}
		slices.SortStableFunc(pts, func(a, b Point) int { return cmp.Compare(a.T, b.T) })
		for i, p := range pts {
			if i+1 < len(pts) && pts[i+1].T == p.T {
				continue // a later point at the same time wins
			}
			active[p.T] = append(active[p.T], p.V)
		}
	}
	times := make([]time.Duration, 0, len(active))
	for t := range active {
		times = append(times, t)
	}
	slices.Sort(times)

	threshold := 1 - tolerance - jainSlack
	inRun := false
	var runStart time.Duration
	for _, t := range times {
		if Jain(active[t]) < threshold {
			inRun = false
			continue
		}
		if !inRun {
			inRun, runStart = true, t
		}
		if t-runStart >= hold {
			return runStart - from, true
		}
	}
	return 0, false
}
