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
type niceTicks struct {
	// target is roughly how many labelled ticks the axis gets; zero
	// means targetTicks. Short axes, such as a panel's, want fewer.
	target int
	// noLabels leaves every tick unlabelled, for an axis whose labels
	// are shown once on a neighbouring panel.
	noLabels bool
}

// niceStep returns the tick step for [lo, hi]: 1, 2 or 5 times a power of
// ten, giving about target labelled ticks (targetTicks when target ≤ 0).
func niceStep(lo, hi float64, target int) float64 {
	if target <= 0 {
		target = targetTicks
	}
	raw := (hi - lo) / float64(target)
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
// of [lo, hi] for about target labelled ticks (zero means targetTicks), so
// that the top of a value axis carries a label.
func roundUpToStep(lo, hi float64, target int) float64 {
	if !(hi > lo) || math.IsInf(lo, 0) || math.IsInf(hi, 0) {
		return hi
	}
	step := niceStep(lo, hi, target)
	return math.Ceil(hi/step-1e-9) * step
}

// Ticks implements gonum's plot.Ticker.
func (n niceTicks) Ticks(lo, hi float64) []gplot.Tick {
	if !(hi > lo) || math.IsInf(lo, 0) || math.IsInf(hi, 0) {
		if n.noLabels {
			return []gplot.Tick{{Value: lo}}
		}
		return []gplot.Tick{{Value: lo, Label: strconv.FormatFloat(lo, 'g', 4, 64)}}
	}
	step := niceStep(lo, hi, n.target)
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
		if q := v / step; !n.noLabels && math.Abs(q-math.Round(q)) < 1e-6 {
			t.Label = tickLabel(v, step)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// logTicks is a gonum plot.Ticker for log axes. Labelled ticks fall on
// powers of ten and, when the axis spans less than logDetail decades, on
// 2 and 5 times them too; unlabelled minor ticks mark the other integer
// multiples. Unlike gonum's LogTicks, it finds the decade of a bound
// below 1 correctly (0.1 is the decade of 0.1, not of 1).
type logTicks struct{}

// logDetail is the span in decades under which a log axis also labels 2
// and 5 times each power of ten.
const logDetail = 2

// Ticks implements gonum's plot.Ticker.
func (logTicks) Ticks(lo, hi float64) []gplot.Tick {
	if !(lo > 0) || !(hi >= lo) || math.IsInf(hi, 0) {
		return nil
	}
	const eps = 1e-9
	first := int(math.Floor(math.Log10(lo) + eps))
	last := int(math.Ceil(math.Log10(hi) - eps))
	detail := math.Log10(hi/lo) <= logDetail+eps
	var ticks []gplot.Tick
	for k := first; k <= last; k++ {
		decade := math.Pow(10, float64(k))
		for m := 1; m < 10; m++ {
			v := decade * float64(m)
			if v < lo*(1-eps) || v > hi*(1+eps) {
				continue
			}
			t := gplot.Tick{Value: v}
			if m == 1 || detail && (m == 2 || m == 5) {
				t.Label = logLabelOf(m, k)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// logLabelOf formats m × 10^k without rounding noise: "0.02", "500",
// "1e+07".
func logLabelOf(m, k int) string {
	if k < -4 || k > 6 {
		return strconv.Itoa(m) + "e" + strconv.Itoa(k)
	}
	return strconv.FormatFloat(float64(m)*math.Pow(10, float64(k)), 'f', max(0, -k), 64)
}
