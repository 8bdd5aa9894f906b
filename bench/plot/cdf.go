package plot

import (
	"fmt"
	"image/color"
	"math"
	"slices"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg/draw"
)

// CDFSeries is one line of a [CDF] figure: a label and the values whose
// empirical distribution it draws.
type CDFSeries struct {
	Label  string
	Values []float64
}

// maxCDFPoints bounds the points drawn per CDF line: the distribution is
// kept exactly in its top percent, where tails live, and sampled evenly
// below it.
const maxCDFPoints = 2000

// CDF writes to path a 640×360 PNG of the empirical CDF of each series,
// X being the value times xscale and Y the fraction of values at or below
// it. Non-finite values are left out. The error wraps [ErrNoData] when no
// series has a finite value. The callers' slices are not modified.
func CDF(path, title, xlabel string, xscale float64, series []CDFSeries) error {
	if err := drawCDF(path, title, xlabel, xscale, series); err != nil {
		return fmt.Errorf("plot CDF %s: %w", path, err)
	}
	return nil
}

// QueueCDF is [CDF] for queue lengths in bytes, shown in KB.
func QueueCDF(path, title string, series []CDFSeries) error {
	return CDF(path, title, "queue (KB)", 1/bytesPerKB, series)
}

func drawCDF(path, title, xlabel string, xscale float64, series []CDFSeries) error {
	if len(series) == 0 {
		return fmt.Errorf("no series: %w", ErrNoData)
	}
	if xscale == 0 || math.IsNaN(xscale) || math.IsInf(xscale, 0) {
		return fmt.Errorf("x scale %v is not a finite non-zero number", xscale)
	}
	data := make([]plotter.XYs, len(series))
	total := 0
	for i, s := range series {
		data[i] = cdfPoints(s.Values, xscale)
		total += len(data[i])
	}
	if total == 0 {
		return fmt.Errorf("%d series without a finite value: %w", len(series), ErrNoData)
	}
	size, _ := Size{}.resolve()
	out, err := render(size, func(c draw.Canvas) {
		p := newPlot(title, xlabel, "fraction of samples ≤ x")
		grid := plotter.NewGrid()
		grid.Vertical, grid.Horizontal = gridStyle(), gridStyle()
		p.Add(grid)
		leg := newLegend()
		for i, xys := range data {
			addLine(p, leg, i, series[i].Label, xys)
		}
		p.Y.Min, p.Y.Max = 0, 1
		p.X.Min = math.Min(p.X.Min, 0)
		drawWithLegend(c, p, leg)
	})
	if err != nil {
		return err
	}
	return writeFile(path, out)
}

// cdfPoints is the step function of values' empirical CDF, scaled, with at
// most about maxCDFPoints points: every sample in the top percent, and an
// even sample below.
func cdfPoints(values []float64, xscale float64) plotter.XYs {
	v := make([]float64, 0, len(values))
	for _, x := range values {
		if y := x * xscale; !math.IsNaN(y) && !math.IsInf(y, 0) {
			v = append(v, y)
		}
	}
	n := len(v)
	if n == 0 {
		return nil
	}
	slices.Sort(v)
	tail := n - n/100 // the top percent starts here
	step := max(1, tail/(maxCDFPoints/2))
	var xys plotter.XYs
	for i := 0; i < n; i++ {
		if i < tail && i%step != 0 && i != tail-1 {
			continue
		}
		if i >= tail && n-tail > maxCDFPoints/2 && (i-tail)%((n-tail)/(maxCDFPoints/2)+1) != 0 && i != n-1 {
			continue
		}
		xys = append(xys, plotter.XY{X: v[i], Y: float64(i+1) / float64(n)})
	}
	return xys
}

// lighter returns c blended halfway to white, for the runs drawn behind
// the first in a panel.
func lighter(c color.Color) color.Color {
	r, g, b, _ := c.RGBA()
	mix := func(v uint32) uint8 { return uint8((v>>8 + 0xff) / 2) }
	return color.RGBA{R: mix(r), G: mix(g), B: mix(b), A: 0xff}
}
