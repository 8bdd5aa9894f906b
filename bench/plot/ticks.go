package plot

import (
	"math"
	"strconv"

	gplot "gonum.org/v1/plot"
)

// targetTicks is roughly how many labelled ticks a linear axis gets: enough
// to read values off a 640×360 figure without crowding the labels.
const targetTicks = 6

// niceTicks is a gonum plot.Ticker for linear axes. Labelled ticks fall on
// multiples of 1, 2 or 5 times a power of ten and are written with just
// the digits the step needs ("250", not "250.00"); unlabelled minor ticks
// divide each step into four or five.
type niceTicks struct{}

// niceStep returns the tick step for [lo, hi]: 1, 2 or 5 times a power of
// ten, giving about targetTicks labelled ticks.
func niceStep(lo, hi float64) float64 {
	raw := (hi - lo) / targetTicks
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

// tickLabel formats v, a multiple of step, with as few digits as the step
// allows; very large or very small magnitudes use exponent notation.
func tickLabel(v, step float64) string {
	if math.Abs(v) < step*1e-6 {
		return "0"
	}
	if a := math.Abs(v); a >= 1e7 || step < 1e-4 {
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
	decimals := max(0, int(-math.Floor(math.Log10(step)+1e-9)))
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// roundUpToStep returns hi raised to the next multiple of the tick step
// of [lo, hi], so that the top of a value axis carries a label.
func roundUpToStep(lo, hi float64) float64 {
	if !(hi > lo) || math.IsInf(lo, 0) || math.IsInf(hi, 0) {
		return hi
	}
	step := niceStep(lo, hi)
	return math.Ceil(hi/step-1e-9) * step
}

// Ticks implements gonum's plot.Ticker.
func (niceTicks) Ticks(lo, hi float64) []gplot.Tick {
	if !(hi > lo) || math.IsInf(lo, 0) || math.IsInf(hi, 0) {
		return []gplot.Tick{{Value: lo, Label: strconv.FormatFloat(lo, 'g', 4, 64)}}
	}
	step := niceStep(lo, hi)
	minor := step / 5
	if m := step / math.Pow(10, math.Floor(math.Log10(step)+1e-9)); math.Abs(m-2) < 1e-9 {
		minor = step / 4
	}
	eps := step * 1e-9
	var ticks []gplot.Tick
	first := math.Ceil((lo-eps)/minor) * minor
	for i := 0; ; i++ {
		v := first + float64(i)*minor
		if v > hi+eps || i > 1000 {
			break
		}
		t := gplot.Tick{Value: v}
		if q := v / step; math.Abs(q-math.Round(q)) < 1e-6 {
			t.Label = tickLabel(v, step)
		}
		ticks = append(ticks, t)
	}
	return ticks
}
