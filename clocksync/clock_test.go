package clocksync

import (
	"math"
	"testing"
)

// TestOffsetAtIsExact checks the truth the tests and the bench measure
// against: at times of today's magnitude (1.8e18 ns, where a float64 of
// the absolute time is good to 256 ns), OffsetAt gives b's reading minus
// a's to within the two skews' rounding, 1 ns.
func TestOffsetAtIsExact(t *testing.T) {
	const origin = int64(1_795_000_000_000_000_000)
	tests := []struct {
		name string
		a, b Skewed
	}{
		{"+5 ms +20 ppm against -3 ms -15 ppm", Skewed{Offset: 5_000_000, Drift: 20e-6, Origin: origin}, Skewed{Offset: -3_000_000, Drift: -15e-6, Origin: origin}},
		{"no skew against +1.3 ms +5 ppm", Skewed{Origin: origin}, Skewed{Offset: 1_300_000, Drift: 5e-6, Origin: origin}},
		{"different origins", Skewed{Offset: -6_500_000, Drift: -17e-6, Origin: origin}, Skewed{Offset: 123, Drift: 11e-6, Origin: origin + 7_000_000_123}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, since := range []int64{0, 1, 999_999_937, 72_000_000_001, 3_600_000_000_017} {
				base := origin + since
				aRead, bRead := tt.a.skew(base), tt.b.skew(base)
				got := OffsetAt(tt.a, tt.b, aRead)
				if d := math.Abs(got - float64(bRead-aRead)); d > 1 {
					t.Errorf("%d ns after the origin: OffsetAt = %.1f, the clocks differ by %d", since, got, bRead-aRead)
				}
			}
		})
	}
}
