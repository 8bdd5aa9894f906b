package plot

import (
	"fmt"
	"math"
	"time"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Panel is one panel of a [Panels] figure, typically one congestion
// control: its label, and one time series per run (repeat) of it. The
// first run is drawn in the panel's colour, the others lighter behind it,
// so that the panel shows the spread over runs.
type Panel struct {
	Label string
	Runs  [][]Point
}

// PanelOptions describes a [Panels] figure.
type PanelOptions struct {
	// Title is drawn above the panels.
	Title string
	// YLabel labels every panel's Y axis and should name the unit.
	YLabel string
	// YScale multiplies every value: Y = V × YScale. Zero means 1.
	YScale float64
	// From and To restrict the figure to points with From ≤ T ≤ To, to
	// zoom on an episode. A zero To means the end of the data.
	From, To time.Duration
	// Width is the image width in pixels; zero means DefaultWidth. The
	// height grows with the number of panels.
	Width int
}

// panelHeight is the height of one panel in pixels, and panelsTitle the
// room for the figure's title.
const (
	panelHeight = 150
	panelsTitle = 30
)

// Panels writes to path a PNG with one panel per entry of panels, stacked
// and sharing one time axis and one value range, so that the panels compare
// at a glance. Time is in ms when the window shown is under two seconds,
// in s otherwise; the value axis starts at zero. The error wraps
// [ErrNoData] when no panel has a finite point in the window.
func Panels(path string, opts PanelOptions, panels []Panel) error {
	if err := drawPanels(path, opts, panels); err != nil {
		return fmt.Errorf("plot panels %s: %w", path, err)
	}
	return nil
}

// QueuePanels is [Panels] for the bottleneck queue: values in bytes, shown
// in KB.
func QueuePanels(path, title string, from, to time.Duration, panels []Panel) error {
	return Panels(path, PanelOptions{Title: title, YLabel: "queue (KB)", YScale: 1 / bytesPerKB, From: from, To: to}, panels)
}

func drawPanels(path string, opts PanelOptions, panels []Panel) error {
	if len(panels) == 0 {
		return fmt.Errorf("no panels: %w", ErrNoData)
	}
	if opts.To != 0 && opts.To <= opts.From {
		return fmt.Errorf("window [%v, %v] is empty", opts.From, opts.To)
	}
	scale := opts.YScale
	if scale == 0 {
		scale = 1
	}
	if math.IsNaN(scale) || math.IsInf(scale, 0) {
		return fmt.Errorf("y scale %v is not finite", scale)
	}
	width := opts.Width
	if width == 0 {
		width = DefaultWidth
	}
	size, err := Size{Width: width, Height: min(MaxSide, panelsTitle+panelHeight*len(panels))}.resolve()
	if err != nil {
		return err
	}

	// The window, and the time unit that reads best for it.
	from, to := opts.From, opts.To
	if to == 0 {
		for _, p := range panels {
			for _, run := range p.Runs {
				for _, pt := range run {
					to = max(to, pt.T)
				}
			}
		}
	}
	unit, xlabel := time.Second, "time (s)"
	if to-from < 2*time.Second {
		unit, xlabel = time.Millisecond, "time (ms)"
	}

	data := make([][]plotter.XYs, len(panels))
	ymax, total := 0.0, 0
	for i, p := range panels {
		for _, run := range p.Runs {
			var in []Point
			for _, pt := range run {
				if pt.T >= from && pt.T <= to {
					in = append(in, pt)
				}
			}
			xys := downsample(toXYs(in, unit, scale), size.Width)
			for _, xy := range xys {
				ymax = math.Max(ymax, xy.Y)
			}
			total += len(xys)
			data[i] = append(data[i], xys)
		}
	}
	if total == 0 {
		return fmt.Errorf("%d panels without a finite point in [%v, %v]: %w", len(panels), from, to, ErrNoData)
	}
	if ymax <= 0 {
		ymax = 1
	}
	ymax = roundUpToStep(0, ymax)
	xmin, xmax := float64(from)/float64(unit), float64(to)/float64(unit)

	out, err := render(size, func(c draw.Canvas) {
		titleH := vg.Length(0)
		if opts.Title != "" {
			sty := gplot.New().Title.TextStyle
			sty.XAlign, sty.YAlign = draw.XCenter, draw.YTop
			titleH = sty.Rectangle(opts.Title).Size().Y + vg.Points(8)
			c.FillText(sty, vg.Point{X: (c.Min.X + c.Max.X) / 2, Y: c.Max.Y - vg.Points(4)}, opts.Title)
		}
		rows := draw.Tiles{Rows: len(panels), Cols: 1, PadTop: titleH, PadX: vg.Points(4), PadY: vg.Points(2)}
		for i, p := range panels {
			pl := newPlot("", "", opts.YLabel)
			if i == len(panels)-1 {
				pl.X.Label.Text = xlabel
			}
			grid := plotter.NewGrid()
			grid.Vertical, grid.Horizontal = gridStyle(), gridStyle()
			pl.Add(grid)
			for r := len(data[i]) - 1; r >= 0; r-- { // the first run on top
				if len(data[i][r]) == 0 {
					continue
				}
				sty := seriesLineStyle(i)
				sty.Dashes = nil
				if r > 0 {
					sty.Color = lighter(sty.Color)
					sty.Width = vg.Points(0.8)
				}
				pl.Add(&plotter.Line{XYs: data[i][r], LineStyle: sty})
			}
			pl.X.Min, pl.X.Max = xmin, xmax
			pl.Y.Min, pl.Y.Max = 0, ymax
			label := legendLabel(i, p.Label)
			if len(p.Runs) > 1 {
				label = fmt.Sprintf("%s (%d runs; the first dark)", label, len(p.Runs))
			}
			pl.Title.Text = label
			pl.Title.Padding = vg.Points(2)
			pl.Title.TextStyle.Font.Size = vg.Points(10)
			pl.Draw(rows.At(c, 0, i))
		}
	})
	if err != nil {
		return err
	}
	return writeFile(path, out)
}
