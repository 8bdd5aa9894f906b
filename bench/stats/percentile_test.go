package stats

import (
	"math"
	"slices"
	"testing"
)

// seq returns the float64s lo, lo+1, ..., hi.
func seq(lo, hi int) []float64 {
	out := make([]float64, 0, hi-lo+1)
	for v := lo; v <= hi; v++ {
		out = append(out, float64(v))
	}
	return out
}

func TestPercentile(t *testing.T) {
	tens := []float64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}
	tests := []struct {
		name   string
		sorted []float64
		p      float64
		want   float64
	}{
		{"empty", nil, 50, 0},
		{"empty p=100", []float64{}, 100, 0},
		{"one sample p=50", []float64{7}, 50, 7},
		{"one sample p=100", []float64{7}, 100, 7},
		{"one sample tiny p", []float64{7}, 1e-9, 7},
		// n = 10: rank = ⌈p·10/100⌉.
		{"median", tens, 50, 50},        // ⌈5⌉ = 5 → 50
		{"p=10", tens, 10, 10},          // ⌈1⌉ = 1 → 10
		{"p=10.5", tens, 10.5, 20},      // ⌈1.05⌉ = 2 → 20
		{"p=99", tens, 99, 100},         // ⌈9.9⌉ = 10 → 100
		{"p=100", tens, 100, 100},       // ⌈10⌉ = 10 → 100
		{"tiny p", tens, 1e-9, 10},      // ⌈1e-9⌉ = 1 → 10
		{"p=0 gives min", tens, 0, 10},  // outside (0, 100]: clamped
		{"p<0 gives min", tens, -5, 10}, // clamped
		{"p>100 gives max", tens, 150, 100},
		{"NaN gives min", tens, math.NaN(), 10},
		// n = 1000, values 1..1000: rank = ⌈p·1000/100⌉ = ⌈10·p⌉.
		{"p99.9 of 1000", seq(1, 1000), 99.9, 999}, // ⌈999⌉, not 1000
		{"p99 of 1000", seq(1, 1000), 99, 990},     // ⌈990⌉
		{"p50 of 1000", seq(1, 1000), 50, 500},     // ⌈500⌉
		// n = 100, values 1..100: rank = ⌈p⌉.
		{"p99 of 100", seq(1, 100), 99, 99},
		{"p33.3 of 100", seq(1, 100), 33.3, 34}, // ⌈33.3⌉ = 34
		{"p0.1 of 100", seq(1, 100), 0.1, 1},    // ⌈0.1⌉ = 1
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percentile(tc.sorted, tc.p); got != tc.want {
				t.Fatalf("Percentile(p=%v) = %v, want %v", tc.p, got, tc.want)
			}
		})
	}
}

func TestPercentileOf(t *testing.T) {
	u := []uint32{5, 6, 7, 8}
	i := []int64{100, 200, 300}
	// n = 4: p50 → ⌈2⌉ = rank 2.
	if got := PercentileOf(u, 50); got != 6 {
		t.Fatalf("PercentileOf(uint32, 50) = %d, want 6", got)
	}
	// n = 4: p75.1 → ⌈3.004⌉ = rank 4.
	if got := PercentileOf(u, 75.1); got != 8 {
		t.Fatalf("PercentileOf(uint32, 75.1) = %d, want 8", got)
	}
	// n = 3: p66.6 → ⌈1.998⌉ = 2; p66.7 → ⌈2.001⌉ = 3.
	if got := PercentileOf(i, 66.6); got != 200 {
		t.Fatalf("PercentileOf(int64, 66.6) = %d, want 200", got)
	}
	if got := PercentileOf(i, 66.7); got != 300 {
		t.Fatalf("PercentileOf(int64, 66.7) = %d, want 300", got)
	}
	if got := PercentileOf([]int64(nil), 50); got != 0 {
		t.Fatalf("PercentileOf(empty int64) = %d, want 0", got)
	}
}

func TestSortedCopies(t *testing.T) {
	in := []int64{3, 1, 2}
	got := Sorted(in)
	if !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("Sorted = %v, want [1 2 3]", got)
	}
	if !slices.Equal(in, []int64{3, 1, 2}) {
		t.Fatalf("Sorted modified its input: %v", in)
	}
}

func TestSummary(t *testing.T) {
	tests := []struct {
		name   string
		values []float64
		want   ValueSummary
	}{
		{"empty", nil, ValueSummary{}},
		{"one", []float64{4}, ValueSummary{N: 1, Min: 4, Mean: 4, P50: 4, P99: 4, Max: 4}},
		// Sorted [1 2 3 10]: mean 16/4 = 4; p50 rank ⌈2⌉ = 2 → 2;
		// p99 rank ⌈3.96⌉ = 4 → 10.
		{"unsorted four", []float64{3, 1, 10, 2}, ValueSummary{N: 4, Min: 1, Mean: 4, P50: 2, P99: 10, Max: 10}},
		// 1..100: mean 5050/100 = 50.5; p50 rank 50 → 50; p99 rank 99 → 99.
		{"one to hundred", seq(1, 100), ValueSummary{N: 100, Min: 1, Mean: 50.5, P50: 50, P99: 99, Max: 100}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := slices.Clone(tc.values)
			if got := Summary(tc.values); got != tc.want {
				t.Fatalf("Summary = %+v, want %+v", got, tc.want)
			}
			if !slices.Equal(before, tc.values) {
				t.Fatal("Summary modified its input")
			}
		})
	}
}

func TestSupportedPercentile(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want float64
	}{
		{0, 0}, {19, 0}, {20, 50}, {99, 50}, {100, 90}, {199, 90}, {200, 95}, {500, 98},
		{615, 98}, {999, 98}, {1000, 99}, {9999, 99}, {10000, 99.9}, {1 << 20, 99.9},
	} {
		if got := SupportedPercentile(tc.n); got != tc.want {
			t.Errorf("SupportedPercentile(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
	if Supports(999, 99) || !Supports(1000, 99) || Supports(9999, 99.9) || !Supports(10000, 99.9) {
		t.Error("Supports: p99 needs 1,000 samples and p99.9 10,000")
	}
}
