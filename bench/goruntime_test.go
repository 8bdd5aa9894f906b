package bench

import (
	"math"
	"runtime/metrics"
	"testing"
)

func TestHistQuantile(t *testing.T) {
	buckets := []float64{0, 1e-6, 1e-3, 1e-1, math.Inf(1)}
	for _, tc := range []struct {
		name   string
		counts []uint64
		q      float64
		want   float64
	}{
		{name: "empty", counts: []uint64{0, 0, 0, 0}, q: 0.99, want: 0},
		{name: "all in the first bucket", counts: []uint64{10, 0, 0, 0}, q: 0.99, want: 1e-6},
		{name: "p99 in the second", counts: []uint64{98, 2, 0, 0}, q: 0.99, want: 1e-3},
		{name: "p50 in the first", counts: []uint64{98, 2, 0, 0}, q: 0.5, want: 1e-6},
		{name: "max in the third", counts: []uint64{98, 1, 1, 0}, q: 1, want: 1e-1},
		{name: "max in the unbounded bucket", counts: []uint64{1, 0, 0, 1}, q: 1, want: 1e-1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := histQuantile(&metrics.Float64Histogram{Counts: tc.counts, Buckets: buckets}, tc.q)
			if got != tc.want {
				t.Errorf("quantile %v of %v = %v, want %v", tc.q, tc.counts, got, tc.want)
			}
		})
	}
	if got := histQuantile(nil, 0.99); got != 0 {
		t.Errorf("quantile of no histogram = %v, want 0", got)
	}
}

func TestHistDelta(t *testing.T) {
	buckets := []float64{0, 1, 2}
	before := &metrics.Float64Histogram{Counts: []uint64{3, 1}, Buckets: buckets}
	after := &metrics.Float64Histogram{Counts: []uint64{5, 4}, Buckets: buckets}
	d := histDelta(after, before)
	if d == nil || d.Counts[0] != 2 || d.Counts[1] != 3 {
		t.Fatalf("delta %+v, want counts [2 3]", d)
	}
	if histDelta(after, nil) != nil || histDelta(after, &metrics.Float64Histogram{Counts: []uint64{1}, Buckets: []float64{0, 1}}) != nil {
		t.Error("a delta against a missing or different histogram, want none")
	}
}

// TestReadRuntime checks that this Go has the metrics the figures come
// from, and that an allocation between two reads shows in them.
func TestReadRuntime(t *testing.T) {
	before := readRuntime()
	if before.sched == nil || before.gcPauses == nil {
		t.Fatalf("runtime/metrics lacks %s or %s", metricSchedLatency, metricGCPauses)
	}
	sink := make([][]byte, 0, 64)
	for range 64 {
		sink = append(sink, make([]byte, 64<<10))
	}
	_ = sink
	got := readRuntime().since(before)
	if got.AllocatedMB <= 0 || got.SchedLatencyP99Us < 0 || got.SchedLatencyMaxUs < got.SchedLatencyP99Us {
		t.Errorf("figures %+v: want bytes allocated and max latency at or above p99", got)
	}
}
