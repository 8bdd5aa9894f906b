package plot

import (
	"fmt"
	"image/color"
	"math"
	"sort"
	"time"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Panel is one panel of a [Panels] figure, typically one congestion
// control: its label, and one time series per run (repeat) of it. The
// first run is drawn in the panel's colour, the others in a lighter shade
// behind it, so that the panel shows the spread over runs.
type Panel struct {
	Label string
	Runs  [][]Point
}

// PanelOptions describes a [Panels] figure.
type PanelOptions struct {
	// Title is drawn above the panels.
	Title string
	// YLabel names the value and its unit, e.g. "queue (KB)"; it is
	// drawn once, along the left of the stack of panels.
	YLabel string
	// YScale multiplies every value: Y = V × YScale, e.g. 1e-3 to show
	// bytes as KB. Zero means 1.
	YScale float64
	// XUnit is the duration one X-axis unit stands for: X = T / XUnit.
	// Zero chooses from the window shown: milliseconds when it is
	// shorter than two seconds, seconds otherwise.
	XUnit time.Duration
	// From and To restrict the figure to the window From ≤ T ≤ To, to
	// zoom on an episode: points outside it are dropped, except that the
	// line to the nearest one on either side is drawn up to the edge. A
	// zero To means the time of the latest point.
	From, To time.Duration
	// Columns is the number of columns of panels; zero chooses one
	// column for up to maxPanelRows panels and as few columns as keep
	// that many rows otherwise.
	Columns int
	// Width is the image width in pixels; zero means DefaultWidth for
	// one column and colWidth more per further column. The height
	// follows from the number of rows, panelHeight pixels each.
	Width int
}

// Layout of a [Panels] figure, in pixels: each row of panels gets
// panelHeight, and the figure panelsChrome more for its title, the time
// axis and its label, up to MaxSide. Columns after the first add colWidth
// to the default width. Up to maxPanelRows panels are stacked in a single
// column by default.
const (
	panelHeight  = 150
	panelsChrome = 80
	colWidth     = 400
	maxPanelRows = 6
	// panelTicks is about how many labelled ticks a panel's value axis
	// gets: fewer than a full figure's, as a panel is short.
	panelTicks = 3
)

// Panels writes to path a PNG with one panel per entry of panels, in the
// order given, filling a column from top to bottom before the next. All
// panels share one time window and one value range, starting at zero (or
// below, for negative values), so that they compare at a glance; the time
// axis is labelled under the bottom panel of each column and the value
// axis along the left column only. Each panel is titled with its label
// and drawn in the colour its series gets in the other figures.
//
// Points whose value is NaN or ±Inf are skipped, and each run is
// downsampled to the width of a panel as by [Lines]. The error wraps
// [ErrNoData] when panels is empty or no run has a finite point in the
// window (or a line across it); it says so when opts.To is set but not
// after opts.From.
func Panels(path string, opts PanelOptions, panels []Panel) error {
	if err := drawPanels(path, opts, panels); err != nil {
		return fmt.Errorf("plot panels %s: %w", path, err)
	}
	return nil
}

// QueuePanels is [Panels] for the bottleneck queue between from and to
// (a zero to means the end of the data): point values in bytes, shown in
// KB (1000 bytes).
func QueuePanels(path, title string, from, to time.Duration, panels []Panel) error {
	opts := PanelOptions{Title: title, YLabel: "queue (KB)", YScale: 1 / bytesPerKB, From: from, To: to}
	if err := drawPanels(path, opts, panels); err != nil {
		return fmt.Errorf("plot queue panels %s: %w", path, err)
	}
	return nil
}

// panelLayout is the grid a Panels figure is drawn in.
type panelLayout struct {
	cols, rows int
	size       Size
}

// layoutPanels returns the grid and image size for n panels.
func layoutPanels(n int, opts PanelOptions) (panelLayout, error) {
	cols := opts.Columns
	switch {
	case cols < 0:
		return panelLayout{}, fmt.Errorf("%d columns", cols)
	case cols == 0:
		cols = (n + maxPanelRows - 1) / maxPanelRows
	}
	cols = min(cols, n)
	rows := (n + cols - 1) / cols
	width := opts.Width
	if width == 0 {
		width = min(MaxSide, DefaultWidth+colWidth*(cols-1))
	}
	size, err := Size{Width: width, Height: min(MaxSide, panelsChrome+panelHeight*rows)}.resolve()
	if err != nil {
		return panelLayout{}, err
	}
	return panelLayout{cols: cols, rows: rows, size: size}, nil
}

// timeAxis returns the unit and label of the time axis for a window of
// the given length.
func timeAxis(unit, window time.Duration) (time.Duration, string) {
	if unit <= 0 {
		unit = time.Second
		if window < 2*time.Second {
			unit = time.Millisecond
		}
	}
	switch unit {
	case time.Second:
		return unit, "time (s)"
	case time.Millisecond:
		return unit, "time (ms)"
	case time.Microsecond:
		return unit, "time (µs)"
	case time.Nanosecond:
		return unit, "time (ns)"
	default:
		return unit, fmt.Sprintf("time (× %v)", unit)
	}
}

// windowRun returns the part of xys, sorted by X, that lies in [lo, hi],
// together with the nearest point outside on either side (so that the
// line reaches the edges of the window), and the index range of the part
// inside within the result.
func windowRun(xys plotter.XYs, lo, hi float64) (run plotter.XYs, in0, in1 int) {
	i := sort.Search(len(xys), func(k int) bool { return xys[k].X >= lo })
	j := sort.Search(len(xys), func(k int) bool { return xys[k].X > hi })
	a, b := max(i-1, 0), min(j+1, len(xys))
	return xys[a:b], i - a, j - a
}

// drawPanels is Panels without the error context.
func drawPanels(path string, opts PanelOptions, panels []Panel) error {
	if len(panels) == 0 {
		return fmt.Errorf("no panels: %w", ErrNoData)
	}
	if opts.To != 0 && opts.To <= opts.From {
		return fmt.Errorf("empty window: To %v is not after From %v", opts.To, opts.From)
	}
	scale := opts.YScale
	if scale == 0 {
		scale = 1
	}
	if math.IsNaN(scale) || math.IsInf(scale, 0) {
		return fmt.Errorf("y scale %v is not finite", scale)
	}
	lay, err := layoutPanels(len(panels), opts)
	if err != nil {
		return err
	}

	from, to := opts.From, opts.To
	if to == 0 {
		to = from
		for _, p := range panels {
			for _, run := range p.Runs {
				for _, pt := range run {
					to = max(to, pt.T)
				}
			}
		}
	}
	unit, xlabel := timeAxis(opts.XUnit, to-from)
	xmin, xmax := float64(from)/float64(unit), float64(to)/float64(unit)
	cols := max(1, lay.size.Width/lay.cols) // pixel columns per panel

	data := make([][]plotter.XYs, len(panels))
	ymin, ymax, total := 0.0, math.Inf(-1), 0
	minRuns, maxRuns := math.MaxInt, 0
	for i, p := range panels {
		minRuns, maxRuns = min(minRuns, len(p.Runs)), max(maxRuns, len(p.Runs))
		for _, pts := range p.Runs {
			run, in0, in1 := windowRun(toXYs(pts, unit, scale), xmin, xmax)
			shown := run[in0:in1] // the points that set the value range
			if len(shown) == 0 {
				if in0 == 0 || in1 == len(run) {
					run = nil // nothing in the window, nor a line across it
				}
				shown = run // only a line across: its ends set the range
			}
			for _, xy := range shown {
				ymin, ymax = math.Min(ymin, xy.Y), math.Max(ymax, xy.Y)
			}
			total += len(shown)
			data[i] = append(data[i], downsample(run, cols))
		}
	}
	if total == 0 {
		return fmt.Errorf("%d panels without a finite point in [%v, %v]: %w", len(panels), from, to, ErrNoData)
	}
	ymax = math.Max(ymax, 0)
	if ymax <= ymin {
		ymax = ymin + 1
	}
	ymax = roundUpToStep(ymin, ymax, panelTicks)
	if xmax <= xmin {
		xmax = xmin + 1 // a single instant: show one unit after it
	}

	// Every panel says how many runs it shows unless they all have the
	// same number, which the subtitle then says once.
	subtitle := ""
	if minRuns == maxRuns && maxRuns > 1 {
		subtitle = fmt.Sprintf("%d runs per panel: the first dark, later runs light", maxRuns)
	}

	out, err := render(lay.size, func(c draw.Canvas) {
		title := gplot.New().Title
		c = drawTitle(c, opts.Title, title.TextStyle, vg.Points(4))
		small := title.TextStyle
		small.Font.Size = vg.Points(10)
		c = drawTitle(c, subtitle, small, vg.Points(2))
		c = drawAxisLabels(c, xlabel, opts.YLabel)

		label := small
		label.XAlign, label.YAlign = draw.XLeft, draw.YBottom
		labelH := label.Rectangle("Mg").Size().Y + vg.Points(3)
		tiles := draw.Tiles{
			Rows: lay.rows, Cols: lay.cols,
			PadTop: labelH, PadY: labelH + vg.Points(4),
			PadX: vg.Points(12), PadRight: vg.Points(16), // room for the last time label
		}
		plots := make([][]*gplot.Plot, lay.rows)
		for r := range plots {
			plots[r] = make([]*gplot.Plot, lay.cols)
		}
		for i := range panels {
			col, row := i/lay.rows, i%lay.rows
			last := row == lay.rows-1 || i == len(panels)-1 // the bottom of its column
			plots[row][col] = panelPlot(i, data[i], xmin, xmax, ymin, ymax, last, col == 0)
		}
		canvases := gplot.Align(plots, tiles, c)
		for i, p := range panels {
			col, row := i/lay.rows, i%lay.rows
			pc := canvases[row][col]
			plots[row][col].Draw(pc)
			text := legendLabel(i, p.Label)
			if minRuns != maxRuns {
				text = fmt.Sprintf("%s (%d %s)", text, len(p.Runs), plural(len(p.Runs), "run", "runs"))
			}
			dc := plots[row][col].DataCanvas(pc)
			drawPanelLabel(pc, label, vg.Point{X: dc.Min.X, Y: dc.Max.Y + vg.Points(2)}, i, text)
		}
	})
	if err != nil {
		return err
	}
	return writeFile(path, out)
}

// panelPlot returns the plot of the i-th panel: its runs, the first on
// top in the panel's colour and the others lighter, on the shared ranges.
// Tick labels are drawn on the time axis only when bottom is set and on
// the value axis only when left is set.
func panelPlot(i int, runs []plotter.XYs, xmin, xmax, ymin, ymax float64, bottom, left bool) *gplot.Plot {
	p := newPlot("", "", "")
	xt, yt := niceTicks{}, niceTicks{target: panelTicks}
	// The grid follows the labelled ticks even where they go unlabelled.
	p.Add(tickGrid{x: xt, y: yt})
	xt.noLabels, yt.noLabels = !bottom, !left
	p.X.Tick.Marker, p.Y.Tick.Marker = xt, yt
	for r := len(runs) - 1; r >= 0; r-- { // the first run last, on top
		xys := runs[r]
		if len(xys) == 0 {
			continue
		}
		sty := seriesLineStyle(i)
		sty.Dashes = nil // each panel has one colour: no need to tell lines apart
		if r > 0 {
			sty.Color = lighter(sty.Color)
			sty.Width = vg.Points(0.8)
		}
		p.Add(&plotter.Line{XYs: xys, LineStyle: sty})
		if len(xys) == 1 {
			p.Add(&plotter.Scatter{XYs: xys, GlyphStyle: draw.GlyphStyle{
				Color: sty.Color, Radius: vg.Points(2.5), Shape: draw.CircleGlyph{},
			}})
		}
	}
	p.X.Min, p.X.Max = xmin, xmax
	p.Y.Min, p.Y.Max = ymin, ymax
	return p
}

// tickGrid is a gonum plotter drawing the light background grid at the
// labelled ticks of x and y, whatever tickers the axes themselves use.
type tickGrid struct {
	x, y gplot.Ticker
}

// Plot implements gonum's plot.Plotter.
func (g tickGrid) Plot(c draw.Canvas, p *gplot.Plot) {
	trX, trY := p.Transforms(&c)
	sty := gridStyle()
	for _, t := range g.x.Ticks(p.X.Min, p.X.Max) {
		if !t.IsMinor() {
			x := trX(t.Value)
			c.StrokeLine2(sty, x, c.Min.Y, x, c.Max.Y)
		}
	}
	for _, t := range g.y.Ticks(p.Y.Min, p.Y.Max) {
		if !t.IsMinor() {
			y := trY(t.Value)
			c.StrokeLine2(sty, c.Min.X, y, c.Max.X, y)
		}
	}
}

// drawAxisLabels draws xlabel centred along the bottom of c and ylabel,
// rotated, centred along its left, and returns the rest of c.
func drawAxisLabels(c draw.Canvas, xlabel, ylabel string) draw.Canvas {
	sty := gplot.New().X.Label.TextStyle
	pad := vg.Points(4)
	if xlabel != "" {
		s := sty
		s.XAlign, s.YAlign = draw.XCenter, draw.YBottom
		c.FillText(s, vg.Point{X: (c.Min.X + c.Max.X) / 2, Y: c.Min.Y + pad}, xlabel)
		c = draw.Crop(c, 0, 0, s.Rectangle(xlabel).Size().Y+2*pad, 0)
	}
	if ylabel != "" {
		s := sty
		s.Rotation = math.Pi / 2
		s.XAlign, s.YAlign = draw.XCenter, draw.YTop
		c.FillText(s, vg.Point{X: c.Min.X + pad, Y: (c.Min.Y + c.Max.Y) / 2}, ylabel)
		c = draw.Crop(c, sty.Rectangle(ylabel).Size().Y+2*pad, 0, 0, 0)
	}
	return c
}

// drawPanelLabel draws at pt a short line in the i-th series' colour and
// text after it, in sty, so that the panel's colour ties it to the other
// figures.
func drawPanelLabel(c draw.Canvas, sty draw.TextStyle, pt vg.Point, i int, text string) {
	sw := vg.Points(16)
	h := sty.Rectangle(text).Size().Y
	line := seriesLineStyle(i)
	line.Dashes = nil
	line.Width = vg.Points(2)
	y := pt.Y + h/2 - vg.Points(1)
	c.StrokeLine2(line, pt.X, y, pt.X+sw, y)
	c.FillText(sty, vg.Point{X: pt.X + sw + vg.Points(4), Y: pt.Y}, text)
}

// plural returns one when n is 1 and many otherwise.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// lighter returns c blended halfway to white, for the runs drawn behind
// the first in a panel.
func lighter(c color.Color) color.Color {
	r, g, b, _ := c.RGBA()
	mix := func(v uint32) uint8 { return uint8((v>>8 + 0xff) / 2) }
	return color.RGBA{R: mix(r), G: mix(g), B: mix(b), A: 0xff}
}
