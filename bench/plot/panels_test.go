package plot

import (
	"errors"
	"math"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// panelRuns returns n runs of a sawtooth queue over 2 s, each shifted.
func panelRuns(runs, n int) [][]Point {
	var out [][]Point
	for r := range runs {
		pts := make([]Point, n)
		for i := range pts {
			pts[i] = Point{T: time.Duration(i) * 2 * time.Second / time.Duration(n), V: float64((i*37+r*1000)%50_000) * 10}
		}
		out = append(out, pts)
	}
	return out
}

func TestPanelsAndCDF(t *testing.T) {
	dir := t.TempDir()
	var panels []Panel
	var cdf []CDFSeries
	for i, name := range ccNames() {
		panels = append(panels, Panel{Label: name, Runs: panelRuns(1+i%3, 5000)})
		var vs []float64
		for _, r := range panels[i].Runs {
			for _, p := range r {
				vs = append(vs, p.V)
			}
		}
		cdf = append(cdf, CDFSeries{Label: name, Values: vs})
	}
	for _, tc := range []struct {
		name string
		draw func(path string) error
		w, h int
	}{
		{"panels", func(p string) error { return QueuePanels(p, "queue", 0, 0, panels) }, DefaultWidth, panelsTitle + panelHeight*len(panels)},
		{"zoom", func(p string) error {
			return QueuePanels(p, "zoom", 500*time.Millisecond, 530*time.Millisecond, panels[:2])
		}, DefaultWidth, panelsTitle + panelHeight*2},
		{"cdf", func(p string) error { return QueueCDF(p, "cdf", cdf) }, DefaultWidth, DefaultHeight},
		{"bars with whiskers", func(p string) error {
			b := fctBars(ccNames())
			for i := range b.Series {
				b.Series[i].Lo, b.Series[i].Hi = slices.Clone(b.Series[i].Values), slices.Clone(b.Series[i].Values)
				for g := range b.Series[i].Values {
					b.Series[i].Lo[g] *= 0.8
					b.Series[i].Hi[g] *= 1.3
				}
			}
			return FCT(p, "fct", b, "ms")
		}, DefaultWidth, DefaultHeight},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".png")
			if err := tc.draw(path); err != nil {
				t.Fatal(err)
			}
			checkPNG(t, path, tc.w, tc.h)
		})
	}
	if len(cdf[0].Values) != len(panels[0].Runs[0]) {
		t.Errorf("CDF changed its input")
	}
}

func TestCDFPoints(t *testing.T) {
	v := make([]float64, 100_000)
	for i := range v {
		v[len(v)-1-i] = float64(i)
	}
	xys := cdfPoints(v, 1)
	if len(xys) > 2*maxCDFPoints {
		t.Errorf("%d points, want about %d at most", len(xys), maxCDFPoints)
	}
	if last := xys[len(xys)-1]; last.X != 99_999 || last.Y != 1 {
		t.Errorf("last point %v, want the maximum at 1", last)
	}
	for i := 1; i < len(xys); i++ {
		if xys[i].X < xys[i-1].X || xys[i].Y < xys[i-1].Y {
			t.Fatalf("not monotonic at %d: %v then %v", i, xys[i-1], xys[i])
		}
	}
	if v[0] != 99_999 {
		t.Errorf("cdfPoints sorted its input")
	}
	if got := cdfPoints([]float64{math.NaN(), math.Inf(1)}, 1); len(got) != 0 {
		t.Errorf("non-finite values drawn: %v", got)
	}
}

func TestPanelsErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		err    error
		noData bool
	}{
		{"no panels", QueuePanels(filepath.Join(dir, "a.png"), "", 0, 0, nil), true},
		{"empty window", QueuePanels(filepath.Join(dir, "b.png"), "", time.Second, time.Second, []Panel{{Runs: panelRuns(1, 10)}}), false},
		{"nothing in the window", QueuePanels(filepath.Join(dir, "c.png"), "", time.Hour, 2*time.Hour, []Panel{{Runs: panelRuns(1, 10)}}), true},
		{"empty CDF", QueueCDF(filepath.Join(dir, "d.png"), "", []CDFSeries{{Label: "x"}}), true},
		{"bad whiskers", FCT(filepath.Join(dir, "e.png"), "", Bars{Groups: []string{"a"}, Series: []BarSeries{{Values: []float64{1}, Lo: []float64{1}}}}, "ms"), false},
	} {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if errors.Is(tc.err, ErrNoData) != tc.noData {
			t.Errorf("%s: %v; wraps ErrNoData %v, want %v", tc.name, tc.err, errors.Is(tc.err, ErrNoData), tc.noData)
		}
	}
}
