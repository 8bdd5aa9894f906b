package bench

import (
	"slices"
	"time"

	"github.com/ccload/ccload/bench/stats"
)

// Figure is one number a run measures, which CCResult.Figures summarises
// over the runs.
type Figure struct {
	// Name is the figure's key in CCResult.Figures.
	Name string
	// Of returns the figure of a run, and false when the run has none
	// (a figure of another scenario, or a cost without statistics).
	Of func(RunResult) (float64, bool)
}

// Figures lists every figure CCResult.Figures summarises, in a stable
// order.
func Figures() []Figure {
	always := func(f func(RunResult) float64) func(RunResult) (float64, bool) {
		return func(r RunResult) (float64, bool) { return f(r), true }
	}
	opt := func(f func(RunResult) *float64) func(RunResult) (float64, bool) {
		return func(r RunResult) (float64, bool) {
			if v := f(r); v != nil {
				return *v, true
			}
			return 0, false
		}
	}
	incast := func(f func(*IncastDrain) *float64) func(RunResult) (float64, bool) {
		return opt(func(r RunResult) *float64 {
			if r.Incast == nil {
				return nil
			}
			return f(r.Incast)
		})
	}
	cost := func(f func(*ACKCost) *float64) func(RunResult) (float64, bool) {
		return opt(func(r RunResult) *float64 {
			if r.Cost == nil {
				return nil
			}
			return f(r.Cost)
		})
	}
	figs := []Figure{
		{"throughput_bps", always(func(r RunResult) float64 { return r.ThroughputBps })},
		{"goodput_bps", always(func(r RunResult) float64 { return r.GoodputBps })},
		{"utilization", always(func(r RunResult) float64 { return r.Utilization })},
		{"queue_p50_bytes", always(func(r RunResult) float64 { return r.QueueP50Bytes })},
		{"queue_p99_bytes", always(func(r RunResult) float64 { return r.QueueP99Bytes })},
		{"queue_max_bytes", always(func(r RunResult) float64 { return r.QueueMaxBytes })},
		{"queue_mean_bytes", always(func(r RunResult) float64 { return r.QueueMeanBytes })},
		{"int_queue_p99_bytes", always(func(r RunResult) float64 { return r.INTQueueP99Bytes })},
		{"drops", always(func(r RunResult) float64 { return float64(r.Drops) })},
		{"retransmits", always(func(r RunResult) float64 { return float64(r.Retransmits) })},
		{"flows_failed", always(func(r RunResult) float64 { return float64(r.FlowsFailed) })},
		{"cpu_busy", always(func(r RunResult) float64 { return r.CPUBusy })},
		{"jain", opt(func(r RunResult) *float64 { return r.Jain })},
		{"convergence_max_ms", func(r RunResult) (float64, bool) {
			if len(r.ConvergenceMillis) == 0 {
				return 0, false
			}
			worst := 0.0
			for _, m := range r.ConvergenceMillis {
				if m < 0 {
					// Never converged: count it as the whole run.
					return r.durationMillis(), true
				}
				worst = max(worst, m)
			}
			return worst, true
		}},
		{"incast_drained_fraction", func(r RunResult) (float64, bool) {
			if r.Incast == nil || r.Incast.Incasts == 0 {
				return 0, false
			}
			return float64(r.Incast.Drained) / float64(r.Incast.Incasts), true
		}},
		{"incast_drain_rtts_p50", incast(func(d *IncastDrain) *float64 { return d.DrainRTTsP50 })},
		{"incast_drain_rtts_p90", incast(func(d *IncastDrain) *float64 { return d.DrainRTTsP90 })},
		{"incast_util_after_drain_p50", incast(func(d *IncastDrain) *float64 { return d.UtilAfterDrainP50 })},
		{"cc_ns_per_run", cost(func(c *ACKCost) *float64 { return &c.NsPerRun })},
		{"floor_ns_per_run", cost(func(c *ACKCost) *float64 { return c.FloorNsPerRun })},
		{"cc_ns_above_floor", cost(func(c *ACKCost) *float64 { return c.NsAboveFloor })},
		{"sockops_runs_per_ack", cost(func(c *ACKCost) *float64 { return c.SockopsRunsPerACK })},
		{"sockops_ns_per_ack", cost(func(c *ACKCost) *float64 { return c.SockopsNsPerACK })},
		{"sockops_ns_per_ack_above_floor", cost(func(c *ACKCost) *float64 { return c.SockopsNsPerACKAboveFloor })},
		{"arith_ns_above_floor", cost(func(c *ACKCost) *float64 { return c.ArithNsAboveFloor })},
	}
	for _, b := range []string{stats.BucketSmall, stats.BucketMedium, stats.BucketLarge, stats.BucketAll} {
		figs = append(figs, Figure{"fct_p99_us_" + bucketKey(b), func(r RunResult) (float64, bool) {
			for _, f := range r.FCT {
				if f.Bucket == b {
					return f.P99Us, true
				}
			}
			return 0, false
		}})
	}
	return figs
}

// bucketKey is a size bucket's name as a figure name's suffix.
func bucketKey(b string) string {
	switch b {
	case stats.BucketSmall:
		return "small"
	case stats.BucketMedium:
		return "medium"
	case stats.BucketLarge:
		return "large"
	}
	return b
}

// durationMillis is the run's traffic time in milliseconds; set by the
// runner through durationMs.
func (r RunResult) durationMillis() float64 { return r.durationMs }

// spreadOf is the median and extremes of vs; vs must not be empty.
func spreadOf(vs []float64) Spread {
	s := stats.Sorted(vs)
	return Spread{Median: median(s), Min: s[0], Max: s[len(s)-1], N: len(s)}
}

// median of sorted values: the mean of the middle two for an even count,
// so that two runs give their midpoint rather than the lower one.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// summarise builds a CC's result from its runs and the flows of all of
// them; ideal gives a flow's ideal FCT for the slowdowns.
func summarise(cc string, runs []RunResult, fcts []stats.FCT, ideal func(int64) time.Duration) CCResult {
	res := CCResult{CC: cc, Runs: runs, Figures: map[string]Spread{}, KernelCCs: []string{}, FCT: []PooledFCT{}}
	for _, r := range runs {
		for _, k := range r.KernelCCs {
			if !slices.Contains(res.KernelCCs, k) {
				res.KernelCCs = append(res.KernelCCs, k)
			}
		}
	}
	slices.Sort(res.KernelCCs)
	for _, f := range Figures() {
		var vs []float64
		for _, r := range runs {
			if v, ok := f.Of(r); ok {
				vs = append(vs, v)
			}
		}
		if len(vs) > 0 {
			res.Figures[f.Name] = spreadOf(vs)
		}
	}
	res.FCT = pooledFCT(fcts, ideal)
	return res
}

// pooledFCT summarises the pooled flows by size bucket, reporting only
// the percentiles each bucket's sample supports.
func pooledFCT(fcts []stats.FCT, ideal func(int64) time.Duration) []PooledFCT {
	out := []PooledFCT{}
	byBucket := map[string][]stats.FCT{}
	for _, f := range fcts {
		b := stats.BucketOf(f.Bytes)
		byBucket[b] = append(byBucket[b], f)
		byBucket[stats.BucketAll] = append(byBucket[stats.BucketAll], f)
	}
	for _, b := range []string{stats.BucketSmall, stats.BucketMedium, stats.BucketLarge, stats.BucketAll} {
		fs := byBucket[b]
		if len(fs) == 0 {
			continue
		}
		us := make([]float64, 0, len(fs))
		var slow []float64
		sum := 0.0
		for _, f := range fs {
			v := float64(f.Duration) / float64(time.Microsecond)
			us = append(us, v)
			sum += v
			if ideal != nil {
				if id := ideal(f.Bytes); id > 0 {
					slow = append(slow, float64(f.Duration)/float64(id))
				}
			}
		}
		us, slow = stats.Sorted(us), stats.Sorted(slow)
		p := PooledFCT{Bucket: b, Count: len(us), MeanUs: sum / float64(len(us)),
			P50Us: stats.Percentile(us, 50), SlowdownP50: stats.Percentile(slow, 50),
			TailP: stats.SupportedPercentile(len(us))}
		if p.TailP > 0 {
			p.TailUs = stats.Percentile(us, p.TailP)
			p.TailSlowdown = stats.Percentile(slow, p.TailP)
			p.TailQueue = tailQueue(fs, p.TailUs)
		}
		if stats.Supports(len(us), 99) {
			v := stats.Percentile(us, 99)
			p.P99Us = &v
		}
		if stats.Supports(len(us), 99.9) {
			v := stats.Percentile(us, 99.9)
			p.P999Us = &v
		}
		out = append(out, p)
	}
	return out
}

// tailQueue is the queueing delay seen by the flows of fs whose FCT is at
// least tailUs, or nil when none of them has a queue reading.
func tailQueue(fs []stats.FCT, tailUs float64) *TailQueue {
	var tail, all []float64
	for _, f := range fs {
		if !f.Queued {
			continue
		}
		q := float64(f.QueueDelay) / float64(time.Microsecond)
		all = append(all, q)
		if float64(f.Duration)/float64(time.Microsecond) >= tailUs {
			tail = append(tail, q)
		}
	}
	if len(tail) == 0 {
		return nil
	}
	tail, all = stats.Sorted(tail), stats.Sorted(all)
	return &TailQueue{Flows: len(tail), P50Us: stats.Percentile(tail, 50), MaxUs: tail[len(tail)-1],
		BucketUs: stats.Percentile(all, 50)}
}

// runOrder is the CC order of repeat i: the list rotated by i places.
func runOrder(ccs []string, i int) []string {
	n := len(ccs)
	out := make([]string, n)
	for j := range ccs {
		out[j] = ccs[(i+j)%n]
	}
	return out
}
