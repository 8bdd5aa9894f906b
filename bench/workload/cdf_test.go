package workload

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// mustCDF builds a CDF from (bytes, prob) pairs or fails the test.
func mustCDF(t *testing.T, pts ...CDFPoint) CDF {
	t.Helper()
	c, err := NewCDF(pts)
	if err != nil {
		t.Fatalf("NewCDF(%v): %v", pts, err)
	}
	return c
}

// closeTo reports whether got is within rel (relative) of want.
func closeTo(got, want, rel float64) bool {
	return math.Abs(got-want) <= rel*math.Abs(want)
}

func TestNewCDFErrors(t *testing.T) {
	tests := []struct {
		name string
		pts  []CDFPoint
		want string // substring of the error
	}{
		{"empty", nil, "empty CDF table"},
		{"negative size", []CDFPoint{{-1, 0.5}, {10, 1}}, "negative size -1"},
		{"NaN probability", []CDFPoint{{1, math.NaN()}, {10, 1}}, "probabilities must lie in [0, 1]"},
		{"probability above 1", []CDFPoint{{1, 0.5}, {10, 1.5}}, "probability 1.5"},
		{"probability below 0", []CDFPoint{{1, -0.1}, {10, 1}}, "probability -0.1"},
		{"sizes descending", []CDFPoint{{10, 0.5}, {5, 1}}, "list sizes in ascending order"},
		{"probabilities decreasing", []CDFPoint{{1, 0.6}, {5, 0.4}, {10, 1}}, "must not decrease"},
		{"last below 1", []CDFPoint{{1, 0.5}, {10, 0.9}}, "it must be 1"},
		{"single point below 1", []CDFPoint{{10, 0.5}}, "it must be 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewCDF(tc.pts)
			if err == nil {
				t.Fatalf("NewCDF(%v) = nil error, want one containing %q", tc.pts, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewCDF(%v) error %q, want it to contain %q", tc.pts, err, tc.want)
			}
		})
	}
}

func TestNewCDFNormalisesAndCopies(t *testing.T) {
	in := []CDFPoint{{100, 0.5}, {300, 1 - 1e-12}}
	c := mustCDF(t, in...)
	in[0].Bytes = 999 // must not reach c
	got := c.Points()
	want := []CDFPoint{{100, 0.5}, {300, 1}}
	if !slices.Equal(got, want) {
		t.Fatalf("Points() = %v, want %v", got, want)
	}
	got[0].Bytes = 7 // must not reach c either
	if c.Min() != 100 || c.Max() != 300 {
		t.Fatalf("Min, Max = %d, %d; want 100, 300", c.Min(), c.Max())
	}
}

func TestQuantile(t *testing.T) {
	half := []CDFPoint{{100, 0.5}, {300, 1}}
	jump := []CDFPoint{{100, 0.2}, {100, 0.6}, {200, 1}}
	flat := []CDFPoint{{100, 0.5}, {200, 0.5}, {300, 1}}
	tests := []struct {
		name string
		pts  []CDFPoint
		p    float64
		want int64
	}{
		// Point mass of 0.5 at 100, then linear from (100, 0.5) to (300, 1).
		{"atom p=0", half, 0, 100},
		{"atom p=0.3", half, 0.3, 100},
		{"atom top p=0.5", half, 0.5, 100},
		{"mid segment", half, 0.75, 200},      // 100 + (0.25/0.5)·200
		{"quarter segment", half, 0.625, 150}, // 100 + (0.125/0.5)·200
		{"p=1", half, 1, 300},
		{"p<0 clamps", half, -1, 100},
		{"p>1 clamps", half, 2, 300},
		{"NaN counts as 0", half, math.NaN(), 100},
		// Jump from 0.2 to 0.6 at 100, then linear to (200, 1).
		{"inside jump", jump, 0.4, 100},
		{"after jump", jump, 0.8, 150}, // 100 + (0.2/0.4)·100
		// Flat between 100 and 200: no mass there.
		{"flat start", flat, 0.5, 100},
		{"past flat", flat, 0.75, 250}, // 200 + (0.25/0.5)·100
		// Web search: 6 pkts = 8760 B at 0.15, 13 pkts = 18980 B at 0.20,
		// 133 pkts = 194180 B at 0.60, 6667 pkts = 9733820 B at 0.97,
		// 20000 pkts = 29200000 B at 1.
		{"web atom", nil, 0.1, 8760},
		{"web first segment", nil, 0.175, 13870},   // 8760 + 0.5·(18980−8760)
		{"web point", nil, 0.6, 194180},            // exactly a table point
		{"web last segment", nil, 0.985, 19466910}, // 9733820 + 0.5·(29200000−9733820)
		{"web max", nil, 1, 29200000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := WebSearch()
			if tc.pts != nil {
				c = mustCDF(t, tc.pts...)
			}
			if got := c.Quantile(tc.p); got != tc.want {
				t.Fatalf("Quantile(%v) = %d, want %d", tc.p, got, tc.want)
			}
		})
	}
}

func TestProb(t *testing.T) {
	half := []CDFPoint{{100, 0.5}, {300, 1}}
	jump := []CDFPoint{{100, 0.2}, {100, 0.6}, {200, 1}}
	tests := []struct {
		name  string
		pts   []CDFPoint
		bytes int64
		want  float64
	}{
		{"below min", half, 50, 0},
		{"at atom", half, 100, 0.5},
		{"mid segment", half, 200, 0.75}, // 0.5 + (100/200)·0.5
		{"at max", half, 300, 1},
		{"above max", half, 1000, 1},
		{"top of jump", jump, 100, 0.6},
		{"after jump", jump, 150, 0.8}, // 0.6 + (50/100)·0.4
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCDF(t, tc.pts...)
			if got := c.Prob(tc.bytes); math.Abs(got-tc.want) > 1e-12 {
				t.Fatalf("Prob(%d) = %v, want %v", tc.bytes, got, tc.want)
			}
		})
	}
}

func TestMean(t *testing.T) {
	tests := []struct {
		name string
		cdf  func(t *testing.T) CDF
		want float64
	}{
		{"single size", func(t *testing.T) CDF { return mustCDF(t, CDFPoint{100, 1}) }, 100},
		// Uniform on [0, 100]: midpoint 50.
		{"uniform", func(t *testing.T) CDF { return mustCDF(t, CDFPoint{0, 0}, CDFPoint{100, 1}) }, 50},
		// 0.5·100 (atom) + 0.5·(100+300)/2 = 50 + 100.
		{"atom and segment", func(t *testing.T) CDF { return mustCDF(t, CDFPoint{100, 0.5}, CDFPoint{300, 1}) }, 150},
		// 0.2·100 (atom) + 0.4·100 (jump) + 0.4·(100+200)/2 = 20 + 40 + 60.
		{"jump", func(t *testing.T) CDF {
			return mustCDF(t, CDFPoint{100, 0.2}, CDFPoint{100, 0.6}, CDFPoint{200, 1})
		}, 120},
		// In packets: 0.15·6 + 0.05·9.5 + 0.10·16 + 0.10·26 + 0.13·43
		// + 0.07·93 + 0.10·400 + 0.10·1000 + 0.10·2333 + 0.07·5000
		// + 0.03·13333.5 = 0.9 + 0.475 + 1.6 + 2.6 + 5.59 + 6.51 + 40
		// + 100 + 233.3 + 350 + 400.005 = 1140.98 packets; × 1460 bytes.
		{"web search", func(*testing.T) CDF { return WebSearch() }, 1140.98 * 1460},
		{"zero CDF", func(*testing.T) CDF { return CDF{} }, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cdf(t).Mean(); math.Abs(got-tc.want) > 1e-6*math.Max(1, tc.want) {
				t.Fatalf("Mean() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTruncated(t *testing.T) {
	half := []CDFPoint{{100, 0.5}, {300, 1}}
	jump := []CDFPoint{{100, 0.2}, {100, 0.6}, {200, 1}}
	tests := []struct {
		name     string
		pts      []CDFPoint // nil: web search
		max      int64
		wantPts  []CDFPoint // nil: do not check
		wantMean float64
	}{
		// F(200) = 0.75; the remaining 0.25 sits on 200.
		// Mean: 0.5·100 + 0.25·150 + 0.25·200 = 50 + 37.5 + 50.
		{"inside segment", half, 200, []CDFPoint{{100, 0.5}, {200, 0.75}, {200, 1}}, 137.5},
		{"below min", half, 50, []CDFPoint{{50, 1}}, 50},
		{"at max is identity", half, 300, half, 150},
		{"above max is identity", half, 1000, half, 150},
		{"non-positive max means 1", half, 0, []CDFPoint{{1, 1}}, 1},
		{"at a jump", jump, 100, []CDFPoint{{100, 1}}, 100},
		// Web search capped at 1 MB. Up to 667 pkts (973820 B, F = 0.70):
		// 0.9 + 0.475 + 1.6 + 2.6 + 5.59 + 6.51 + 40 = 57.675 pkts
		// = 84205.5 B. Then mass m = 0.1·(1e6−973820)/(1946180−973820)
		// on [973820, 1e6] with midpoint 986910, and 0.3−m on 1e6:
		// 84205.5 + 0.3·1e6 − m·(1e6−986910).
		{"web search 1MB", nil, 1_000_000, nil, 84205.5 + 300000 - (0.1*26180/972360)*13090},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := WebSearch()
			if tc.pts != nil {
				c = mustCDF(t, tc.pts...)
			}
			got := c.Truncated(tc.max)
			if tc.wantPts != nil && !slices.Equal(got.Points(), tc.wantPts) {
				t.Fatalf("Truncated(%d).Points() = %v, want %v", tc.max, got.Points(), tc.wantPts)
			}
			if m := got.Mean(); math.Abs(m-tc.wantMean) > 1e-6*tc.wantMean {
				t.Fatalf("Truncated(%d).Mean() = %v, want %v", tc.max, m, tc.wantMean)
			}
			// The result must itself be a valid table.
			if _, err := NewCDF(got.Points()); err != nil {
				t.Fatalf("Truncated(%d) is not a valid CDF: %v", tc.max, err)
			}
		})
	}
}

func TestWebSearchTable(t *testing.T) {
	pts := WebSearch().Points()
	if len(pts) != 11 {
		t.Fatalf("web search has %d points, want 11", len(pts))
	}
	// 6 pkts × 1460 = 8760 B; 20000 pkts × 1460 = 29200000 B.
	if pts[0] != (CDFPoint{8760, 0.15}) || pts[10] != (CDFPoint{29200000, 1}) {
		t.Fatalf("web search ends = %v, %v; want {8760 0.15}, {29200000 1}", pts[0], pts[10])
	}
	// Each call returns an independent copy.
	pts[0].Bytes = 1
	if WebSearch().Min() != 8760 {
		t.Fatal("mutating Points() changed the built-in table")
	}
}

func TestSampleMatchesMean(t *testing.T) {
	c := WebSearch()
	r := rand.New(rand.NewPCG(1, 2))
	const n = 200_000
	sum := 0.0
	for range n {
		s := c.Sample(r)
		if s < c.Min() || s > c.Max() {
			t.Fatalf("sample %d outside [%d, %d]", s, c.Min(), c.Max())
		}
		sum += float64(s)
	}
	got, want := sum/n, c.Mean()
	if !closeTo(got, want, 0.02) {
		t.Fatalf("mean of %d samples = %.0f, want within 2%% of %.0f", n, got, want)
	}
	// The atom: about 15% of samples are exactly 8760 bytes.
	r = rand.New(rand.NewPCG(3, 4))
	atoms := 0
	for range n {
		if c.Sample(r) == 8760 {
			atoms++
		}
	}
	if frac := float64(atoms) / n; math.Abs(frac-0.15) > 0.005 {
		t.Fatalf("fraction of 8760-byte samples = %v, want 0.15 ± 0.005", frac)
	}
}

func TestSampleDeterministic(t *testing.T) {
	c := WebSearch()
	a := rand.New(rand.NewPCG(42, 7))
	b := rand.New(rand.NewPCG(42, 7))
	for i := range 1000 {
		if x, y := c.Sample(a), c.Sample(b); x != y {
			t.Fatalf("sample %d differs with the same seed: %d vs %d", i, x, y)
		}
	}
}

func TestZeroCDF(t *testing.T) {
	var c CDF
	r := rand.New(rand.NewPCG(1, 1))
	if c.Sample(r) != 0 || c.Quantile(0.5) != 0 || c.Mean() != 0 || c.Min() != 0 || c.Max() != 0 {
		t.Fatal("zero CDF must sample 0 and have mean, min and max 0")
	}
	if got := c.Truncated(10).Points(); len(got) != 0 {
		t.Fatalf("zero CDF truncated = %v, want no points", got)
	}
}
