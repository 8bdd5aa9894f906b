// Package stats turns the raw measurements of ccload's benchmarks into the
// numbers they report: nearest-rank percentiles, flow-completion-time (FCT)
// and slowdown summaries by flow size, Jain's fairness index, rates from
// byte counters, and convergence times. Everything here is pure
// computation; no function modifies its input.
package stats

import (
	"math"
	"slices"
)

// Number is any integer or floating-point type.
type Number interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 |
		~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr |
		~float32 | ~float64
}

// rankSlack absorbs floating-point error when p·n/100 should be a whole
// number, so that for example the 99.9th percentile of 1000 samples is the
// 999th value and not the 1000th.
const rankSlack = 1e-9

// Percentile returns the p-th percentile of sorted (ascending) by the
// nearest-rank definition: the smallest value such that at least p% of the
// samples are at or below it, that is the value at 1-based rank
// ⌈p·n/100⌉. It never interpolates, so the result is always one of the
// samples. p is meant to lie in (0, 100]; p ≤ 0 (or NaN) gives the smallest
// value and p > 100 the largest. An empty slice gives 0.
func Percentile(sorted []float64, p float64) float64 {
	return PercentileOf(sorted, p)
}

// PercentileOf is Percentile for any numeric type; an empty slice gives
// the zero value.
func PercentileOf[T Number](sorted []T, p float64) T {
	n := len(sorted)
	if n == 0 {
		var zero T
		return zero
	}
	if !(p > 0) { // also catches NaN
		return sorted[0]
	}
	if p >= 100 {
		return sorted[n-1]
	}
	rank := int(math.Ceil(p*float64(n)/100 - rankSlack))
	rank = max(1, min(rank, n))
	return sorted[rank-1]
}

// Sorted returns an ascending copy of xs, ready for Percentile.
func Sorted[T Number](xs []T) []T {
	out := slices.Clone(xs)
	slices.Sort(out)
	return out
}

// ValueSummary is the five-number summary Summary reports. All fields are
// 0 when N is 0.
type ValueSummary struct {
	N    int
	Min  float64
	Mean float64
	P50  float64 // nearest-rank median
	P99  float64 // nearest-rank 99th percentile
	Max  float64
}

// Summary returns the count, minimum, arithmetic mean, nearest-rank 50th and
// 99th percentiles, and maximum of values, which need not be sorted (Summary
// sorts a copy). Empty input gives the zero ValueSummary.
func Summary(values []float64) ValueSummary {
	if len(values) == 0 {
		return ValueSummary{}
	}
	s := Sorted(values)
	return ValueSummary{
		N:    len(s),
		Min:  s[0],
		Mean: mean(s),
		P50:  Percentile(s, 50),
		P99:  Percentile(s, 99),
		Max:  s[len(s)-1],
	}
}

// mean returns the arithmetic mean of xs, or 0 for none.
func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

// TailPercentiles are the percentiles SupportedPercentile chooses from,
// in ascending order.
func TailPercentiles() []float64 { return []float64{50, 90, 95, 98, 99, 99.9} }

// Supports reports whether n samples support the p-th percentile: whether
// at least ten samples lie at or beyond it, n·(1 − p/100) ≥ 10. Beyond that
// rule a "p99.9" of a few hundred samples is just their maximum. p99 needs
// 1,000 samples and p99.9 10,000.
func Supports(n int, p float64) bool {
	return float64(n)*(100-p) >= 1000-rankSlack
}

// SupportedPercentile is the highest of TailPercentiles that n samples
// support, or 0 when they support none (fewer than 20 samples).
func SupportedPercentile(n int) float64 {
	best := 0.0
	for _, p := range TailPercentiles() {
		if Supports(n, p) {
			best = p
		}
	}
	return best
}
