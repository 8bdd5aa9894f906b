package plot

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot/plotter"
)

// incastRuns returns, for each name, runs synthetic queue traces (bytes)
// of n points each over span: a standing queue that depends on the CC
// (none for the last three, whose queue is empty about half the time),
// and every 250 ms an incast burst that the CC drains at its own speed. Runs
// of one CC differ by their noise and a small shift of the bursts.
func incastRuns(names []string, runs, n int, span time.Duration) []Panel {
	out := make([]Panel, len(names))
	for i, name := range names {
		p := Panel{Label: name}
		for r := range runs {
			rng := rand.New(rand.NewPCG(uint64(i), uint64(r)))
			peak := 900e3 / float64(i+1)
			standing := 40e3 * float64(max(0, len(names)-i-3))
			shift := time.Duration(r) * 700 * time.Microsecond
			pts := make([]Point, n)
			for j := range pts {
				t := span * time.Duration(j) / time.Duration(n)
				since := (t - shift) % (250 * time.Millisecond)
				ms := float64(since) / float64(time.Millisecond)
				v := standing*(0.5+rng.Float64()) + math.Max(0, rng.NormFloat64())*1500
				if since >= 0 {
					v += peak * ms / 2 * math.Exp(-ms*(0.2+0.15*float64(i)))
				}
				pts[j] = Point{T: t, V: v}
			}
			p.Runs = append(p.Runs, pts)
		}
		out[i] = p
	}
	return out
}

// cdfOf returns one CDFSeries per panel with the values of all its runs.
func cdfOf(panels []Panel) []CDFSeries {
	out := make([]CDFSeries, len(panels))
	for i, p := range panels {
		out[i].Label = p.Label
		for _, run := range p.Runs {
			for _, pt := range run {
				out[i].Values = append(out[i].Values, pt.V)
			}
		}
	}
	return out
}

// ccNames6 is the six congestion controls of a bench run.
func ccNames6() []string {
	return []string{"cubic", "bbr", "bpf_dctcp", "theta_powertcp", "powertcp", "hpcc"}
}

// whiskerBars is fctBars with a min–max range over runs on every bar.
func whiskerBars(names []string) Bars {
	b := fctBars(names)
	for i := range b.Series {
		s := &b.Series[i]
		s.Lo, s.Hi = slices.Clone(s.Values), slices.Clone(s.Values)
		for g := range s.Values {
			s.Lo[g] *= 0.7 + 0.05*float64(i)
			s.Hi[g] *= 1.2 + 0.1*float64(g)
		}
	}
	return b
}

func TestRenderNewFigures(t *testing.T) {
	dir := t.TempDir()
	six := incastRuns(ccNames6(), 3, 20_000, 20*time.Second)
	seven := incastRuns(append(ccNames6(), "a_rather_long_experimental_cc_name"), 2, 2000, 2*time.Second)
	uneven := incastRuns(ccNames6()[:3], 3, 2000, time.Second)
	uneven[1].Runs = uneven[1].Runs[:1]
	tests := []struct {
		name   string
		w, h   int
		render func(path string) error
	}{
		{"queue_panels", DefaultWidth, panelsChrome + 6*panelHeight, func(p string) error {
			return QueuePanels(p, "incast: bottleneck queue, each CC's runs, 1 Gbit/s bottleneck", 0, 0, six)
		}},
		{"queue_panels_zoom", DefaultWidth, panelsChrome + 6*panelHeight, func(p string) error {
			at := 11 * time.Second
			return QueuePanels(p, "incast: queue around the incast at 11s", at-5*time.Millisecond, at+15*time.Millisecond, six)
		}},
		{"queue_cdf", DefaultWidth, DefaultHeight, func(p string) error {
			return QueueCDF(p, "incast: CDF of the queue, all runs, 1 Gbit/s bottleneck", cdfOf(six))
		}},
		{"queue_cdf_linear", DefaultWidth, DefaultHeight, func(p string) error {
			return CDF(p, CDFOptions{Title: "Linear CDF", XLabel: "queue (KB)", XScale: 1e-3, XAxis: ScaleLinear}, cdfOf(six))
		}},
		{"panels_grid", DefaultWidth + colWidth, panelsChrome + 4*panelHeight, func(p string) error {
			return Panels(p, PanelOptions{Title: "Seven CCs in two columns", YLabel: "queue (KB)", YScale: 1e-3}, seven)
		}},
		{"panels_uneven_runs", 800, panelsChrome + 3*panelHeight, func(p string) error {
			return Panels(p, PanelOptions{Title: "Uneven runs, µs", YLabel: "queue (B)", XUnit: time.Microsecond,
				From: 100 * time.Millisecond, To: 105 * time.Millisecond, Width: 800}, uneven)
		}},
		{"fct_whiskers", DefaultWidth, DefaultHeight, func(p string) error {
			return FCT(p, "websearch: FCT tail of all runs' flows; whiskers: each run's p99, 1 Gbit/s bottleneck",
				whiskerBars(ccNames6()), "p99 FCT (ms)")
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

func TestNewFiguresDeterministic(t *testing.T) {
	dir := t.TempDir()
	panels := incastRuns(ccNames6(), 2, 5000, 2*time.Second)
	cdf := cdfOf(panels)
	tests := []struct {
		name   string
		render func(path string) error
	}{
		{"panels", func(p string) error { return QueuePanels(p, "q", 0, 0, panels) }},
		{"zoom", func(p string) error { return QueuePanels(p, "q", 240*time.Millisecond, 270*time.Millisecond, panels) }},
		{"cdf", func(p string) error { return QueueCDF(p, "q", cdf) }},
		{"whiskers", func(p string) error { return FCT(p, "f", whiskerBars(ccNames()), "ms") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := filepath.Join(dir, tt.name+"-a.png"), filepath.Join(dir, tt.name+"-b.png")
			for _, p := range []string{a, b} {
				if err := tt.render(p); err != nil {
					t.Fatal(err)
				}
			}
			da, _ := os.ReadFile(a)
			db, _ := os.ReadFile(b)
			if !bytes.Equal(da, db) {
				t.Error("two renders of the same input differ")
			}
		})
	}
}

func TestNewFiguresErrors(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok.png")
	nan := math.NaN()
	good := incastRuns(ccNames6()[:2], 1, 100, time.Second)
	tests := []struct {
		name   string
		render func() error
		prefix string // expected start of the message
		noData bool   // errors.Is(err, ErrNoData)
	}{
		{"panels nil", func() error { return QueuePanels(ok, "t", 0, 0, nil) }, "plot queue panels", true},
		{"panels no runs", func() error {
			return Panels(ok, PanelOptions{}, []Panel{{Label: "x"}, {Label: "y", Runs: [][]Point{{}}}})
		}, "plot panels", true},
		{"panels all NaN", func() error {
			return Panels(ok, PanelOptions{}, []Panel{{Label: "x", Runs: [][]Point{{{0, nan}, {time.Second, math.Inf(1)}}}}})
		}, "plot panels", true},
		{"panels From = To", func() error { return QueuePanels(ok, "t", time.Second, time.Second, good) }, "plot queue panels", false},
		{"panels From > To", func() error { return QueuePanels(ok, "t", 2*time.Second, time.Second, good) }, "plot queue panels", false},
		{"panels nothing in window", func() error { return QueuePanels(ok, "t", time.Hour, 2*time.Hour, good) }, "plot queue panels", true},
		{"panels From after the data", func() error { return QueuePanels(ok, "t", time.Hour, 0, good) }, "plot queue panels", true},
		{"panels NaN scale", func() error { return Panels(ok, PanelOptions{YScale: nan}, good) }, "plot panels", false},
		{"panels negative columns", func() error { return Panels(ok, PanelOptions{Columns: -1}, good) }, "plot panels", false},
		{"panels bad width", func() error { return Panels(ok, PanelOptions{Width: 10}, good) }, "plot panels", false},
		{"panels empty path", func() error { return Panels("", PanelOptions{}, good) }, "plot panels", false},
		{"cdf nil", func() error { return QueueCDF(ok, "t", nil) }, "plot queue CDF", true},
		{"cdf empty", func() error { return QueueCDF(ok, "t", []CDFSeries{{Label: "x"}, {Label: "y", Values: []float64{}}}) }, "plot queue CDF", true},
		{"cdf all NaN", func() error {
			return CDF(ok, CDFOptions{}, []CDFSeries{{Label: "x", Values: []float64{nan, math.Inf(-1)}}})
		}, "plot CDF", true},
		{"cdf log of zeros", func() error {
			return CDF(ok, CDFOptions{XAxis: ScaleLog}, []CDFSeries{{Values: []float64{0, -1, 0}}})
		}, "plot CDF", true},
		{"cdf unknown scale", func() error { return CDF(ok, CDFOptions{XAxis: Scale(9)}, []CDFSeries{{Values: []float64{1}}}) }, "plot CDF", false},
		{"cdf Inf scale", func() error { return CDF(ok, CDFOptions{XScale: math.Inf(1)}, []CDFSeries{{Values: []float64{1}}}) }, "plot CDF", false},
		{"cdf bad size", func() error {
			return CDF(ok, CDFOptions{Size: Size{Width: 1, Height: 1}}, []CDFSeries{{Values: []float64{1}}})
		}, "plot CDF", false},
		{"whiskers too short", func() error {
			return FCT(ok, "t", Bars{Groups: []string{"a"}, Series: []BarSeries{{Values: []float64{1}, Lo: []float64{1}}}}, "ms")
		}, "plot fct", false},
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
			if _, statErr := os.Stat(ok); statErr == nil {
				t.Errorf("%s was written despite the error", ok)
			}
		})
	}
}

func TestNewFiguresOddData(t *testing.T) {
	// Input that is odd but drawable must render, not fail or panic.
	dir := t.TempDir()
	nan := math.NaN()
	one := []Panel{{Label: "x", Runs: [][]Point{{{time.Second, 5}}}}}
	tests := []struct {
		name   string
		render func(path string) error
	}{
		{"panel of one point", func(p string) error { return QueuePanels(p, "t", 0, 0, one) }},
		{"panel of one point, from it", func(p string) error { return QueuePanels(p, "t", time.Second, 0, one) }},
		{"an empty panel among others", func(p string) error {
			return QueuePanels(p, "t", 0, 0, append(incastRuns(ccNames6()[:2], 1, 100, time.Second), Panel{Label: "hpcc"}))
		}},
		{"negative values", func(p string) error {
			return Panels(p, PanelOptions{}, []Panel{{Runs: [][]Point{{{0, -3}, {time.Millisecond, 2}, {2 * time.Millisecond, nan}}}}})
		}},
		{"unsorted times", func(p string) error {
			return Panels(p, PanelOptions{}, []Panel{{Runs: [][]Point{{{3 * time.Millisecond, 1}, {0, 2}, {time.Millisecond, 3}}}}})
		}},
		{"window between two samples", func(p string) error {
			return Panels(p, PanelOptions{From: 2 * time.Millisecond, To: 3 * time.Millisecond},
				[]Panel{{Runs: [][]Point{{{0, 1}, {time.Millisecond, 2}, {10 * time.Millisecond, 4}}}}})
		}},
		{"forced columns beyond panels", func(p string) error {
			return Panels(p, PanelOptions{Columns: 5}, incastRuns(ccNames6()[:2], 1, 100, time.Second))
		}},
		{"cdf of one value", func(p string) error { return QueueCDF(p, "t", []CDFSeries{{Label: "x", Values: []float64{1500}}}) }},
		{"cdf all zero", func(p string) error { return QueueCDF(p, "t", []CDFSeries{{Label: "x", Values: []float64{0, 0, 0}}}) }},
		{"cdf with NaN and an empty series", func(p string) error {
			return QueueCDF(p, "t", []CDFSeries{{Label: "x", Values: []float64{nan, 1, 2e6, 0}}, {Label: "y"}})
		}},
		{"cdf log with negatives", func(p string) error {
			return CDF(p, CDFOptions{XAxis: ScaleLog}, []CDFSeries{{Values: []float64{-5, 0, 1, 1e9}}})
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

func TestLongNewFigures(t *testing.T) {
	// Six CCs × three runs × 200,000 samples: a long bench at a fine
	// sampling interval.
	panels := incastRuns(ccNames6(), 3, 200_000, 20*time.Second)
	cdf := cdfOf(panels)
	dir := t.TempDir()
	tests := []struct {
		name   string
		w, h   int
		render func(path string) error
	}{
		{"panels", DefaultWidth, panelsChrome + 6*panelHeight, func(p string) error { return QueuePanels(p, "long", 0, 0, panels) }},
		{"cdf", DefaultWidth, DefaultHeight, func(p string) error { return QueueCDF(p, "long", cdf) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name+".png")
			start := time.Now()
			if err := tt.render(path); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("rendered in %v, want under 3s", d)
			} else {
				t.Logf("rendered in %v", d)
			}
			checkPNG(t, path, tt.w, tt.h)
		})
	}
	if len(cdf[0].Values) != 3*200_000 || cdf[0].Values[0] != panels[0].Runs[0][0].V {
		t.Error("the CDF changed its input")
	}
}

func TestLayoutPanels(t *testing.T) {
	tests := []struct {
		n          int
		opts       PanelOptions
		cols, rows int
		w, h       int
	}{
		{1, PanelOptions{}, 1, 1, DefaultWidth, panelsChrome + panelHeight},
		{6, PanelOptions{}, 1, 6, DefaultWidth, panelsChrome + 6*panelHeight},
		{7, PanelOptions{}, 2, 4, DefaultWidth + colWidth, panelsChrome + 4*panelHeight},
		{13, PanelOptions{}, 3, 5, DefaultWidth + 2*colWidth, panelsChrome + 5*panelHeight},
		{2, PanelOptions{Columns: 3}, 2, 1, DefaultWidth + colWidth, panelsChrome + panelHeight},
		{6, PanelOptions{Columns: 2, Width: 700}, 2, 3, 700, panelsChrome + 3*panelHeight},
		{100, PanelOptions{Columns: 1}, 1, 100, DefaultWidth, MaxSide},
	}
	for _, tt := range tests {
		lay, err := layoutPanels(tt.n, tt.opts)
		if err != nil {
			t.Errorf("layoutPanels(%d, %+v): %v", tt.n, tt.opts, err)
			continue
		}
		want := panelLayout{cols: tt.cols, rows: tt.rows, size: Size{Width: tt.w, Height: tt.h}}
		if lay != want {
			t.Errorf("layoutPanels(%d, %+v) = %+v, want %+v", tt.n, tt.opts, lay, want)
		}
	}
}

func TestTimeAxis(t *testing.T) {
	tests := []struct {
		unit, window time.Duration
		want         time.Duration
		label        string
	}{
		{0, 20 * time.Second, time.Second, "time (s)"},
		{0, 2 * time.Second, time.Second, "time (s)"},
		{0, 2*time.Second - 1, time.Millisecond, "time (ms)"},
		{0, 20 * time.Millisecond, time.Millisecond, "time (ms)"},
		{time.Microsecond, time.Hour, time.Microsecond, "time (µs)"},
		{10 * time.Millisecond, time.Second, 10 * time.Millisecond, "time (× 10ms)"},
	}
	for _, tt := range tests {
		unit, label := timeAxis(tt.unit, tt.window)
		if unit != tt.want || label != tt.label {
			t.Errorf("timeAxis(%v, %v) = %v, %q; want %v, %q", tt.unit, tt.window, unit, label, tt.want, tt.label)
		}
	}
}

func TestWindowRun(t *testing.T) {
	xys := plotter.XYs{{X: 0}, {X: 1}, {X: 2}, {X: 3}, {X: 4}}
	tests := []struct {
		name     string
		lo, hi   float64
		want     []float64 // X of the points returned
		in0, in1 int
	}{
		{"all", 0, 4, []float64{0, 1, 2, 3, 4}, 0, 5},
		{"middle, with neighbours", 1.5, 2.5, []float64{1, 2, 3}, 1, 2},
		{"edges included", 1, 3, []float64{0, 1, 2, 3, 4}, 1, 4},
		{"between two points", 2.2, 2.8, []float64{2, 3}, 1, 1},
		{"before", -5, -1, []float64{0}, 0, 0},
		{"after", 7, 9, []float64{4}, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run, in0, in1 := windowRun(xys, tt.lo, tt.hi)
			var got []float64
			for _, xy := range run {
				got = append(got, xy.X)
			}
			if !slices.Equal(got, tt.want) || in0 != tt.in0 || in1 != tt.in1 {
				t.Errorf("windowRun(%v, %v) = %v [%d:%d], want %v [%d:%d]", tt.lo, tt.hi, got, in0, in1, tt.want, tt.in0, tt.in1)
			}
		})
	}
}

func TestCDFPoints(t *testing.T) {
	tests := []struct {
		name  string
		n     int
		exact int // how many top ranks must all be kept
	}{
		{"one", 1, 1},
		{"small", 100, 100},
		{"all kept", 1000, 1000},
		{"100k", 100_000, 999},
		{"1M", 1_000_000, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, uint64(tt.n)))
			v := make([]float64, tt.n)
			for i := range v {
				v[i] = math.Floor(rng.ExpFloat64() * 100) // ties, as queue samples have
			}
			v[0] = math.NaN()
			in := slices.Clone(v)
			xys, st := cdfPoints(v, 2)
			if !slices.EqualFunc(v, in, func(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }) {
				t.Fatal("cdfPoints changed its input")
			}
			finite := tt.n - 1
			if st.finite != finite {
				t.Errorf("%d finite values, want %d", st.finite, finite)
			}
			if finite == 0 {
				if len(xys) != 0 {
					t.Errorf("points %v for no finite value", xys)
				}
				return
			}
			if len(xys) > maxCDFPoints {
				t.Errorf("%d points, want at most %d", len(xys), maxCDFPoints)
			}
			sorted := slices.Clone(in[1:])
			slices.Sort(sorted)
			if first := xys[0]; first.X != 2*sorted[0] || first.Y != 0 {
				t.Errorf("first point %v, want (%v, 0)", first, 2*sorted[0])
			}
			if last := xys[len(xys)-1]; last.X != 2*sorted[finite-1] || last.Y != 1 {
				t.Errorf("last point %v, want (%v, 1)", last, 2*sorted[finite-1])
			}
			if st.maxPos != 2*sorted[finite-1] {
				t.Errorf("maxPos %v, want %v", st.maxPos, 2*sorted[finite-1])
			}
			for i := 1; i < len(xys); i++ {
				if xys[i].X < xys[i-1].X || xys[i].Y <= xys[i-1].Y {
					t.Fatalf("not increasing at %d: %v then %v", i, xys[i-1], xys[i])
				}
			}
			top := 0
			for _, xy := range xys {
				if xy.Y > 1-float64(min(tt.exact, finite))/float64(finite)+1e-12 {
					top++
				}
			}
			if want := min(tt.exact, finite); top < want {
				t.Errorf("%d of the top %d ranks kept", top, want)
			}
		})
	}
}

func TestCDFLogLabel(t *testing.T) {
	tests := []struct {
		label   string
		lo      float64
		clamped bool
		want    string
	}{
		{"queue (KB)", 0.01, false, "queue (KB)"},
		{"queue (KB)", 0.01, true, "queue (KB); values < 0.01 drawn at 0.01"},
		{"", 1000, true, "values < 1000 drawn at 1000"},
	}
	for _, tt := range tests {
		if got := logLabel(tt.label, tt.lo, tt.clamped); got != tt.want {
			t.Errorf("logLabel(%q, %v, %v) = %q, want %q", tt.label, tt.lo, tt.clamped, got, tt.want)
		}
	}
}

func TestLogTicks(t *testing.T) {
	tests := []struct {
		lo, hi float64
		labels []string // the labelled ticks, in order
		minor  int      // how many unlabelled ticks
	}{
		{0.1, 2000, []string{"0.1", "1", "10", "100", "1000"}, 33},
		{0.01, 1000, []string{"0.01", "0.1", "1", "10", "100", "1000"}, 40},
		{1, 50, []string{"1", "2", "5", "10", "20", "50"}, 8},
		{1e6, 1e8, []string{"1000000", "2000000", "5000000", "1e7", "2e7", "5e7", "1e8"}, 12},
		{0, 10, nil, 0},
	}
	for _, tt := range tests {
		var labels []string
		minor := 0
		for _, tk := range (logTicks{}).Ticks(tt.lo, tt.hi) {
			if tk.Value < tt.lo*(1-1e-9) || tk.Value > tt.hi*(1+1e-9) {
				t.Errorf("Ticks(%v, %v): tick %v out of range", tt.lo, tt.hi, tk.Value)
			}
			if tk.IsMinor() {
				minor++
			} else {
				labels = append(labels, tk.Label)
			}
		}
		if !slices.Equal(labels, tt.labels) || minor != tt.minor {
			t.Errorf("Ticks(%v, %v) = %q and %d minor, want %q and %d", tt.lo, tt.hi, labels, minor, tt.labels, tt.minor)
		}
	}
}

func TestNiceCeil(t *testing.T) {
	for v, want := range map[float64]float64{1: 1, 1.01: 2, 3: 5, 5: 5, 7: 10, 0.011: 0.02, 1003: 2000, 1e-3: 1e-3} {
		if got := niceCeil(v); math.Abs(got-want) > want*1e-12 {
			t.Errorf("niceCeil(%v) = %v, want %v", v, got, want)
		}
	}
}
