package plot

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg/draw"
)

// CDFSeries is one line of a [CDF] figure, typically one congestion
// control: a label and the values (e.g. every queue sample of every run)
// whose empirical distribution it draws.
type CDFSeries struct {
	Label  string
	Values []float64
}

// CDFOptions describes a figure drawn by [CDF].
type CDFOptions struct {
	// Title is drawn above the figure.
	Title string
	// XLabel names the value and its unit, e.g. "queue (KB)".
	XLabel string
	// XScale multiplies every value: X = V × XScale, e.g. 1e-3 to show
	// bytes as KB. Zero means 1.
	XScale float64
	// XAxis is the scale of the value axis. ScaleAuto (the zero value)
	// is logarithmic when the positive values span more than two decades
	// and none is negative, linear otherwise. A log axis starts at a
	// power of ten, at most maxDecades below the largest value; smaller
	// values (zeros included) are drawn at its left edge, and the axis
	// label says so.
	XAxis Scale
	// Size is the image size; the zero value means 640×360 pixels.
	Size Size
}

// maxCDFPoints bounds the points drawn per CDF line: cdfBody of them
// sample the values below the top percent evenly by rank, and the rest
// keep the top percent, every value of it for up to about 100,000 values.
// maxDecades bounds the decades a log value axis shows.
const (
	maxCDFPoints = 2000
	cdfBody      = 990
	maxDecades   = 5
)

// CDF writes to path a PNG of the empirical cumulative distribution of
// each series on one figure: X is the value, scaled as opts says, and Y
// the fraction of the series' values at or below it, as a step function.
// Lines get the colours and dashes of the line figures, in the same
// order.
//
// A series of any length draws at most maxCDFPoints points: its top
// percent of values, where the tail lives, is kept at full resolution
// (or as close as the bound allows) and the rest is sampled evenly by
// rank, so the curve is exact to within 1/1000 in Y. Non-finite values
// are left out; a series without a finite value keeps its legend entry.
// The callers' slices are not modified. The error wraps [ErrNoData] when
// series is empty, no series has a finite value, or a log axis is asked
// for without a positive value.
func CDF(path string, opts CDFOptions, series []CDFSeries) error {
	if err := drawCDF(path, opts, series); err != nil {
		return fmt.Errorf("plot CDF %s: %w", path, err)
	}
	return nil
}

// QueueCDF writes to path a 640×360 PNG of the distribution of bottleneck
// queue samples, one line per congestion control: values in bytes, shown
// in KB (1000 bytes), on a log axis when they span more than two decades
// (see [CDFOptions]).
func QueueCDF(path, title string, series []CDFSeries) error {
	opts := CDFOptions{Title: title, XLabel: "queue (KB)", XScale: 1 / bytesPerKB}
	if err := drawCDF(path, opts, series); err != nil {
		return fmt.Errorf("plot queue CDF %s: %w", path, err)
	}
	return nil
}

// drawCDF is CDF without the error context.
func drawCDF(path string, opts CDFOptions, series []CDFSeries) error {
	size, err := opts.Size.resolve()
	if err != nil {
		return err
	}
	if len(series) == 0 {
		return fmt.Errorf("no series: %w", ErrNoData)
	}
	scale := opts.XScale
	if scale == 0 {
		scale = 1
	}
	if math.IsNaN(scale) || math.IsInf(scale, 0) {
		return fmt.Errorf("x scale %v is not finite", scale)
	}
	data := make([]plotter.XYs, len(series))
	var all valueStats
	xlo, xhi := math.Inf(1), math.Inf(-1)
	for i, s := range series {
		var st valueStats
		data[i], st = cdfPoints(s.Values, scale)
		if len(data[i]) > 0 {
			xlo, xhi = math.Min(xlo, data[i][0].X), math.Max(xhi, data[i][len(data[i])-1].X)
		}
		all.finite += st.finite
		all.maxPos = math.Max(all.maxPos, st.maxPos)
		all.minNeg = math.Min(all.minNeg, st.minNeg)
		if st.minPos > 0 && (all.minPos == 0 || st.minPos < all.minPos) {
			all.minPos = st.minPos
		}
	}
	if all.finite == 0 {
		return fmt.Errorf("%d series without a finite value: %w", len(series), ErrNoData)
	}
	logX, err := opts.XAxis.log(all)
	if err != nil {
		return err
	}
	xlabel := opts.XLabel
	if logX {
		if all.maxPos == 0 {
			return fmt.Errorf("no positive value for a log scale: %w", ErrNoData)
		}
		top := math.Ceil(math.Log10(all.maxPos) - 1e-9)
		xlo = math.Pow(10, math.Max(math.Floor(math.Log10(all.minPos)+1e-9), top-maxDecades))
		xhi = niceCeil(all.maxPos)
		if xhi <= xlo {
			xhi = xlo * 10
		}
		clamped := false
		for _, xys := range data {
			for k := range xys {
				if xys[k].X < xlo {
					xys[k].X, clamped = xlo, true
				}
			}
		}
		xlabel = logLabel(xlabel, xlo, clamped)
	} else {
		xlo = math.Min(xlo, 0)
		if xhi <= xlo {
			xhi = xlo + 1
		}
		xhi = roundUpToStep(xlo, xhi, 0)
	}

	out, err := render(size, func(c draw.Canvas) {
		p := newPlot(opts.Title, xlabel, "fraction of samples ≤ x")
		grid := plotter.NewGrid()
		grid.Vertical, grid.Horizontal = gridStyle(), gridStyle()
		p.Add(grid)
		if logX {
			p.X.Scale = gplot.LogScale{}
			p.X.Tick.Marker = logTicks{}
		}
		leg := newLegend()
		for i, xys := range data {
			l := &plotter.Line{XYs: xys, LineStyle: seriesLineStyle(i), StepStyle: plotter.PostStep}
			if len(xys) > 0 {
				p.Add(l)
			}
			leg.Add(legendLabel(i, series[i].Label), l)
		}
		p.X.Min, p.X.Max = xlo, xhi
		p.Y.Min, p.Y.Max = 0, 1
		drawWithLegend(c, p, leg)
	})
	if err != nil {
		return err
	}
	return writeFile(path, out)
}

// niceCeil returns the smallest 1, 2 or 5 times a power of ten that is at
// least v > 0, so that a log axis ends near its largest value.
func niceCeil(v float64) float64 {
	decade := math.Pow(10, math.Floor(math.Log10(v)+1e-9))
	for _, m := range []float64{1, 2, 5} {
		if m*decade >= v*(1-1e-9) {
			return m * decade
		}
	}
	return 10 * decade
}

// logLabel returns the label of a log value axis starting at lo: label,
// and when clamped (some values lie below lo) a note that they are drawn
// at the left edge.
func logLabel(label string, lo float64, clamped bool) string {
	if !clamped {
		return label
	}
	edge := strconv.FormatFloat(lo, 'g', -1, 64)
	if label == "" {
		return fmt.Sprintf("values < %s drawn at %s", edge, edge)
	}
	return fmt.Sprintf("%s; values < %s drawn at %s", label, edge, edge)
}

// cdfPoints returns the empirical CDF of the finite values of values, each
// scaled by xscale, as the corners of a step function to be drawn
// post-step: (x, fraction of values ≤ x), starting at (smallest, 0). It
// keeps fewer than maxCDFPoints points: up to cdfBody ranks sampled
// evenly below the top percent of values, and the top percent itself,
// every value of it when there are few enough, else sampled evenly too.
// It also returns the stats of the scaled values. values is not modified.
func cdfPoints(values []float64, xscale float64) (plotter.XYs, valueStats) {
	var st valueStats
	v := make([]float64, 0, len(values))
	for _, x := range values {
		y := x * xscale
		if math.IsNaN(y) || math.IsInf(y, 0) {
			continue
		}
		v = append(v, y)
		switch {
		case y > 0:
			if st.minPos == 0 || y < st.minPos {
				st.minPos = y
			}
			st.maxPos = math.Max(st.maxPos, y)
		case y < 0:
			st.minNeg = math.Min(st.minNeg, y)
		}
	}
	n := len(v)
	st.finite = n
	if n == 0 {
		return nil, st
	}
	slices.Sort(v)

	// Ranks [0, tail) are the body, [tail, n) the top percent; each part
	// keeps every step-th rank, and its last. With the first point, that
	// is at most cdfBody+1 + tailPoints+1 + 1 = maxCDFPoints points.
	const tailPoints = maxCDFPoints - cdfBody - 3
	tail := n - max(1, n/100)
	bodyStep := max(1, (tail+cdfBody-1)/cdfBody)
	tailStep := max(1, (n-tail+tailPoints-1)/tailPoints)
	xys := make(plotter.XYs, 0, min(n+1, maxCDFPoints))
	xys = append(xys, plotter.XY{X: v[0], Y: 0})
	for i := range n {
		keep := i == tail-1 || i == n-1
		if i < tail {
			keep = keep || i%bodyStep == 0
		} else {
			keep = keep || (i-tail)%tailStep == 0
		}
		if keep {
			xys = append(xys, plotter.XY{X: v[i], Y: float64(i+1) / float64(n)})
		}
	}
	return xys, st
}
