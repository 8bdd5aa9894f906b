package bench

import (
	"math"
	"runtime/metrics"
)

// The Go runtime's metrics that say whether the bench process itself kept
// up: the emulation starts every flow from a goroutine of this process, so
// a flow starts late when its goroutine waits to run, and every goroutine
// waits while the garbage collector stops the world.
const (
	metricSchedLatency = "/sched/latencies:seconds"
	metricGCPauses     = "/sched/pauses/total/gc:seconds"
	metricGCCycles     = "/gc/cycles/total:gc-cycles"
	metricHeapAllocs   = "/gc/heap/allocs:bytes"
)

// RuntimeFigures is what the bench process's Go runtime did over a run:
// how long its goroutines waited to run once runnable (the runtime's
// /sched/latencies histogram), its garbage collections, the longest
// stop-the-world pause they took, and the bytes it allocated. Latencies
// are the upper bounds of the histogram's buckets, so they round up.
type RuntimeFigures struct {
	SchedLatencyP99Us float64 `json:"sched_latency_p99_us"`
	SchedLatencyMaxUs float64 `json:"sched_latency_max_us"`
	GCCycles          uint64  `json:"gc_cycles"`
	GCPauseMaxUs      float64 `json:"gc_pause_max_us"`
	AllocatedMB       float64 `json:"allocated_mb"`
}

// runtimeSnapshot holds the cumulative metrics RuntimeFigures are the
// growth of.
type runtimeSnapshot struct {
	sched, gcPauses      *metrics.Float64Histogram
	gcCycles, heapAllocs uint64
}

// readRuntime reads the runtime's cumulative metrics. One this Go lacks
// reads as zero, or as no histogram.
func readRuntime() runtimeSnapshot {
	s := []metrics.Sample{{Name: metricSchedLatency}, {Name: metricGCPauses}, {Name: metricGCCycles}, {Name: metricHeapAllocs}}
	metrics.Read(s)
	return runtimeSnapshot{sched: histOf(s[0].Value), gcPauses: histOf(s[1].Value), gcCycles: uint64Of(s[2].Value), heapAllocs: uint64Of(s[3].Value)}
}

// histOf is v's histogram, or nil when v is not one.
func histOf(v metrics.Value) *metrics.Float64Histogram {
	if v.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return v.Float64Histogram()
}

// uint64Of is v's count, or 0 when v is not one.
func uint64Of(v metrics.Value) uint64 {
	if v.Kind() != metrics.KindUint64 {
		return 0
	}
	return v.Uint64()
}

// since is what the runtime did between before and s.
func (s runtimeSnapshot) since(before runtimeSnapshot) RuntimeFigures {
	sched := histDelta(s.sched, before.sched)
	pauses := histDelta(s.gcPauses, before.gcPauses)
	return RuntimeFigures{
		SchedLatencyP99Us: histQuantile(sched, 0.99) * 1e6,
		SchedLatencyMaxUs: histQuantile(sched, 1) * 1e6,
		GCCycles:          s.gcCycles - before.gcCycles,
		GCPauseMaxUs:      histQuantile(pauses, 1) * 1e6,
		AllocatedMB:       float64(s.heapAllocs-before.heapAllocs) / 1e6,
	}
}

// histDelta is the histogram of what after counted beyond before, nil
// when either is missing or their buckets differ.
func histDelta(after, before *metrics.Float64Histogram) *metrics.Float64Histogram {
	if after == nil || before == nil || len(after.Counts) != len(before.Counts) || len(after.Buckets) != len(after.Counts)+1 {
		return nil
	}
	d := &metrics.Float64Histogram{Counts: make([]uint64, len(after.Counts)), Buckets: after.Buckets}
	for i := range after.Counts {
		d.Counts[i] = after.Counts[i] - before.Counts[i]
	}
	return d
}

// histQuantile is the upper bound of the bucket that holds quantile q of
// h's counts (its lower bound for the last, unbounded bucket), or 0 when h
// is nil or empty.
func histQuantile(h *metrics.Float64Histogram, q float64) float64 {
	if h == nil {
		return 0
	}
	var total uint64
	for _, c := range h.Counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	want = max(want, 1)
	var seen uint64
	for i, c := range h.Counts {
		seen += c
		if seen >= want {
			if hi := h.Buckets[i+1]; !math.IsInf(hi, 1) {
				return hi
			}
			return max(h.Buckets[i], 0)
		}
	}
	return 0
}
