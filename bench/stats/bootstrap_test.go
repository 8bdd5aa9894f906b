package stats

import (
	"math/rand/v2"
	"testing"
)

// noisyRepeats makes n repeats of m samples each: every repeat has a scale
// of its own (the run-to-run movement a bench sees), each sample scatters
// around it, and the second variant's samples are the first's
// distribution times factor, drawn anew.
func noisyRepeats(n, m int, factor float64, seed uint64) (without, with [][]float64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	for range n {
		scale := 1 + rng.Float64() // 1 to 2
		var w, r []float64
		for range m {
			w = append(w, scale*(1+rng.ExpFloat64()))
			r = append(r, factor*scale*(1+rng.ExpFloat64()))
		}
		without, with = append(without, w), append(with, r)
	}
	return without, with
}

func TestPairedTailRatioInterval(t *testing.T) {
	same := [][]float64{seq(1, 50), seq(10, 60), seq(5, 90), seq(1, 20), seq(30, 40), seq(2, 200)}
	double := make([][]float64, len(same))
	for i, r := range same {
		for _, v := range r {
			double[i] = append(double[i], 2*v)
		}
	}
	noisyW, noisyR := noisyRepeats(8, 40, 1, 7)
	slowW, slowR := noisyRepeats(8, 40, 2, 7)
	tests := []struct {
		name          string
		without, with [][]float64
		p             float64
		wantOK        bool
		// the interval must lie within [loAtLeast, hiAtMost] and
		// hold contains
		loAtLeast, hiAtMost, contains float64
	}{
		{name: "same runs", without: same, with: same, p: 95, wantOK: true, loAtLeast: 1, hiAtMost: 1, contains: 1},
		{name: "twice as slow", without: same, with: double, p: 95, wantOK: true, loAtLeast: 0.5, hiAtMost: 0.5, contains: 0.5},
		{name: "noise alone straddles 1", without: noisyW, with: noisyR, p: 90, wantOK: true, loAtLeast: 0.5, hiAtMost: 2, contains: 1},
		{name: "twice as slow through noise stays below 1", without: slowW, with: slowR, p: 90, wantOK: true, loAtLeast: 0.2, hiAtMost: 0.95, contains: 0.5},
		{name: "too few repeats", without: same[:4], with: same[:4], p: 95},
		{name: "unpaired", without: same, with: same[:5], p: 95},
		{name: "an empty variant", without: same, with: make([][]float64, len(same)), p: 95},
		{name: "zero with On-Ramp", without: same, with: [][]float64{{0}, {0}, {0}, {0}, {0}, {0}}, p: 95},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := PairedTailRatioInterval(tt.without, tt.with, tt.p, 400, 0.95, 1)
			if ok != tt.wantOK {
				t.Fatalf("ok = %v, want %v (interval %+v)", ok, tt.wantOK, got)
			}
			if !ok {
				return
			}
			if got.Lo < tt.loAtLeast-1e-12 || got.Hi > tt.hiAtMost+1e-12 || got.Lo > tt.contains || got.Hi < tt.contains {
				t.Errorf("interval %.3f-%.3f: want within %.3f-%.3f and holding %.3f", got.Lo, got.Hi, tt.loAtLeast, tt.hiAtMost, tt.contains)
			}
			if got.Level != 0.95 || got.Draws != 400 {
				t.Errorf("level %v, draws %d: want 0.95 and 400", got.Level, got.Draws)
			}
			again, _ := PairedTailRatioInterval(tt.without, tt.with, tt.p, 400, 0.95, 1)
			if again != got {
				t.Errorf("the same seed gave %+v, then %+v", got, again)
			}
		})
	}
}

func TestPairedTailRatioIntervalDoesNotModifyInput(t *testing.T) {
	without := [][]float64{{3, 1, 2}, {6, 5, 4}, {9, 8, 7}, {1, 3, 2}, {5, 4, 6}}
	with := [][]float64{{2, 3, 1}, {4, 6, 5}, {7, 9, 8}, {2, 1, 3}, {6, 5, 4}}
	want := [][]float64{{3, 1, 2}, {6, 5, 4}, {9, 8, 7}, {1, 3, 2}, {5, 4, 6}}
	if _, ok := PairedTailRatioInterval(without, with, 90, 50, 0.9, 3); !ok {
		t.Fatal("no interval")
	}
	for i := range want {
		for j := range want[i] {
			if without[i][j] != want[i][j] {
				t.Fatalf("input repeat %d changed to %v", i, without[i])
			}
		}
	}
}
