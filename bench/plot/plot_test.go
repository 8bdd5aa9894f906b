package plot

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"image"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg/draw"
)

// sampleDir, when set (go test ./bench/plot -args -plot.samples=DIR), makes
// TestRender and TestLongSeries also write their figures to DIR, which must
// exist, so that they can be looked at.
var sampleDir = flag.String("plot.samples", "", "also write the rendered sample figures to this directory")

// maxPNGBytes is the size bound every figure of the default size must
// stay under; larger figures get a bound in proportion to their area.
const maxPNGBytes = 150 << 10

// ccNames returns the congestion controls the bench compares, used as
// labels.
func ccNames() []string {
	return []string{"cubic", "bbr", "reno", "bpf_dctcp", "theta_powertcp", "powertcp", "hpcc"}
}

// queueSeries returns one synthetic queue trace (bytes) per name, n points
// each over 20 ms: an incast burst that each CC drains at its own speed,
// plus deterministic noise.
func queueSeries(names []string, n int) []Series {
	out := make([]Series, len(names))
	for i, name := range names {
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		pts := make([]Point, n)
		peak := 400e3 / float64(i+1)
		drain := 1 + float64(i)
		standing := 20e3 * float64(len(names)-i)
		for j := range pts {
			t := 20 * time.Millisecond * time.Duration(j) / time.Duration(n)
			ms := float64(t) / float64(time.Millisecond)
			v := standing
			if ms > 5 {
				v += peak * math.Exp(-(ms-5)*drain)
			}
			v += rng.Float64() * 5e3
			pts[j] = Point{T: t, V: v}
		}
		out[i] = Series{Label: name, Points: pts}
	}
	return out
}

// throughputSeries returns one synthetic throughput trace (bits/s) per
// name, n points each over 20 ms, converging to a fair share of 100 Gbit/s.
func throughputSeries(names []string, n int) []Series {
	out := make([]Series, len(names))
	for i, name := range names {
		pts := make([]Point, n)
		for j := range pts {
			t := 20 * time.Millisecond * time.Duration(j) / time.Duration(n)
			ms := float64(t) / float64(time.Millisecond)
			share := 100e9 / float64(len(names))
			v := share * (1 - math.Exp(-ms/(1+float64(i)))) * (1 + 0.1*math.Sin(ms*float64(i+1)))
			pts[j] = Point{T: t, V: v}
		}
		out[i] = Series{Label: name, Points: pts}
	}
	return out
}

// fctBars returns synthetic p99 FCTs (ms) for three size buckets, spanning
// more than two decades, with one zero and one missing value.
func fctBars(names []string) Bars {
	b := Bars{Groups: []string{"<10KB", "10KB-1MB", ">1MB"}}
	for i, name := range names {
		f := 1 + 0.3*float64(i)
		b.Series = append(b.Series, BarSeries{Label: name, Values: []float64{0.02 * f, 0.9 * f, 35 * f}})
	}
	b.Series[0].Values[1] = math.NaN()
	b.Series[len(b.Series)-1].Values[0] = 0
	return b
}

// checkPNG decodes the PNG at path and checks its dimensions, its size and
// that it shows some drawing, including some colour (the data).
func checkPNG(t *testing.T, path string, w, h int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Taller figures, such as panels, may take proportionally more.
	if limit := maxPNGBytes * max(1, float64(w*h)/(DefaultWidth*DefaultHeight)); float64(len(data)) > limit {
		t.Errorf("%s: %d bytes, want at most %.0f", path, len(data), limit)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: decode: %v", path, err)
	}
	if got := img.Bounds().Size(); got != (image.Point{X: w, Y: h}) {
		t.Errorf("%s: size %v, want %dx%d", path, got, w, h)
	}
	nonWhite, coloured := 0, 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r < 0xf000 || g < 0xf000 || bl < 0xf000 {
				nonWhite++
			}
			if max(r, g, bl)-min(r, g, bl) > 0x3000 {
				coloured++
			}
		}
	}
	total := b.Dx() * b.Dy()
	if nonWhite < total/100 {
		t.Errorf("%s: only %d of %d pixels are not white", path, nonWhite, total)
	}
	if coloured < total/200 {
		t.Errorf("%s: only %d of %d pixels are coloured", path, coloured, total)
	}
	t.Logf("%s: %dx%d, %d bytes", filepath.Base(path), b.Dx(), b.Dy(), len(data))
}

func TestRender(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name   string
		w, h   int
		render func(path string) error
	}{
		{"queue", DefaultWidth, DefaultHeight, func(p string) error {
			return Queue(p, "Incast: bottleneck queue", queueSeries(ccNames(), 2000))
		}},
		{"throughput", DefaultWidth, DefaultHeight, func(p string) error {
			return Throughput(p, "Incast: throughput", throughputSeries(ccNames(), 2000))
		}},
		{"fct", DefaultWidth, DefaultHeight, func(p string) error {
			return FCT(p, "Web search: p99 FCT", fctBars(ccNames()), "p99 FCT (ms)")
		}},
		{"fct_linear", DefaultWidth, DefaultHeight, func(p string) error {
			b := Bars{Groups: []string{"<10KB", ">1MB"}, Series: []BarSeries{
				{Label: "cubic", Values: []float64{3, 5}},
				{Label: "powertcp", Values: []float64{1, 2.5}},
			}}
			return FCT(p, "Small span: linear scale", b, "mean FCT (ms)")
		}},
		{"lines_sized", 800, 450, func(p string) error {
			return Lines(p, LineOptions{
				Title: "Custom size", XLabel: "time (µs)", YLabel: "cwnd (packets)",
				XUnit: time.Microsecond, Size: Size{Width: 800, Height: 450},
			}, throughputSeries(ccNames()[:3], 500))
		}},
		{"bar_sized", 480, 270, func(p string) error {
			return Bar(p, BarOptions{Title: "Custom size", YLabel: "drops", Scale: ScaleLinear,
				Size: Size{Width: 480, Height: 270}}, fctBars(ccNames()[:4]))
		}},
		{"eight_series", DefaultWidth, DefaultHeight, func(p string) error {
			names := append(ccNames(), "a_rather_long_experimental_cc_name")
			return Queue(p, "Eight series", queueSeries(names, 1000))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name+".png")
			if err := tt.render(path); err != nil {
				t.Fatal(err)
			}
			checkPNG(t, path, tt.w, tt.h)
			if *sampleDir != "" {
				if err := tt.render(filepath.Join(*sampleDir, tt.name+".png")); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestDeterministic(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.png"), filepath.Join(dir, "b.png")
	for _, p := range []string{a, b} {
		if err := Queue(p, "q", queueSeries(ccNames(), 3000)); err != nil {
			t.Fatal(err)
		}
	}
	da, _ := os.ReadFile(a)
	db, _ := os.ReadFile(b)
	if !bytes.Equal(da, db) {
		t.Error("two renders of the same input differ")
	}
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok.png")
	nan := math.NaN()
	good := queueSeries(ccNames()[:2], 10)
	tests := []struct {
		name    string
		render  func() error
		prefix  string // expected start of the message
		noData  bool   // errors.Is(err, ErrNoData)
		missing string // a path that must not exist afterwards
	}{
		{"queue nil", func() error { return Queue(ok, "t", nil) }, "plot queue", true, ok},
		{"queue no points", func() error {
			return Queue(ok, "t", []Series{{Label: "cubic"}, {Label: "bbr", Points: []Point{}}})
		}, "plot queue", true, ok},
		{"throughput all NaN", func() error {
			return Throughput(ok, "t", []Series{{Label: "hpcc", Points: []Point{{0, nan}, {time.Millisecond, math.Inf(1)}}}})
		}, "plot throughput", true, ok},
		{"queue bad dir", func() error {
			return Queue(filepath.Join(dir, "no", "such", "dir", "q.png"), "t", good)
		}, "plot queue", false, ""},
		{"lines empty path", func() error { return Lines("", LineOptions{}, good) }, "plot lines", false, ""},
		{"lines bad size", func() error {
			return Lines(ok, LineOptions{Size: Size{Width: 10, Height: 10}}, good)
		}, "plot lines", false, ok},
		{"lines NaN scale", func() error { return Lines(ok, LineOptions{YScale: nan}, good) }, "plot lines", false, ok},
		{"fct no groups", func() error {
			return FCT(ok, "t", Bars{Series: []BarSeries{{Label: "x"}}}, "ms")
		}, "plot fct", true, ok},
		{"fct no series", func() error {
			return FCT(ok, "t", Bars{Groups: []string{"a"}}, "ms")
		}, "plot fct", true, ok},
		{"fct all NaN", func() error {
			return FCT(ok, "t", Bars{Groups: []string{"a", "b"}, Series: []BarSeries{{Label: "x", Values: []float64{nan, nan}}}}, "ms")
		}, "plot fct", true, ok},
		{"fct length mismatch", func() error {
			return FCT(ok, "t", Bars{Groups: []string{"a", "b"}, Series: []BarSeries{{Label: "x", Values: []float64{1}}}}, "ms")
		}, "plot fct", false, ok},
		{"bar log of zeros", func() error {
			return Bar(ok, BarOptions{Scale: ScaleLog}, Bars{Groups: []string{"a"}, Series: []BarSeries{{Label: "x", Values: []float64{0}}}})
		}, "plot bars", true, ok},
		{"bar unknown scale", func() error {
			return Bar(ok, BarOptions{Scale: Scale(9)}, Bars{Groups: []string{"a"}, Series: []BarSeries{{Label: "x", Values: []float64{1}}}})
		}, "plot bars", false, ok},
		{"fct bad dir", func() error {
			return FCT(filepath.Join(dir, "missing", "f.png"), "t", fctBars(ccNames()), "ms")
		}, "plot fct", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.render()
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.HasPrefix(err.Error(), tt.prefix) {
				t.Errorf("error %q does not start with %q", err, tt.prefix)
			}
			if got := errors.Is(err, ErrNoData); got != tt.noData {
				t.Errorf("errors.Is(%q, ErrNoData) = %v, want %v", err, got, tt.noData)
			}
			if tt.missing != "" {
				if _, statErr := os.Stat(tt.missing); statErr == nil {
					t.Errorf("%s was written despite the error", tt.missing)
				}
			}
		})
	}
}

func TestBadData(t *testing.T) {
	// Input that is odd but drawable must render, not fail or panic.
	dir := t.TempDir()
	nan := math.NaN()
	tests := []struct {
		name   string
		render func(path string) error
	}{
		{"some NaN points", func(p string) error {
			s := queueSeries(ccNames()[:2], 100)
			s[0].Points[10].V = nan
			s[1].Points[20].V = math.Inf(-1)
			return Queue(p, "t", s)
		}},
		{"one empty series among others", func(p string) error {
			s := append(queueSeries(ccNames()[:2], 100), Series{Label: "hpcc"})
			return Queue(p, "t", s)
		}},
		{"single point", func(p string) error {
			return Throughput(p, "t", []Series{{Label: "bbr", Points: []Point{{time.Millisecond, 1e9}}}})
		}},
		{"all zero", func(p string) error {
			return Queue(p, "t", []Series{{Label: "reno", Points: []Point{{0, 0}, {time.Millisecond, 0}}}})
		}},
		{"unsorted and negative times", func(p string) error {
			return Lines(p, LineOptions{}, []Series{{Points: []Point{{3 * time.Millisecond, 1}, {-time.Millisecond, 2}, {0, 3}}}})
		}},
		{"same time", func(p string) error {
			pts := make([]Point, 5000)
			for i := range pts {
				pts[i] = Point{T: time.Second, V: float64(i)}
			}
			return Lines(p, LineOptions{}, []Series{{Label: "x", Points: pts}})
		}},
		{"log bars with zeros and NaN", func(p string) error {
			return Bar(p, BarOptions{Scale: ScaleLog}, Bars{Groups: []string{"a", "b", "c"}, Series: []BarSeries{
				{Label: "x", Values: []float64{0, 5, nan}},
				{Label: "y", Values: []float64{-1, 0.5, 1e6}},
			}})
		}},
		{"negative bars", func(p string) error {
			return Bar(p, BarOptions{}, Bars{Groups: []string{"a", "b"}, Series: []BarSeries{
				{Label: "x", Values: []float64{-0.01, 5}},
				{Label: "y", Values: []float64{-3, 500}},
			}})
		}},
		{"one tiny positive bar", func(p string) error {
			return FCT(p, "t", Bars{Groups: []string{"a"}, Series: []BarSeries{{Label: "x", Values: []float64{1e-300}}}}, "ms")
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, string(rune('a'+i))+".png")
			if err := tt.render(path); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(path); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestLongSeries(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name   string
		series []Series
		render func(path string, s []Series) error
	}{
		{"queue one 100k", queueSeries(ccNames()[:1], 100_000), func(p string, s []Series) error { return Queue(p, "100k points", s) }},
		{"queue seven 100k", queueSeries(ccNames(), 100_000), func(p string, s []Series) error { return Queue(p, "7 x 100k points", s) }},
		{"throughput seven 100k", throughputSeries(ccNames(), 100_000), func(p string, s []Series) error { return Throughput(p, "7 x 100k points", s) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, "long.png")
			start := time.Now()
			if err := tt.render(path, tt.series); err != nil {
				t.Fatal(err)
			}
			t.Logf("rendered in %v", time.Since(start))
			checkPNG(t, path, DefaultWidth, DefaultHeight)
			if *sampleDir != "" {
				name := strings.ReplaceAll(tt.name, " ", "_") + ".png"
				if err := tt.render(filepath.Join(*sampleDir, name), tt.series); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestDownsample(t *testing.T) {
	tests := []struct {
		name string
		n    int
		cols int
	}{
		{"short kept", 100, 640},
		{"exactly twice", 1280, 640},
		{"long", 100_000, 640},
		{"prime sizes", 99_991, 97},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			in := make(plotter.XYs, tt.n)
			lo, hi := math.Inf(1), math.Inf(-1)
			for i := range in {
				in[i] = plotter.XY{X: float64(i), Y: rng.NormFloat64()}
				lo, hi = math.Min(lo, in[i].Y), math.Max(hi, in[i].Y)
			}
			out := downsample(in, tt.cols)
			if tt.n <= 2*tt.cols && len(out) != tt.n {
				t.Errorf("short series changed: %d -> %d points", tt.n, len(out))
			}
			if tt.n > 2*tt.cols && len(out) > 2*tt.cols+2 {
				t.Errorf("%d points after downsampling to %d columns", len(out), tt.cols)
			}
			if out[0] != in[0] || out[len(out)-1] != in[len(in)-1] {
				t.Errorf("first or last point lost")
			}
			olo, ohi := math.Inf(1), math.Inf(-1)
			for i, xy := range out {
				if i > 0 && xy.X < out[i-1].X {
					t.Fatalf("point %d out of order", i)
				}
				olo, ohi = math.Min(olo, xy.Y), math.Max(ohi, xy.Y)
			}
			if olo != lo || ohi != hi {
				t.Errorf("extremes [%v, %v] became [%v, %v]", lo, hi, olo, ohi)
			}
		})
	}
}

func TestLegendLabel(t *testing.T) {
	tests := []struct {
		i     int
		label string
		want  string
	}{
		{0, "cubic", "cubic"},
		{2, "", "series 3"},
		{0, strings.Repeat("é", maxLabelRunes), strings.Repeat("é", maxLabelRunes)},
		{0, strings.Repeat("x", maxLabelRunes+5), strings.Repeat("x", maxLabelRunes-1) + "…"},
	}
	for _, tt := range tests {
		if got := legendLabel(tt.i, tt.label); got != tt.want {
			t.Errorf("legendLabel(%d, %q) = %q, want %q", tt.i, tt.label, got, tt.want)
		}
	}
}

func TestSeriesStylesDistinct(t *testing.T) {
	type style struct {
		r, g, b, a uint32
		dash       string
	}
	seen := map[style]int{}
	for i := range 32 {
		r, g, b, a := seriesColor(i).RGBA()
		s := style{r, g, b, a, fmt.Sprint(seriesDashes(i))}
		if j, dup := seen[s]; dup {
			t.Errorf("series %d and %d look the same", j, i)
		}
		seen[s] = i
	}
}

func TestRenderRecoversPanic(t *testing.T) {
	out, err := render(Size{Width: DefaultWidth, Height: DefaultHeight}, func(draw.Canvas) {
		panic("boom")
	})
	if err == nil || out != nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("render = %d bytes, %v; want the panic as an error", len(out), err)
	}
}

func TestScaleString(t *testing.T) {
	for s, want := range map[Scale]string{ScaleAuto: "auto", ScaleLinear: "linear", ScaleLog: "log", Scale(7): "Scale(7)"} {
		if got := s.String(); got != want {
			t.Errorf("Scale(%d).String() = %q, want %q", int(s), got, want)
		}
	}
}
