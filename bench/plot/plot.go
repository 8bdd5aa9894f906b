package plot

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"image/png"
	"os"
	"time"
	"unicode/utf8"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Point is one sample of a time series: value V observed at time T since
// the start of the experiment.
type Point struct {
	T time.Duration
	V float64
}

// Series is one line of a line figure, typically one congestion control;
// Label (e.g. "powertcp") is shown in the legend.
type Series struct {
	Label  string
	Points []Point
}

// Bars is the input of a grouped bar chart: one group of bars per entry of
// Groups (e.g. flow-size buckets "<10KB", "10KB-1MB", ">1MB") and, inside
// each group, one bar per entry of Series.
type Bars struct {
	Groups []string
	Series []BarSeries
}

// BarSeries is one colour of a grouped bar chart, typically one congestion
// control. Values holds one value per group of the enclosing [Bars], in the
// same order; a NaN marks a missing value and draws no bar.
type BarSeries struct {
	Label  string
	Values []float64
	// Lo and Hi, when not nil, hold one value per group too: the range
	// (for example min and max over repeated runs) drawn as a whisker on
	// each bar. A NaN leaves a bar without one.
	Lo, Hi []float64
}

// Default figure size in pixels, used when a [Size] is left zero.
const (
	DefaultWidth  = 640
	DefaultHeight = 360
)

// Size limits in pixels: a [Size] outside them is rejected.
const (
	MinSide = 160
	MaxSide = 8192
)

// dpi is the resolution figures are rendered at; at 96 dots per inch the
// gonum default font sizes (10–12 pt) read well on a 640-pixel-wide image.
const dpi = 96

// maxLabelRunes bounds legend labels; longer labels are shortened with an
// ellipsis so that the legend column cannot crowd out the data.
const maxLabelRunes = 24

// ErrNoData is wrapped by the errors returned when the input leaves nothing
// to draw: no series, no points, or only non-finite values.
var ErrNoData = errors.New("no data to plot")

// Size is the size of a figure in pixels. The zero value means
// DefaultWidth×DefaultHeight; otherwise both sides must lie in
// [MinSide, MaxSide].
type Size struct {
	Width, Height int
}

// resolve returns the size to draw at, applying the default.
func (s Size) resolve() (Size, error) {
	if s == (Size{}) {
		return Size{Width: DefaultWidth, Height: DefaultHeight}, nil
	}
	if s.Width < MinSide || s.Width > MaxSide || s.Height < MinSide || s.Height > MaxSide {
		return Size{}, fmt.Errorf("size %dx%d outside [%d, %d] pixels", s.Width, s.Height, MinSide, MaxSide)
	}
	return s, nil
}

// seriesColor returns the colour of the i-th series. The first eight are
// distinct and stay readable on white and for colour-blind readers; later
// series reuse them (with a different dash, see seriesDashes).
func seriesColor(i int) color.Color {
	colors := [...]color.RGBA{
		{R: 0x00, G: 0x72, B: 0xb2, A: 0xff}, // blue
		{R: 0xd5, G: 0x5e, B: 0x00, A: 0xff}, // vermilion
		{R: 0x00, G: 0x9e, B: 0x73, A: 0xff}, // bluish green
		{R: 0xcc, G: 0x79, B: 0xa7, A: 0xff}, // reddish purple
		{R: 0xe6, G: 0x9f, B: 0x00, A: 0xff}, // orange
		{R: 0x56, G: 0xb4, B: 0xe9, A: 0xff}, // sky blue
		{R: 0x00, G: 0x00, B: 0x00, A: 0xff}, // black
		{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}, // brown
	}
	return colors[i%len(colors)]
}

// seriesDashes returns the dash pattern of the i-th series: solid, dashed,
// dotted and dash-dotted in turn. Paired with seriesColor, the first 32
// series all look different.
func seriesDashes(i int) []vg.Length {
	switch (i + i/8) % 4 {
	case 1:
		return []vg.Length{vg.Points(6), vg.Points(3)}
	case 2:
		return []vg.Length{vg.Points(1.5), vg.Points(2)}
	case 3:
		return []vg.Length{vg.Points(6), vg.Points(2), vg.Points(1.5), vg.Points(2)}
	default:
		return nil
	}
}

// seriesLineStyle returns the full line style of the i-th series.
func seriesLineStyle(i int) draw.LineStyle {
	return draw.LineStyle{
		Color:  seriesColor(i),
		Width:  vg.Points(1.2),
		Dashes: seriesDashes(i),
	}
}

// legendLabel returns the legend text of the i-th series: its label, or
// "series N" when empty, shortened to maxLabelRunes.
func legendLabel(i int, label string) string {
	if label == "" {
		return fmt.Sprintf("series %d", i+1)
	}
	if utf8.RuneCountInString(label) <= maxLabelRunes {
		return label
	}
	r := []rune(label)
	return string(r[:maxLabelRunes-1]) + "…"
}

// gridStyle is the style of the light background grid.
func gridStyle() draw.LineStyle {
	return draw.LineStyle{Color: color.Gray{Y: 0xd8}, Width: vg.Points(0.5)}
}

// newPlot returns a gonum plot with the title and axis labels set and the
// styling shared by every figure of this package.
func newPlot(title, xlabel, ylabel string) *gplot.Plot {
	p := gplot.New()
	p.Title.Text = title
	p.Title.Padding = vg.Points(6)
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.X.Tick.Marker = niceTicks{}
	p.Y.Tick.Marker = niceTicks{}
	return p
}

// drawWithLegend draws p on c with legend leg in a column to the right of
// the figure, top-aligned with the data area, so that the legend never
// hides data. The title of p is drawn by drawTitle across the whole
// width, legend column included, and its X label by drawXLabelled; both
// are cleared from p. A nil or empty legend gives the whole canvas to p.
func drawWithLegend(c draw.Canvas, p *gplot.Plot, leg *gplot.Legend) {
	c = drawTitle(c, p.Title.Text, p.Title.TextStyle, p.Title.Padding)
	p.Title.Text = ""
	pc := c
	if leg != nil {
		if w := leg.Rectangle(c).Size().X; w > 0 {
			gap := vg.Points(8)
			pc = draw.Crop(c, 0, -(w + 2*gap), 0, 0)
			leg.Draw(draw.Crop(c, c.Max.X-c.Min.X-w-gap, -gap, 0, 0))
		}
	}
	drawXLabelled(pc, p)
}

// drawXLabelled draws p on c with the X-axis label of p drawn by hand,
// centred under the data area, and cleared from p. gonum places that
// label by the arithmetic middle of the axis range, which on a log axis
// lies far to the right, and then shrinks the data area to make room.
func drawXLabelled(c draw.Canvas, p *gplot.Plot) {
	label := p.X.Label.Text
	if label == "" {
		p.Draw(c)
		return
	}
	p.X.Label.Text = ""
	sty := p.X.Label.TextStyle
	sty.XAlign, sty.YAlign = draw.XCenter, draw.YBottom
	h := sty.Rectangle(label).Size().Y + p.X.Label.Padding
	pc := draw.Crop(c, 0, 0, h, 0)
	p.Draw(pc)
	dc := p.DataCanvas(pc)
	c.FillText(sty, vg.Point{X: (dc.Min.X + dc.Max.X) / 2, Y: c.Min.Y + sty.FontExtents().Descent}, label)
}

// minTitleScale is how far drawTitle may shrink a title's font to fit.
const minTitleScale = 0.7

// drawTitle draws text centred at the top of c in style sty, its font
// shrunk (down to minTitleScale) if the text is wider than c, and returns
// the part of c below it and pad. An empty text draws nothing and returns
// c.
func drawTitle(c draw.Canvas, text string, sty draw.TextStyle, pad vg.Length) draw.Canvas {
	if text == "" {
		return c
	}
	if w, avail := sty.Width(text), c.Max.X-c.Min.X-vg.Points(4); w > avail {
		sty.Font.Size = max(sty.Font.Size*avail/w, sty.Font.Size*minTitleScale)
	}
	sty.XAlign, sty.YAlign = draw.XCenter, draw.YTop
	c.FillText(sty, vg.Point{X: (c.Min.X + c.Max.X) / 2, Y: c.Max.Y}, text)
	h := sty.Rectangle(text).Size().Y + pad
	return draw.Crop(c, 0, 0, 0, -h)
}

// newLegend returns an empty legend placed at the top left of whatever
// canvas it is drawn on.
func newLegend() *gplot.Legend {
	leg := gplot.NewLegend()
	leg.Top = true
	leg.Left = true
	leg.TextStyle.Font.Size = vg.Points(10)
	leg.ThumbnailWidth = vg.Points(24)
	leg.Padding = vg.Points(2)
	return &leg
}

// render draws a figure of the given size with fn and returns it encoded
// as PNG. A panic in fn or in gonum/plot is returned as an error.
func render(size Size, fn func(c draw.Canvas)) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("drawing failed: %v", r)
		}
	}()
	w := vg.Length(size.Width) * vg.Inch / dpi
	h := vg.Length(size.Height) * vg.Inch / dpi
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(dpi))
	fn(draw.New(img))
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	if err := enc.Encode(&buf, img.Image()); err != nil {
		return nil, fmt.Errorf("encode png: %w", err)
	}
	return buf.Bytes(), nil
}

// writeFile writes a rendered figure to path. The whole image is encoded
// before the file is created, so a failed render leaves no file behind.
func writeFile(path string, data []byte) error {
	if path == "" {
		return errors.New("empty output path")
	}
	return os.WriteFile(path, data, 0o644)
}
