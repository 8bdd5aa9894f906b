package plot

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Units used by [Queue] and [Throughput]: KB and Gbit/s are decimal
// (1 KB = 1000 bytes), as is usual for link rates and switch buffers.
const (
	bytesPerKB  = 1e3
	bitsPerGbit = 1e9
)

// LineOptions describes a line figure drawn by [Lines].
type LineOptions struct {
	// Title is drawn above the figure.
	Title string
	// XLabel and YLabel label the axes and should name the unit, e.g.
	// "time (ms)" and "queue (KB)".
	XLabel, YLabel string
	// XUnit is the duration one X-axis unit stands for: X = T / XUnit.
	// Zero means time.Millisecond.
	XUnit time.Duration
	// YScale multiplies every value before plotting: Y = V × YScale,
	// e.g. 1e-3 to show bytes as KB. Zero means 1.
	YScale float64
	// YFromZero makes the Y axis start at zero (or below, for negative
	// data) instead of at the smallest value.
	YFromZero bool
	// Size is the image size; the zero value means 640×360 pixels.
	Size Size
}

// Lines writes to path a PNG line figure with one line per series, X being
// the point times and Y the point values, scaled as opts says.
//
// Points need not be sorted: each series is drawn in time order. Points
// whose value is NaN or ±Inf are skipped. A series with more points than
// the figure is wide in pixels is downsampled to the minimum and maximum
// of each pixel column. The error wraps [ErrNoData] when series is empty
// or no series has a finite point; a series of its own that has none is
// only left out of the figure (it keeps its legend entry).
func Lines(path string, opts LineOptions, series []Series) error {
	if err := lines(path, opts, series); err != nil {
		return fmt.Errorf("plot lines %s: %w", path, err)
	}
	return nil
}

// Queue writes to path a 640×360 PNG of bottleneck queue length over time,
// one line per congestion control, like Figure 4 of the PowerTCP paper.
// Point values are in bytes and are shown in KB (1000 bytes); time is shown
// in ms. Missing values and downsampling are handled as by [Lines].
func Queue(path, title string, series []Series) error {
	opts := LineOptions{
		Title:     title,
		XLabel:    "time (ms)",
		YLabel:    "queue (KB)",
		XUnit:     time.Millisecond,
		YScale:    1 / bytesPerKB,
		YFromZero: true,
	}
	if err := lines(path, opts, series); err != nil {
		return fmt.Errorf("plot queue %s: %w", path, err)
	}
	return nil
}

// Throughput writes to path a 640×360 PNG of throughput over time, one line
// per congestion control. Point values are in bits/s and are shown in
// Gbit/s; time is shown in ms. Missing values and downsampling are handled
// as by [Lines].
func Throughput(path, title string, series []Series) error {
	opts := LineOptions{
		Title:     title,
		XLabel:    "time (ms)",
		YLabel:    "throughput (Gbit/s)",
		XUnit:     time.Millisecond,
		YScale:    1 / bitsPerGbit,
		YFromZero: true,
	}
	if err := lines(path, opts, series); err != nil {
		return fmt.Errorf("plot throughput %s: %w", path, err)
	}
	return nil
}

// lines is Lines without the error context, shared by the line figures.
func lines(path string, opts LineOptions, series []Series) error {
	size, err := opts.Size.resolve()
	if err != nil {
		return err
	}
	if len(series) == 0 {
		return fmt.Errorf("no series: %w", ErrNoData)
	}
	unit := opts.XUnit
	if unit <= 0 {
		unit = time.Millisecond
	}
	scale := opts.YScale
	if scale == 0 {
		scale = 1
	}
	if math.IsNaN(scale) || math.IsInf(scale, 0) {
		return fmt.Errorf("y scale %v is not finite", scale)
	}

	data := make([]plotter.XYs, len(series))
	total := 0
	for i, s := range series {
		data[i] = downsample(toXYs(s.Points, unit, scale), size.Width)
		total += len(data[i])
	}
	if total == 0 {
		return fmt.Errorf("%d series without a finite point: %w", len(series), ErrNoData)
	}

	var out []byte
	out, err = render(size, func(c draw.Canvas) {
		p := newPlot(opts.Title, opts.XLabel, opts.YLabel)
		grid := plotter.NewGrid()
		grid.Vertical = gridStyle()
		grid.Horizontal = gridStyle()
		p.Add(grid)
		leg := newLegend()
		for i, xys := range data {
			addLine(p, leg, i, series[i].Label, xys)
		}
		if opts.YFromZero {
			p.Y.Min = math.Min(p.Y.Min, 0)
		}
		if p.Y.Min == p.Y.Max {
			// A flat line would otherwise be centred in [v-1, v+1]:
			// keep it at the bottom, under a unit range.
			p.Y.Max = p.Y.Min + 1
		}
		if opts.YFromZero {
			p.Y.Max = roundUpToStep(p.Y.Min, p.Y.Max, 0)
		}
		drawWithLegend(c, p, leg)
	})
	if err != nil {
		return err
	}
	return writeFile(path, out)
}

// addLine adds the i-th series to p and its entry to leg. A series of one
// point is drawn as a dot, since a line needs two.
func addLine(p *gplot.Plot, leg *gplot.Legend, i int, label string, xys plotter.XYs) {
	sty := seriesLineStyle(i)
	l := &plotter.Line{XYs: xys, LineStyle: sty}
	thumbs := []gplot.Thumbnailer{l}
	if len(xys) > 0 {
		p.Add(l)
	}
	if len(xys) == 1 {
		dot := &plotter.Scatter{XYs: xys, GlyphStyle: draw.GlyphStyle{
			Color:  sty.Color,
			Radius: vg.Points(2.5),
			Shape:  draw.CircleGlyph{},
		}}
		p.Add(dot)
	}
	leg.Add(legendLabel(i, label), thumbs...)
}

// toXYs converts points to plot coordinates, X = T/unit and Y = V×scale,
// dropping points whose value is not finite, and returns them sorted by X.
func toXYs(pts []Point, unit time.Duration, scale float64) plotter.XYs {
	xys := make(plotter.XYs, 0, len(pts))
	for _, pt := range pts {
		y := pt.V * scale
		if math.IsNaN(y) || math.IsInf(y, 0) {
			continue
		}
		xys = append(xys, plotter.XY{X: float64(pt.T) / float64(unit), Y: y})
	}
	byX := func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) }
	if !slices.IsSortedFunc(xys, byX) {
		slices.SortStableFunc(xys, byX)
	}
	return xys
}

// downsample reduces xys, sorted by X, to at most two points per column
// when X is cut into cols equal columns: the column's minimum and maximum,
// in X order. The first and last points are kept too, so that the X range
// is unchanged; at most 2×cols+2 points remain. Series of at most 2×cols
// points are returned unchanged.
func downsample(xys plotter.XYs, cols int) plotter.XYs {
	if cols < 1 || len(xys) <= 2*cols {
		return xys
	}
	lo, hi := xys[0].X, xys[len(xys)-1].X
	span := hi - lo
	column := func(x float64) int {
		if span <= 0 {
			return 0
		}
		return min(int((x-lo)/span*float64(cols)), cols-1)
	}

	out := make(plotter.XYs, 0, 2*cols)
	start := 0
	for start < len(xys) {
		col := column(xys[start].X)
		end := start + 1
		for end < len(xys) && column(xys[end].X) == col {
			end++
		}
		minI, maxI := start, start
		for j := start + 1; j < end; j++ {
			if xys[j].Y < xys[minI].Y {
				minI = j
			}
			if xys[j].Y > xys[maxI].Y {
				maxI = j
			}
		}
		first, second := min(minI, maxI), max(minI, maxI)
		if start == 0 && first != 0 {
			out = append(out, xys[0])
		}
		out = append(out, xys[first])
		if second != first {
			out = append(out, xys[second])
		}
		if end == len(xys) && second != end-1 {
			out = append(out, xys[end-1])
		}
		start = end
	}
	return out
}
