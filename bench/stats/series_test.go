package stats

import (
	"math"
	"testing"
	"time"
)

func TestRateSeries(t *testing.T) {
	const (
		s  = time.Second
		ms = time.Millisecond
	)
	// Counter with a reset between 2 s and 2.5 s. Bytes counted since the
	// first sample: 0, 1000, 3000, 3000+500 = 3500 (reset: the 500 bytes
	// since zero), 3500+1500 = 5000.
	withReset := []Point{{0, 0}, {1 * s, 1000}, {2 * s, 3000}, {2500 * ms, 500}, {4 * s, 2000}}
	tests := []struct {
		name    string
		counter []Point
		window  time.Duration
		want    []Point
	}{
		{"with reset", withReset, s, []Point{
			{0, 8000},      // 1000 B in 1 s = 8000 bit/s
			{1 * s, 16000}, // 2000 B
			// At 3 s, a third of the way from 2.5 s to 4 s:
			// 3500 + 1500/3 = 4000; 4000 − 3000 = 1000 B.
			{2 * s, 8000},
			{3 * s, 8000}, // 5000 − 4000 = 1000 B
		}},
		{"unsorted input", []Point{withReset[3], withReset[0], withReset[4], withReset[2], withReset[1]}, s, []Point{
			{0, 8000}, {1 * s, 16000}, {2 * s, 8000}, {3 * s, 8000},
		}},
		// 1000 B/s from 0.5 s to 3.5 s. Windows align to whole seconds:
		// [1 s, 2 s) and [2 s, 3 s) are covered; [3 s, 4 s) is not.
		{"aligned windows", []Point{{500 * ms, 0}, {3500 * ms, 3000}}, s, []Point{
			{1 * s, 8000}, {2 * s, 8000},
		}},
		// 1000 B over 1 s in two 0.5 s windows: 500 B / 0.5 s = 8000 bit/s.
		{"half-second windows", []Point{{0, 0}, {1 * s, 1000}}, 500 * ms, []Point{
			{0, 8000}, {500 * ms, 8000},
		}},
		// Counter starting at a large value: only differences count.
		{"offset counter", []Point{{0, 1e9}, {1 * s, 1e9 + 125}, {2 * s, 1e9 + 375}}, s, []Point{
			{0, 1000},     // 125 B · 8
			{1 * s, 2000}, // 250 B · 8
		}},
		// Two samples at 1 s: the 1000-byte jump happens at the boundary
		// and counts in the window ending there.
		{"jump at boundary", []Point{{0, 0}, {1 * s, 0}, {1 * s, 1000}, {2 * s, 1000}}, s, []Point{
			{0, 8000}, {1 * s, 0},
		}},
		{"idle counter", []Point{{0, 42}, {2 * s, 42}}, s, []Point{{0, 0}, {1 * s, 0}}},
		{"one sample", []Point{{0, 1}}, s, nil},
		{"no samples", nil, s, nil},
		{"zero window", withReset, 0, nil},
		{"negative window", withReset, -s, nil},
		{"span shorter than window", []Point{{0, 0}, {900 * ms, 100}}, s, nil},
		// Samples at 0.5 s and 1.5 s cover no whole window.
		{"no whole window", []Point{{500 * ms, 0}, {1500 * ms, 100}}, s, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := RateSeries(tc.counter, tc.window)
			if len(got) != len(tc.want) {
				t.Fatalf("RateSeries = %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i].T != tc.want[i].T || math.Abs(got[i].V-tc.want[i].V) > 1e-6 {
					t.Fatalf("RateSeries = %v, want %v (differs at %d)", got, tc.want, i)
				}
			}
		})
	}
}

func TestRateSeriesDoesNotModifyInput(t *testing.T) {
	in := []Point{{2 * time.Second, 5}, {0, 0}}
	RateSeries(in, time.Second)
	if in[0].T != 2*time.Second || in[1].T != 0 {
		t.Fatalf("RateSeries reordered its input: %v", in)
	}
}

func TestRateSeriesBounded(t *testing.T) {
	// A 1 ns window over MaxWindows+5 ns would give MaxWindows+5 windows;
	// the cap keeps the first MaxWindows.
	end := time.Duration(MaxWindows + 5)
	got := RateSeries([]Point{{0, 0}, {end, float64(end)}}, 1)
	if len(got) != MaxWindows {
		t.Fatalf("RateSeries returned %d windows, want the cap %d", len(got), MaxWindows)
	}
	// One byte per ns is 8e9 bit/s in every window.
	if last := got[len(got)-1]; last.T != MaxWindows-1 || math.Abs(last.V-8e9) > 1 {
		t.Fatalf("last window = %+v, want {T:%d V:8e9}", last, MaxWindows-1)
	}
}

func TestMaxDuring(t *testing.T) {
	ms := time.Millisecond
	pts := []Point{{0, 5}, {1 * ms, 2}, {2 * ms, 9}, {3 * ms, 1}, {4 * ms, 3}}
	tests := []struct {
		name     string
		pts      []Point
		from, to time.Duration
		want     float64
		ok       bool
	}{
		{"whole series", pts, 0, 4 * ms, 9, true},
		{"inside, with the value at from", pts, 2500 * time.Microsecond, 4 * ms, 9, true},
		{"between two points: the one before", pts, 3100 * time.Microsecond, 3200 * time.Microsecond, 1, true},
		{"from exactly on a point", pts, 3 * ms, 4 * ms, 3, true},
		{"after the last point", pts, 10 * ms, 11 * ms, 3, true},
		{"before the first point", pts, -2 * ms, -1 * ms, 0, false},
		{"ends at the first point", pts, -2 * ms, 0, 5, true},
		{"empty series", nil, 0, ms, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := MaxDuring(tt.pts, tt.from, tt.to)
			if got != tt.want || ok != tt.ok {
				t.Errorf("MaxDuring(%v, %v) = %v, %v; want %v, %v", tt.from, tt.to, got, ok, tt.want, tt.ok)
			}
		})
	}
}
