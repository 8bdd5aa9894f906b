package stats

import (
	"math"
	"testing"
	"time"
)

const us = time.Microsecond

func TestBucketOf(t *testing.T) {
	tests := []struct {
		bytes int64
		want  string
	}{
		{-1, BucketSmall},
		{0, BucketSmall},
		{9_999, BucketSmall},
		{10_000, BucketMedium}, // the lower boundary is medium
		{500_000, BucketMedium},
		{1_000_000, BucketMedium}, // the upper boundary is still medium
		{1_000_001, BucketLarge},
		{30_000_000, BucketLarge},
	}
	for _, tc := range tests {
		if got := BucketOf(tc.bytes); got != tc.want {
			t.Errorf("BucketOf(%d) = %q, want %q", tc.bytes, got, tc.want)
		}
	}
}

// approxBucket compares two summaries, allowing rounding in the means.
func approxBucket(got, want BucketSummary) bool {
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
	return got.Name == want.Name && got.Count == want.Count &&
		near(got.MeanUs, want.MeanUs) && got.P50Us == want.P50Us &&
		got.P99Us == want.P99Us && got.P999Us == want.P999Us &&
		got.SlowdownCount == want.SlowdownCount &&
		near(got.MeanSlowdown, want.MeanSlowdown) && got.P50Slowdown == want.P50Slowdown &&
		got.P99Slowdown == want.P99Slowdown && got.P999Slowdown == want.P999Slowdown
}

func TestBuckets(t *testing.T) {
	// Flows right at the boundaries, with an ideal FCT of 10 µs for
	// every size, so slowdown = FCT / 10 µs.
	fcts := []FCT{
		{Bytes: 1_000, Duration: 10 * us},
		{Bytes: 5_000, Duration: 30 * us},
		{Bytes: 9_999, Duration: 20 * us},     // small: largest size
		{Bytes: 10_000, Duration: 100 * us},   // medium: smallest size
		{Bytes: 1_000_000, Duration: 50 * us}, // medium: largest size
		{Bytes: 1_000_001, Duration: 5 * us},  // large: smallest size; faster than ideal
	}
	flat := func(int64) time.Duration { return 10 * us }
	smallOnlyZero := func(b int64) time.Duration {
		if b < 10_000 {
			return 0
		}
		return 10 * us
	}
	tests := []struct {
		name  string
		fcts  []FCT
		ideal func(int64) time.Duration
		want  []BucketSummary
	}{
		{"boundaries", fcts, flat, []BucketSummary{
			// FCTs [10 20 30]: mean 60/3 = 20; p50 rank ⌈1.5⌉ = 2 → 20;
			// p99 rank ⌈2.97⌉ = 3 → 30; p99.9 rank ⌈2.997⌉ = 3 → 30.
			// Slowdowns [1 2 3]: mean 2, p50 2, p99 3, p99.9 3.
			{Name: BucketSmall, Count: 3, MeanUs: 20, P50Us: 20, P99Us: 30, P999Us: 30,
				SlowdownCount: 3, MeanSlowdown: 2, P50Slowdown: 2, P99Slowdown: 3, P999Slowdown: 3},
			// FCTs [50 100]: mean 75; p50 rank ⌈1⌉ = 1 → 50; p99 rank
			// ⌈1.98⌉ = 2 → 100. Slowdowns [5 10]: mean 7.5, p50 5, p99 10.
			{Name: BucketMedium, Count: 2, MeanUs: 75, P50Us: 50, P99Us: 100, P999Us: 100,
				SlowdownCount: 2, MeanSlowdown: 7.5, P50Slowdown: 5, P99Slowdown: 10, P999Slowdown: 10},
			// One flow of 5 µs: slowdown 5/10 = 0.5, not clamped to 1.
			{Name: BucketLarge, Count: 1, MeanUs: 5, P50Us: 5, P99Us: 5, P999Us: 5,
				SlowdownCount: 1, MeanSlowdown: 0.5, P50Slowdown: 0.5, P99Slowdown: 0.5, P999Slowdown: 0.5},
			// FCTs [5 10 20 30 50 100]: mean 215/6; p50 rank 3 → 20;
			// p99 rank ⌈5.94⌉ = 6 → 100. Slowdowns [0.5 1 2 3 5 10]:
			// mean 21.5/6, p50 rank 3 → 2, p99 rank 6 → 10.
			{Name: BucketAll, Count: 6, MeanUs: 215.0 / 6, P50Us: 20, P99Us: 100, P999Us: 100,
				SlowdownCount: 6, MeanSlowdown: 21.5 / 6, P50Slowdown: 2, P99Slowdown: 10, P999Slowdown: 10},
		}},
		{"empty input keeps four buckets", nil, flat, []BucketSummary{
			{Name: BucketSmall}, {Name: BucketMedium}, {Name: BucketLarge}, {Name: BucketAll},
		}},
		{"nil ideal leaves slowdowns at zero", fcts[3:5], nil, []BucketSummary{
			{Name: BucketSmall},
			{Name: BucketMedium, Count: 2, MeanUs: 75, P50Us: 50, P99Us: 100, P999Us: 100},
			{Name: BucketLarge},
			{Name: BucketAll, Count: 2, MeanUs: 75, P50Us: 50, P99Us: 100, P999Us: 100},
		}},
		// The small flows have no ideal, so only the medium ones (slowdowns
		// [5 10]) count in "all": mean 7.5, p50 5, p99 10.
		{"zero ideal excluded from slowdown", fcts[1:5], smallOnlyZero, []BucketSummary{
			// FCTs [20 30]: mean 25, p50 20, p99 30.
			{Name: BucketSmall, Count: 2, MeanUs: 25, P50Us: 20, P99Us: 30, P999Us: 30},
			{Name: BucketMedium, Count: 2, MeanUs: 75, P50Us: 50, P99Us: 100, P999Us: 100,
				SlowdownCount: 2, MeanSlowdown: 7.5, P50Slowdown: 5, P99Slowdown: 10, P999Slowdown: 10},
			{Name: BucketLarge},
			// FCTs [20 30 50 100]: mean 200/4 = 50; p50 rank 2 → 30;
			// p99 rank ⌈3.96⌉ = 4 → 100.
			{Name: BucketAll, Count: 4, MeanUs: 50, P50Us: 30, P99Us: 100, P999Us: 100,
				SlowdownCount: 2, MeanSlowdown: 7.5, P50Slowdown: 5, P99Slowdown: 10, P999Slowdown: 10},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Buckets(tc.fcts, tc.ideal)
			if len(got) != len(tc.want) {
				t.Fatalf("Buckets returned %d summaries, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if !approxBucket(got[i], tc.want[i]) {
					t.Errorf("bucket %d = %+v\nwant %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestIdealFCT(t *testing.T) {
	tests := []struct {
		name    string
		bytes   int64
		rateBps float64
		rtt     time.Duration
		mss     int
		want    time.Duration
	}{
		// 1 segment: (1460 + 54)·8 = 12112 bit at 10 Gbit/s = 1211.2 ns
		// → 1211 ns, plus 2·10 µs.
		{"one full segment", 1460, 10e9, 10 * us, 1460, 20*us + 1211},
		// 2 segments: (1461 + 2·54)·8 = 12552 bit → 1255.2 ns → 1255 ns.
		{"one byte over", 1461, 10e9, 10 * us, 1460, 20*us + 1255},
		// ⌈1e6/1448⌉ = 691 segments (690·1448 = 999120 < 1e6):
		// (1e6 + 691·54)·8 = 1037314·8 = 8298512 bit at 25 Gbit/s
		// = 331940.48 ns → 331940 ns, plus 2·8 µs.
		{"1 MB at 25G", 1_000_000, 25e9, 8 * us, 1448, 16*us + 331940},
		// 100 B, 1 segment: 154·8 = 1232 bit at 1 Gbit/s = 1232 ns.
		{"tiny flow", 100, 1e9, 0, 1460, 1232},
		{"zero bytes is two RTTs", 0, 10e9, 10 * us, 1460, 20 * us},
		{"zero rate has no ideal", 1000, 0, 10 * us, 1460, 0},
		{"NaN rate has no ideal", 1000, math.NaN(), 10 * us, 1460, 0},
		{"zero mss has no ideal", 1000, 10e9, 10 * us, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := IdealFCT(tc.bytes, tc.rateBps, tc.rtt, tc.mss); got != tc.want {
				t.Fatalf("IdealFCT(%d, %v, %v, %d) = %v (%d ns), want %v (%d ns)",
					tc.bytes, tc.rateBps, tc.rtt, tc.mss, got, int64(got), tc.want, int64(tc.want))
			}
		})
	}
}
