package stats

import (
	"math"
	"testing"
	"time"
)

func TestJain(t *testing.T) {
	tests := []struct {
		name string
		xs   []float64
		want float64
	}{
		{"empty", nil, 0},
		{"all zero", []float64{0, 0, 0}, 1},
		{"one value", []float64{5}, 1},                   // 25/(1·25)
		{"equal", []float64{1, 1, 1, 1}, 1},              // 16/(4·4)
		{"one takes all", []float64{1, 0, 0, 0}, 0.25},   // 1/(4·1)
		{"one two three", []float64{1, 2, 3}, 36.0 / 42}, // 6²/(3·14)
		{"one three", []float64{1, 3}, 0.8},              // 16/(2·10)
		{"large equal", []float64{1e9, 1e9}, 1},          // 4e18/(2·2e18)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Jain(tc.xs); math.Abs(got-tc.want) > 1e-12 {
				t.Fatalf("Jain(%v) = %v, want %v", tc.xs, got, tc.want)
			}
		})
	}
}

// onGrid builds a rate series with one point per second, the first at
// start seconds.
func onGrid(start int, values ...float64) []Point {
	out := make([]Point, len(values))
	for i, v := range values {
		out[i] = Point{T: time.Duration(start+i) * time.Second, V: v}
	}
	return out
}

func TestConvergenceTime(t *testing.T) {
	const s = time.Second
	// Flow a runs from 0 s; flow b joins at 2 s. Jain's index of the
	// active flows at each second:
	//   0 s, 1 s: only a              → 1
	//   2 s: (10+1)²/(2·(100+1))      = 121/202 ≈ 0.599
	//   3 s: (8+3)²/(2·(64+9))        = 121/146 ≈ 0.829
	//   4 s: (6+4)²/(2·(36+16))       = 100/104 ≈ 0.962
	//   5 s … 9 s: equal rates        → 1
	a := onGrid(0, 10, 10, 10, 8, 6, 5, 5, 5, 5, 5)
	b := onGrid(2, 1, 3, 4, 5, 5, 5, 5, 5)
	// Like a, but dips to 1 at 6 s: (1+5)²/(2·(1+25)) = 36/52 ≈ 0.692.
	aDip := onGrid(0, 10, 10, 10, 8, 6, 5, 1, 5, 5, 5)
	// b leaves after 5 s.
	bShort := onGrid(2, 1, 3, 4, 5)
	// b with a stale duplicate at 4 s listed first: the later point wins.
	bDup := append(onGrid(2, 1, 3, 0), onGrid(4, 4, 5, 5, 5, 5, 5)...)
	// A flow present but starved (rate 0) is unfair: Jain(10, 0) = 0.5.
	starved := onGrid(0, 0, 0, 0, 0)

	tests := []struct {
		name   string
		rates  [][]Point
		from   time.Duration
		tol    float64
		hold   time.Duration
		want   time.Duration
		wantOK bool
	}{
		// ≥ 0.95 from 4 s on; 7 s − 4 s = 3 s of hold reached at 7 s.
		{"loose tolerance", [][]Point{a, b}, 2 * s, 0.05, 3 * s, 2 * s, true},
		// ≥ 0.99 only from 5 s; hold reached at 8 s; 5 s − 2 s.
		{"tight tolerance", [][]Point{a, b}, 2 * s, 0.01, 3 * s, 3 * s, true},
		// Hold of 4 s reached at the last point, 9 s.
		{"hold to the end", [][]Point{a, b}, 2 * s, 0.01, 4 * s, 3 * s, true},
		// Hold of 5 s would need a point at 10 s.
		{"data ends first", [][]Point{a, b}, 2 * s, 0.01, 5 * s, 0, false},
		// ≥ 0.8 from 3 s; zero hold accepts it at once.
		{"zero hold", [][]Point{a, b}, 2 * s, 0.2, 0, 1 * s, true},
		// 0.599 ≥ 0.5 right at the event.
		{"converged at event", [][]Point{a, b}, 2 * s, 0.5, 0, 0, true},
		// Before b joins only a is active, so from 0 s it is fair at once.
		{"single active flow", [][]Point{a, b}, 0, 0.01, s, 0, true},
		// The dip at 6 s breaks the 4–5 s run; 7–9 s is only 2 s long.
		{"dip resets the run", [][]Point{aDip, b}, 2 * s, 0.05, 3 * s, 0, false},
		// With a 2 s hold the run 7–9 s counts: 7 s − 2 s.
		{"run after dip", [][]Point{aDip, b}, 2 * s, 0.05, 2 * s, 5 * s, true},
		// After b leaves, a alone is fair: 6–9 s from 6 s.
		{"flow leaves", [][]Point{a, bShort}, 6 * s, 0.01, 3 * s, 0, true},
		// The duplicate 0 at 4 s is overridden by 4: same as b.
		{"duplicate timestamp", [][]Point{a, bDup}, 2 * s, 0.05, 3 * s, 2 * s, true},
		{"starved flow counts", [][]Point{onGrid(0, 10, 10, 10, 10), starved}, 0, 0.1, 0, 0, false},
		{"no series", nil, 0, 0.1, 0, 0, false},
		{"nothing after from", [][]Point{a, b}, 20 * s, 0.1, 0, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ConvergenceTime(tc.rates, tc.from, tc.tol, tc.hold)
			if got != tc.want || ok != tc.wantOK {
				t.Fatalf("ConvergenceTime = %v, %v; want %v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
