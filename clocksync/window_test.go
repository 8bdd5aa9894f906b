package clocksync

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestFitHoldsBurstsAndBelievesLastingQueues feeds one peer's fit windows
// of probes on a shared clock (true offset 0) whose one-way delay is
// 1–2 µs, then a stretch of windows whose every probe queued. A short
// stretch is a burst: the last believed fit is carried through it. A long
// one is the path's new state: once the hold is over, the agent believes
// the queued fits, with their margin as the error, in every window, and
// goes back to tight fits when the queue drains.
func TestFitHoldsBurstsAndBelievesLastingQueues(t *testing.T) {
	const (
		queued   = 60_000.0 // ns of queueing on every probe
		baseline = 1_000.0  // ns: an idle path's one-way delay
	)
	tests := []struct {
		name         string
		queuedFrom   int // first queued window, 1-based
		queuedWins   int
		wantHeld     int // windows that carry the last believed fit
		wantBelieved int // queued-margin fits published
	}{
		// fitSpan idle windows still in the span keep the first margins
		// small; a burst shorter than the hold is carried through.
		{name: "burst", queuedFrom: 11, queuedWins: 4, wantHeld: 2, wantBelieved: 0},
		{name: "lasting queue", queuedFrom: 11, queuedWins: 20, wantHeld: holdWindows, wantBelieved: 20 - (fitSpan - 1) - holdWindows},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			st := &probeState{}
			held, believed := 0, 0
			total := tt.queuedFrom + tt.queuedWins + fitSpan + 2
			for w := 1; w <= total; w++ {
				isQueued := w >= tt.queuedFrom && w < tt.queuedFrom+tt.queuedWins
				queue := func(rng *rand.Rand) float64 {
					if isQueued {
						return rng.Float64()*baseline + queued
					}
					return rng.Float64() * baseline
				}
				// A shared clock: offset and drift 0.
				sim := probeSim{minDelay: baseline, fwdQueue: queue, revQueue: queue}
				st.obs = sim.observeWindow(rng, w-1)
				fit, ok := st.fit(simStart + int64(w)*simWindow)
				if !ok {
					t.Fatalf("window %d: no fit published", w)
				}
				if math.Abs(fit.Offset) > math.Abs(fit.Margin)+baseline {
					t.Errorf("window %d: offset %.0f ns outside its margin %.0f ns on a shared clock", w, fit.Offset, fit.Margin)
				}
				switch {
				case st.sinceGood > 0:
					held++
				case math.Abs(fit.Margin) > queued/2:
					believed++
				}
				t.Logf("window %d: queued %v, offset %.0f ns, margin %.0f ns, carried %d", w, isQueued, fit.Offset, fit.Margin, st.sinceGood)
				if w == total && math.Abs(fit.Margin) > 4*baseline {
					t.Errorf("last window, %d after the queue drained: margin %.0f ns, want the idle path's", fitSpan+2, fit.Margin)
				}
			}
			if held != tt.wantHeld || believed != tt.wantBelieved {
				t.Errorf("%d windows carried the last believed fit and %d published a queued one, want %d and %d", held, believed, tt.wantHeld, tt.wantBelieved)
			}
		})
	}
}
