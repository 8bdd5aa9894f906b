package stats

import (
	"math"
	"testing"
	"time"
)

// readings builds readings every step from 0 to end, with the backlog
// given by queue and a link sending at rate while anything is queued.
func readings(step, end time.Duration, rateBps float64, queue func(t time.Duration) float64) []QueueReading {
	var out []QueueReading
	sent := 0.0
	for t := time.Duration(0); t <= end; t += step {
		q := queue(t)
		if q > 0 {
			sent += rateBps / 8 * step.Seconds()
		}
		out = append(out, QueueReading{T: t, Backlog: q, Sent: sent})
	}
	return out
}

func TestDrain(t *testing.T) {
	const rate = 1e9
	ms := time.Millisecond
	cfg := DrainConfig{RateBps: rate, NearZero: 64 << 10, Hold: 1500 * time.Microsecond, PeakWindow: 300 * ms, UtilWindow: 20 * ms}
	tests := []struct {
		name      string
		queue     func(t time.Duration) float64
		lastStart time.Duration
		wantPeak  float64
		wantFrom  time.Duration
		drained   bool
		wantAt    time.Duration
		within    time.Duration // if set: no drain counts this long after the start
	}{
		{
			name: "peak from 10 ms, last flow at 11 ms, drained at 20 ms",
			queue: func(t time.Duration) float64 {
				switch {
				case t < 10*ms:
					return 10_000
				case t <= 12*ms:
					return 500_000
				case t < 20*ms:
					return 200_000
				}
				return 30_000
			},
			lastStart: 11 * ms, wantPeak: 500_000, wantFrom: 11 * ms, drained: true, wantAt: 20 * ms,
		},
		{
			name: "a late flow moves the start of the drain",
			queue: func(t time.Duration) float64 {
				if t >= 10*ms && t < 15*ms {
					return 400_000
				}
				return 30_000
			},
			lastStart: 18 * ms, wantPeak: 400_000, wantFrom: 18 * ms, drained: true, wantAt: 18 * ms,
		},
		{
			name: "a drain after the next incast's start does not count",
			queue: func(t time.Duration) float64 {
				if t >= 150*ms {
					return 0
				}
				return 300_000
			},
			lastStart: 10 * ms, within: 100 * ms,
		},
		{
			name:      "never drains",
			queue:     func(t time.Duration) float64 { return 900_000 },
			lastStart: 10 * ms, wantPeak: 900_000, wantFrom: 10 * ms, drained: false,
		},
		{
			name: "a dip shorter than Hold is no drain",
			queue: func(t time.Duration) float64 {
				if t >= 30*ms && t < 31*ms {
					return 0
				}
				if t >= 60*ms {
					return 0
				}
				return 300_000
			},
			lastStart: 10 * ms, wantPeak: 300_000, wantFrom: 10 * ms, drained: true, wantAt: 60 * ms,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := readings(500*time.Microsecond, 200*ms, rate, tt.queue)
			if tt.within > 0 {
				cfg := cfg
				cfg.Within = tt.within
				if got := Drain(rs, 10*ms, tt.lastStart, cfg); got.Drained {
					t.Fatalf("Drain within %v = %+v, want no drain", tt.within, got)
				}
				return
			}
			got := Drain(rs, 10*ms, tt.lastStart, cfg)
			if got.Peak != tt.wantPeak || got.From != tt.wantFrom || got.Drained != tt.drained {
				t.Fatalf("Drain = %+v; want peak %v, from %v, drained %v", got, tt.wantPeak, tt.wantFrom, tt.drained)
			}
			wantRTT := LineTime(64<<10, rate) + LineTime(tt.wantPeak, rate)
			if got.PeakRTT != wantRTT {
				t.Errorf("PeakRTT = %v, want %v", got.PeakRTT, wantRTT)
			}
			if !tt.drained {
				if !math.IsNaN(got.RTTs) || !math.IsNaN(got.UtilAfter) {
					t.Errorf("undrained result has RTTs %v, UtilAfter %v; want NaN", got.RTTs, got.UtilAfter)
				}
				return
			}
			if got.DrainedAt != tt.wantAt {
				t.Errorf("DrainedAt = %v, want %v", got.DrainedAt, tt.wantAt)
			}
			if want := float64(tt.wantAt-tt.wantFrom) / float64(wantRTT); math.Abs(got.RTTs-want) > 1e-9 {
				t.Errorf("RTTs = %v, want %v", got.RTTs, want)
			}
			// The link stays busy (the backlog never reaches 0 but in
			// the dip test, where it idles after the drain).
			wantUtil := 1.0
			if tt.queue(tt.wantAt) == 0 {
				wantUtil = 0
			}
			if math.Abs(got.UtilAfter-wantUtil) > 0.01 {
				t.Errorf("UtilAfter = %v, want %v", got.UtilAfter, wantUtil)
			}
		})
	}
}

func TestUtilisation(t *testing.T) {
	rs := []QueueReading{{T: 0, Sent: 0}, {T: 10 * time.Millisecond, Sent: 625_000}, {T: 20 * time.Millisecond, Sent: 1_250_000}}
	if u := Utilisation(rs, 0, 30*time.Millisecond, 1e9); math.Abs(u-0.5) > 1e-9 {
		t.Errorf("Utilisation = %v, want 0.5", u)
	}
	if u := Utilisation(rs, 15*time.Millisecond, 30*time.Millisecond, 1e9); !math.IsNaN(u) {
		t.Errorf("Utilisation over one reading = %v, want NaN", u)
	}
}
