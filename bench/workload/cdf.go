// Package workload generates the traffic that ccload's benchmarks offer to
// the network: flow sizes drawn from empirical distributions (the web-search
// distribution is built in), Poisson flow arrivals at a target load, and
// incast bursts. Everything here is pure computation and deterministic for
// a given seed.
package workload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

// CDFPoint is one point of an empirical flow-size distribution: a flow is
// at most Bytes long with probability Prob.
type CDFPoint struct {
	Bytes int64
	Prob  float64
}

// CDF is a validated, piecewise-linear cumulative distribution of flow sizes
// in bytes.
//
// Between two consecutive points the probability grows linearly with size,
// so sampling interpolates linearly inside a segment. The first point
// carries a point mass: a flow is exactly Points()[0].Bytes long with
// probability Points()[0].Prob (start the table with a probability of 0 to
// avoid that). Two consecutive points with the same size likewise denote a
// jump, that is a point mass at that size.
//
// The zero CDF has no points; it samples 0 and has mean 0. Build a usable one
// with NewCDF or WebSearch.
type CDF struct {
	points []CDFPoint
}

// probTolerance is how far from 1 the last probability of a table may be;
// it absorbs decimal rounding in hand-written tables.
const probTolerance = 1e-9

// NewCDF validates points and returns the distribution they describe.
// The rules: at least one point; sizes nonnegative and nondecreasing
// (equal sizes denote a jump); probabilities finite, within [0, 1] and
// nondecreasing; the last probability equal to 1 (within 1e-9, then set to
// exactly 1). NewCDF copies points, so the caller may reuse the slice.
func NewCDF(points []CDFPoint) (CDF, error) {
	if len(points) == 0 {
		return CDF{}, errors.New("workload: empty CDF table: give at least one (bytes, probability) point, the last with probability 1")
	}
	pts := make([]CDFPoint, len(points))
	copy(pts, points)
	for i, pt := range pts {
		if pt.Bytes < 0 {
			return CDF{}, fmt.Errorf("workload: CDF point %d has negative size %d bytes: sizes must be >= 0", i, pt.Bytes)
		}
		if math.IsNaN(pt.Prob) || pt.Prob < 0 || pt.Prob > 1 {
			return CDF{}, fmt.Errorf("workload: CDF point %d has probability %v: probabilities must lie in [0, 1]", i, pt.Prob)
		}
		if i == 0 {
			continue
		}
		prev := pts[i-1]
		if pt.Bytes < prev.Bytes {
			return CDF{}, fmt.Errorf("workload: CDF point %d (%d bytes) is smaller than point %d (%d bytes): list sizes in ascending order", i, pt.Bytes, i-1, prev.Bytes)
		}
		if pt.Prob < prev.Prob {
			return CDF{}, fmt.Errorf("workload: CDF point %d has probability %v, below point %d's %v: cumulative probabilities must not decrease", i, pt.Prob, i-1, prev.Prob)
		}
	}
	last := &pts[len(pts)-1]
	if math.Abs(last.Prob-1) > probTolerance {
		return CDF{}, fmt.Errorf("workload: last CDF point has probability %v: it must be 1 (add a final point at the largest size with probability 1)", last.Prob)
	}
	last.Prob = 1
	return CDF{points: pts}, nil
}

// Points returns a copy of the distribution's points.
func (c CDF) Points() []CDFPoint {
	out := make([]CDFPoint, len(c.points))
	copy(out, c.points)
	return out
}

// Min returns the smallest size the distribution can produce (0 for the
// zero CDF).
func (c CDF) Min() int64 {
	if len(c.points) == 0 {
		return 0
	}
	return c.points[0].Bytes
}

// Max returns the largest size the distribution can produce (0 for the
// zero CDF).
func (c CDF) Max() int64 {
	if len(c.points) == 0 {
		return 0
	}
	return c.points[len(c.points)-1].Bytes
}

// Quantile returns the size s at which the cumulative probability reaches p,
// interpolating linearly inside a segment and rounding to the nearest byte
// (the inverse of the CDF). p is clamped to [0, 1]; a NaN p counts as 0.
// The zero CDF returns 0.
func (c CDF) Quantile(p float64) int64 {
	if len(c.points) == 0 {
		return 0
	}
	if !(p > 0) { // also catches NaN
		p = 0
	}
	if p > 1 {
		p = 1
	}
	first := c.points[0]
	if p <= first.Prob {
		return first.Bytes
	}
	// Invariant: p > points[i-1].Prob. The last probability is 1 >= p, so
	// the loop returns before running off the end.
	for i := 1; i < len(c.points); i++ {
		lo, hi := c.points[i-1], c.points[i]
		if p > hi.Prob {
			continue
		}
		frac := (p - lo.Prob) / (hi.Prob - lo.Prob) // hi.Prob >= p > lo.Prob
		size := float64(lo.Bytes) + frac*float64(hi.Bytes-lo.Bytes)
		return int64(math.Round(size))
	}
	return c.points[len(c.points)-1].Bytes
}

// Prob returns the probability that a flow is at most bytes long,
// interpolating linearly inside a segment. The zero CDF returns 1.
func (c CDF) Prob(bytes int64) float64 {
	if len(c.points) == 0 {
		return 1
	}
	if bytes < c.points[0].Bytes {
		return 0
	}
	// Find the last point with Bytes <= bytes; past it the CDF interpolates
	// towards the next point.
	k := 0
	for k+1 < len(c.points) && c.points[k+1].Bytes <= bytes {
		k++
	}
	if k == len(c.points)-1 {
		return 1
	}
	lo, hi := c.points[k], c.points[k+1] // lo.Bytes <= bytes < hi.Bytes
	frac := float64(bytes-lo.Bytes) / float64(hi.Bytes-lo.Bytes)
	return lo.Prob + frac*(hi.Prob-lo.Prob)
}

// Sample draws one flow size by inverse-transform sampling: a uniform
// number in [0, 1) goes through Quantile. r must not be nil. The zero CDF
// returns 0.
func (c CDF) Sample(r *rand.Rand) int64 {
	return c.Quantile(r.Float64())
}

// Mean returns the distribution's mean size in bytes, exact for the
// piecewise-linear CDF: the first point's mass times its size plus, for
// each segment, its probability mass times the segment's midpoint. Samples
// are rounded to whole bytes, which moves their mean by less than half a
// byte. The zero CDF returns 0.
func (c CDF) Mean() float64 {
	if len(c.points) == 0 {
		return 0
	}
	mean := c.points[0].Prob * float64(c.points[0].Bytes)
	for i := 1; i < len(c.points); i++ {
		lo, hi := c.points[i-1], c.points[i]
		mid := (float64(lo.Bytes) + float64(hi.Bytes)) / 2
		mean += (hi.Prob - lo.Prob) * mid
	}
	return mean
}

// Truncated returns the distribution of min(size, max): every size above
// max becomes exactly max, the rest is unchanged. It serves quick runs that
// cannot afford the longest flows. Truncation lowers the mean (see Mean of
// the result), so compute arrival rates from the truncated CDF, not the
// original, to keep the offered load right. A max below 1 is treated as 1.
// If max is at least Max(), the result equals c.
func (c CDF) Truncated(max int64) CDF {
	if max < 1 {
		max = 1
	}
	if len(c.points) == 0 || max >= c.Max() {
		return CDF{points: c.Points()}
	}
	pts := make([]CDFPoint, 0, len(c.points)+1)
	for _, pt := range c.points {
		if pt.Bytes >= max {
			break
		}
		pts = append(pts, pt)
	}
	if len(pts) > 0 {
		// Keep the segment up to max, then put the rest of the mass on max.
		pts = append(pts, CDFPoint{Bytes: max, Prob: c.Prob(max)})
	}
	pts = append(pts, CDFPoint{Bytes: max, Prob: 1})
	return CDF{points: pts}
}
