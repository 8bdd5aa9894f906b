package plot

import (
	"fmt"
	"image/color"
	"math"
	"slices"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Scale chooses how the value axis of a bar chart is scaled.
type Scale int

const (
	// ScaleAuto uses a log scale when the positive values span more than
	// two decades (largest / smallest > 100) and none is negative, and a
	// linear scale otherwise.
	ScaleAuto Scale = iota
	// ScaleLinear always uses a linear scale starting at zero.
	ScaleLinear
	// ScaleLog always uses a log scale; values ≤ 0 then draw no bar.
	ScaleLog
)

// String returns the name of the scale.
func (s Scale) String() string {
	switch s {
	case ScaleAuto:
		return "auto"
	case ScaleLinear:
		return "linear"
	case ScaleLog:
		return "log"
	default:
		return fmt.Sprintf("Scale(%d)", int(s))
	}
}

// groupWidth is the share of the space between two group centres that the
// bars of one group fill.
const groupWidth = 0.8

// BarOptions describes a grouped bar chart drawn by [Bar].
type BarOptions struct {
	// Title is drawn above the figure.
	Title string
	// XLabel names what the groups are (e.g. "flow size"); it may be
	// empty. YLabel names the value and its unit, e.g. "p99 FCT (ms)".
	XLabel, YLabel string
	// Scale is the value-axis scale; the zero value is ScaleAuto.
	Scale Scale
	// Size is the image size; the zero value means 640×360 pixels.
	Size Size
}

// Bar writes to path a PNG grouped bar chart: one group per bars.Groups
// entry along X, and in each group one bar per bars.Series entry, coloured
// as the lines of the line figures are.
//
// Each series must have exactly one value per group. NaN and ±Inf values
// are missing values and draw no bar; so do values ≤ 0 on a log scale,
// whose bars start at the bottom of the axis rather than at zero. The
// error wraps [ErrNoData] when there is no group, no series, or no value
// that can be drawn.
func Bar(path string, opts BarOptions, bars Bars) error {
	if err := bar(path, opts, bars); err != nil {
		return fmt.Errorf("plot bars %s: %w", path, err)
	}
	return nil
}

// FCT writes to path a 640×360 PNG grouped bar chart of flow completion
// times, typically one group per flow-size bucket and one bar per
// congestion control; ylabel names the statistic and its unit, e.g.
// "p99 FCT (ms)". The value axis is chosen as by ScaleAuto: logarithmic
// when the values span more than two decades, so that short and long
// flows both stay readable. Missing values are handled as by [Bar].
func FCT(path, title string, bars Bars, ylabel string) error {
	opts := BarOptions{
		Title:  title,
		XLabel: "flow size",
		YLabel: ylabel,
		Scale:  ScaleAuto,
	}
	if err := bar(path, opts, bars); err != nil {
		return fmt.Errorf("plot fct %s: %w", path, err)
	}
	return nil
}

// bar is Bar without the error context, shared by the bar figures.
func bar(path string, opts BarOptions, bars Bars) error {
	size, err := opts.Size.resolve()
	if err != nil {
		return err
	}
	if len(bars.Groups) == 0 {
		return fmt.Errorf("no groups: %w", ErrNoData)
	}
	if len(bars.Series) == 0 {
		return fmt.Errorf("no series: %w", ErrNoData)
	}
	for i, s := range bars.Series {
		if len(s.Values) != len(bars.Groups) {
			return fmt.Errorf("series %d (%q) has %d values for %d groups",
				i, s.Label, len(s.Values), len(bars.Groups))
		}
		if (s.Lo != nil || s.Hi != nil) && (len(s.Lo) != len(s.Values) || len(s.Hi) != len(s.Values)) {
			return fmt.Errorf("series %d (%q) has %d values but %d low and %d high ends",
				i, s.Label, len(s.Values), len(s.Lo), len(s.Hi))
		}
	}

	r := valueRange(bars.Series)
	logY, err := opts.Scale.log(r)
	if err != nil {
		return err
	}
	if logY && r.maxPos == 0 {
		return fmt.Errorf("no positive value for a log scale: %w", ErrNoData)
	}
	if !logY && r.finite == 0 {
		return fmt.Errorf("no finite value: %w", ErrNoData)
	}

	var out []byte
	out, err = render(size, func(c draw.Canvas) {
		p := newPlot(opts.Title, opts.XLabel, opts.YLabel)
		p.NominalX(bars.Groups...)
		grid := plotter.NewGrid()
		grid.Vertical.Color = nil
		grid.Horizontal = gridStyle()
		if logY {
			p.Y.Scale = gplot.LogScale{}
			p.Y.Tick.Marker = logTicks{}
		}
		p.Add(grid)
		gb := &groupedBars{series: bars.Series, groups: len(bars.Groups), logY: logY}
		p.Add(gb)
		leg := newLegend()
		for i, s := range bars.Series {
			leg.Add(legendLabel(i, s.Label), barThumb{color: seriesColor(i)})
		}
		if logY {
			// Whole decades around the positive values: logTicks
			// labels powers of ten, and bars need a positive base.
			p.Y.Min = math.Pow(10, math.Floor(math.Log10(r.minPos)))
			p.Y.Max = math.Pow(10, math.Ceil(math.Log10(r.maxPos)))
			if p.Y.Min == p.Y.Max {
				p.Y.Max *= 10
			}
		} else {
			if p.Y.Min == p.Y.Max {
				p.Y.Max = p.Y.Min + 1
			}
			p.Y.Max = roundUpToStep(p.Y.Min, p.Y.Max, 0)
		}
		drawWithLegend(c, p, leg)
	})
	if err != nil {
		return err
	}
	return writeFile(path, out)
}

// valueStats summarises the drawable values of a bar chart.
type valueStats struct {
	finite         int     // number of finite values
	minPos, maxPos float64 // smallest and largest value > 0; 0 if none
	minNeg         float64 // smallest value < 0; 0 if none
}

// log tells whether an axis of scale s over values r is logarithmic.
func (s Scale) log(r valueStats) (bool, error) {
	switch s {
	case ScaleAuto:
		return r.minNeg == 0 && r.minPos > 0 && r.maxPos/r.minPos > 100, nil
	case ScaleLinear:
		return false, nil
	case ScaleLog:
		return true, nil
	}
	return false, fmt.Errorf("unknown scale %v", s)
}

// valueRange returns the valueStats of every series, whiskers included.
func valueRange(series []BarSeries) valueStats {
	var r valueStats
	for _, s := range series {
		for _, v := range slices.Concat(s.Values, s.Lo, s.Hi) {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			r.finite++
			switch {
			case v > 0:
				if r.minPos == 0 || v < r.minPos {
					r.minPos = v
				}
				r.maxPos = math.Max(r.maxPos, v)
			case v < 0:
				r.minNeg = math.Min(r.minNeg, v)
			}
		}
	}
	return r
}

// groupedBars is a gonum plotter drawing series side by side in each
// group. Group g is centred at X = g; its bars share groupWidth of the
// unit between group centres.
type groupedBars struct {
	series []BarSeries
	groups int
	logY   bool
}

// barSpan returns the X extent of the bar of series s in group g.
func (b *groupedBars) barSpan(g, s int) (lo, hi float64) {
	w := groupWidth / float64(len(b.series))
	lo = float64(g) - groupWidth/2 + float64(s)*w
	return lo, lo + w
}

// drawable reports whether v gives a visible bar on this chart's scale.
func (b *groupedBars) drawable(v float64) bool {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return false
	}
	return !b.logY || v > 0
}

// Plot implements gonum's plot.Plotter.
func (b *groupedBars) Plot(c draw.Canvas, p *gplot.Plot) {
	trX, trY := p.Transforms(&c)
	base := 0.0
	if b.logY {
		base = p.Y.Min
	}
	outline := draw.LineStyle{Color: color.Gray{Y: 0x40}, Width: vg.Points(0.5)}
	for s, ser := range b.series {
		fill := seriesColor(s)
		for g, v := range ser.Values {
			if !b.drawable(v) {
				continue
			}
			lo, hi := b.barSpan(g, s)
			x0, x1 := trX(lo), trX(hi)
			bottom := base
			if b.logY && v < bottom {
				// Below the axis: nothing to show.
				continue
			}
			y0, y1 := trY(bottom), trY(v)
			pts := []vg.Point{{X: x0, Y: y0}, {X: x0, Y: y1}, {X: x1, Y: y1}, {X: x1, Y: y0}}
			c.FillPolygon(fill, c.ClipPolygonY(pts))
			c.StrokeLines(outline, c.ClipLinesY(append(pts, pts[0]))...)
			if ser.Lo != nil && b.drawable(ser.Lo[g]) && b.drawable(ser.Hi[g]) {
				// The whisker: a vertical line over the range, with caps.
				xm, cap := (x0+x1)/2, (x1-x0)/4
				ylo, yhi := trY(ser.Lo[g]), trY(ser.Hi[g])
				whisker := draw.LineStyle{Color: color.Black, Width: vg.Points(1)}
				c.StrokeLines(whisker, c.ClipLinesY(
					[]vg.Point{{X: xm, Y: ylo}, {X: xm, Y: yhi}},
					[]vg.Point{{X: xm - cap, Y: ylo}, {X: xm + cap, Y: ylo}},
					[]vg.Point{{X: xm - cap, Y: yhi}, {X: xm + cap, Y: yhi}})...)
			}
		}
	}
}

// DataRange implements gonum's plot.DataRanger: X spans every group with
// half a unit of margin, Y spans the drawable values and zero.
func (b *groupedBars) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, xmax = -0.5, float64(b.groups)-0.5
	ymin, ymax = math.Inf(1), math.Inf(-1)
	if !b.logY {
		ymin, ymax = 0, 0
	}
	for _, ser := range b.series {
		for g, v := range ser.Values {
			if b.drawable(v) {
				ymin, ymax = math.Min(ymin, v), math.Max(ymax, v)
			}
			if ser.Hi != nil && b.drawable(ser.Hi[g]) {
				ymax = math.Max(ymax, ser.Hi[g])
			}
		}
	}
	return xmin, xmax, ymin, ymax
}

// barThumb is the legend thumbnail of a bar series: a filled square.
type barThumb struct {
	color color.Color
}

// Thumbnail implements gonum's plot.Thumbnailer.
func (t barThumb) Thumbnail(c *draw.Canvas) {
	side := c.Max.Y - c.Min.Y
	x0 := c.Min.X + (c.Max.X-c.Min.X-side)/2
	pts := []vg.Point{
		{X: x0, Y: c.Min.Y}, {X: x0, Y: c.Max.Y},
		{X: x0 + side, Y: c.Max.Y}, {X: x0 + side, Y: c.Min.Y},
	}
	c.FillPolygon(t.color, pts)
}
