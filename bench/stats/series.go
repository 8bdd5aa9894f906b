package stats

import (
	"cmp"
	"slices"
	"time"
)

// Point is one sample of a time series: value V at time T (measured from
// the start of the run).
type Point struct {
	T time.Duration
	V float64
}

// MaxWindows caps how many windows RateSeries returns, so a tiny window
// over a long run cannot exhaust memory; later windows are dropped.
const MaxWindows = 1 << 22

// RateSeries turns a cumulative byte counter, sampled at arbitrary times,
// into a rate in bits per second over fixed windows.
//
// Windows are [k·window, (k+1)·window) for whole k, aligned to time zero
// so that the series of different counters built with the same window line
// up (ConvergenceTime relies on that). Only windows lying entirely between
// the first and the last sample are reported, each as a Point whose T is
// the window's start, in time order, at most MaxWindows of them.
//
// Between two consecutive samples the counter is taken to grow at a
// constant rate, so a window's bytes are the interpolated counter at its
// end minus that at its start. A sample lower than the one before it means
// the counter was reset to zero (a socket or map entry recreated) right
// after the earlier sample: the bytes between the two are then the later
// sample's value. Several samples at one time make an instant jump, which
// counts in the window that ends at that time (when it is a window
// boundary). Samples need not be sorted; RateSeries sorts a copy by T
// (keeping the input order of equal times).
//
// Fewer than two samples, or a window ≤ 0, give nil.
func RateSeries(counter []Point, window time.Duration) []Point {
	if window <= 0 || len(counter) < 2 {
		return nil
	}
	pts := slices.Clone(counter)
	slices.SortStableFunc(pts, func(a, b Point) int { return cmp.Compare(a.T, b.T) })

	// mono[i] is the bytes counted from the first sample to sample i,
	// with resets folded in, so it never decreases.
	mono := make([]float64, len(pts))
	for i := 1; i < len(pts); i++ {
		d := pts[i].V - pts[i-1].V
		if d < 0 {
			d = pts[i].V // reset: counted from zero again
		}
		mono[i] = mono[i-1] + d
	}

	first, last := pts[0].T, pts[len(pts)-1].T
	start := (first / window) * window // rounds towards zero...
	if start < first {
		start += window // ...so step up to the first boundary >= first
	}
	if last-start < window {
		return nil
	}
	n := min(int64((last-start)/window), MaxWindows)

	// at returns the interpolated counter at t, for nondecreasing t from
	// one call to the next; j remembers the last sample at or before t.
	j := 0
	at := func(t time.Duration) float64 {
		for j+1 < len(pts) && pts[j+1].T <= t {
			j++
		}
		if j == len(pts)-1 {
			return mono[j]
		}
		// pts[j].T <= t < pts[j+1].T, so the division is safe.
		frac := float64(t-pts[j].T) / float64(pts[j+1].T-pts[j].T)
		return mono[j] + frac*(mono[j+1]-mono[j])
	}

	secs := window.Seconds()
	out := make([]Point, 0, n)
	lo := at(start)
	for k := range n {
		a := start + time.Duration(k)*window
		hi := at(a + window)
		out = append(out, Point{T: a, V: (hi - lo) * 8 / secs})
		lo = hi
	}
	return out
}

// MaxDuring returns the largest value of a series over [from, to]: the
// points inside it, and the last point before from, which is the value as
// it stood when the interval began. So an interval shorter than the gap
// between two points still has a value. pts must be sorted by T. ok is
// false when no point lies at or before to.
func MaxDuring(pts []Point, from, to time.Duration) (max float64, ok bool) {
	// The first point after from; the one before it is the value at from.
	i, _ := slices.BinarySearchFunc(pts, from, func(p Point, t time.Duration) int {
		if p.T <= t {
			return -1
		}
		return 1
	})
	if i > 0 {
		i--
	}
	for ; i < len(pts) && pts[i].T <= to; i++ {
		if !ok || pts[i].V > max {
			max, ok = pts[i].V, true
		}
	}
	return max, ok
}
