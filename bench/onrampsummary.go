package bench

import (
	"fmt"
	"slices"
	"time"

	"github.com/ccload/ccload/bench/stats"
)

// onrampFigure is one per-run figure of the onramp scenario.
type onrampFigure struct {
	name string
	of   func(OnRampRun) (float64, bool)
}

// onrampFigures lists the figures OnRampVariant.Figures summarises.
func onrampFigures() []onrampFigure {
	always := func(f func(OnRampRun) float64) func(OnRampRun) (float64, bool) {
		return func(r OnRampRun) (float64, bool) { return f(r), true }
	}
	withOnRamp := func(f func(*OnRampCounters) float64) func(OnRampRun) (float64, bool) {
		return func(r OnRampRun) (float64, bool) {
			if r.OnRamp == nil {
				return 0, false
			}
			return f(r.OnRamp), true
		}
	}
	// The sum of the senders' TcpExt counters names grew by; absent for a
	// run from before they were recorded.
	tcpExt := func(names ...string) func(OnRampRun) (float64, bool) {
		return func(r OnRampRun) (float64, bool) {
			if r.TCPExt == nil {
				return 0, false
			}
			return float64(sumOf(r.TCPExt, names...)), true
		}
	}
	// withOnRampOptional takes a counter that a run with On-Ramp may
	// lack (nil).
	withOnRampOptional := func(f func(*OnRampCounters) *float64) func(OnRampRun) (float64, bool) {
		return func(r OnRampRun) (float64, bool) {
			if r.OnRamp == nil || f(r.OnRamp) == nil {
				return 0, false
			}
			return *f(r.OnRamp), true
		}
	}
	withRuntime := func(f func(*RuntimeFigures) float64) func(OnRampRun) (float64, bool) {
		return func(r OnRampRun) (float64, bool) {
			if r.Runtime == nil {
				return 0, false
			}
			return f(r.Runtime), true
		}
	}
	longFlow := func(f func(*LongFlowState) float64) func(OnRampRun) (float64, bool) {
		return func(r OnRampRun) (float64, bool) {
			if r.LongFlow == nil {
				return 0, false
			}
			return f(r.LongFlow), true
		}
	}
	figs := []onrampFigure{
		{"rct_p50_us", func(r OnRampRun) (float64, bool) { return r.RCTP50Us, r.RequestsCompleted > 0 }},
		{"rct_p99_us", func(r OnRampRun) (float64, bool) { return r.RCTP99Us, r.RequestsCompleted > 0 }},
		{"net_rct_p50_us", func(r OnRampRun) (float64, bool) { return r.NetRCTP50Us, r.RequestsCompleted > 0 }},
		{"net_rct_p99_us", func(r OnRampRun) (float64, bool) { return r.NetRCTP99Us, r.RequestsCompleted > 0 }},
		{"requests_completed", always(func(r OnRampRun) float64 { return float64(r.RequestsCompleted) })},
		{"long_flow_bps", func(r OnRampRun) (float64, bool) {
			return r.LongFlowBps, !r.LongFlowFailed && r.ranLongFlow()
		}},
		{"throughput_bps", always(func(r OnRampRun) float64 { return r.ThroughputBps })},
		{"utilization", always(func(r OnRampRun) float64 { return r.Utilization })},
		{"queue_p50_bytes", always(func(r OnRampRun) float64 { return r.QueueP50Bytes })},
		{"queue_p99_bytes", always(func(r OnRampRun) float64 { return r.QueueP99Bytes })},
		{"queue_max_bytes", always(func(r OnRampRun) float64 { return r.QueueMaxBytes })},
		{"drops", always(func(r OnRampRun) float64 { return float64(r.Drops) })},
		{"retransmits", always(func(r OnRampRun) float64 { return float64(r.Retransmits) })},
		{"rtos", always(func(r OnRampRun) float64 { return float64(r.RTOs) })},
		{"backlog_drops", always(func(r OnRampRun) float64 { return float64(r.BacklogDrops) })},
		{"dsack_dups", always(func(r OnRampRun) float64 { return float64(r.DSACKDups) })},
		{"long_flow_cwnd_p50", longFlow(func(l *LongFlowState) float64 { return l.CwndP50 })},
		{"long_flow_srtt_p50_us", longFlow(func(l *LongFlowState) float64 { return l.SRTTP50Us })},
		{"long_flow_sndbuf_limited_share", func(r OnRampRun) (float64, bool) {
			if l := r.LongFlow; l != nil && l.BusyMs > 0 {
				return l.SndbufLimitedMs / l.BusyMs, true
			}
			return 0, false
		}},
		{"long_flow_rwnd_limited_share", func(r OnRampRun) (float64, bool) {
			if l := r.LongFlow; l != nil && l.BusyMs > 0 {
				return l.RwndLimitedMs / l.BusyMs, true
			}
			return 0, false
		}},
		{"loss_probes", tcpExt("TCPLossProbes")},
		{"recoveries", tcpExt(tcpExtRecoveries()...)},
		{"undos", tcpExt(tcpExtUndos()...)},
		{"reorder_seen", tcpExt("TCPSACKReorder", "TCPTSReorder", "TCPRenoReorder")},
		{"timeouts", tcpExt("TCPTimeouts")},
		{"dsacks", tcpExt("TCPDSACKRecv", "TCPDSACKOfoRecv")},
		{"rtx_in_host_queue", tcpExt("TCPSpuriousRtxHostQueues")},
		{"start_lag_p99_us", always(func(r OnRampRun) float64 { return r.StartLagP99Us })},
		{"cpu_busy", always(func(r OnRampRun) float64 { return r.CPUBusy })},
		{"sched_latency_p99_us", withRuntime(func(rt *RuntimeFigures) float64 { return rt.SchedLatencyP99Us })},
		{"gc_cycles", withRuntime(func(rt *RuntimeFigures) float64 { return float64(rt.GCCycles) })},
		{"allocated_mb", withRuntime(func(rt *RuntimeFigures) float64 { return rt.AllocatedMB })},
		{"pauses", withOnRamp(func(o *OnRampCounters) float64 { return float64(o.Pauses) })},
		{"pause_seconds", withOnRamp(func(o *OnRampCounters) float64 { return o.PauseSeconds })},
		{"above_threshold_share", withOnRampOptional(func(o *OnRampCounters) *float64 { return o.AboveThresholdShare })},
		// The share of the CC's RTT samples it took without On-Ramp's hold
		// (rtt_held, θ-PowerTCP); absent for a kernel CC.
		{"rtt_held_share", func(r OnRampRun) (float64, bool) {
			c := r.CCCounters
			if c == nil || c["rtt_samples"] == 0 {
				return 0, false
			}
			return float64(c["rtt_held"]) / float64(c["rtt_samples"]), true
		}},
		{"onramp_bpf_busy", withOnRampOptional(func(o *OnRampCounters) *float64 { return o.BPFBusy })},
		{"tc_floor_ns_per_run", withOnRampOptional(func(o *OnRampCounters) *float64 { return o.TCFloorNsPerRun })},
		{"sockops_floor_ns_per_run", withOnRampOptional(func(o *OnRampCounters) *float64 { return o.SockopsFloorNsPerRun })},
	}
	for _, b := range []string{stats.BucketSmall, stats.BucketMedium, stats.BucketLarge, stats.BucketAll} {
		figs = append(figs, onrampFigure{"bg_fct_p99_us_" + bucketKey(b), func(r OnRampRun) (float64, bool) {
			f, ok := r.fct(b)
			return f.P99Us, ok
		}})
	}
	return figs
}

// summariseOnRamp builds a variant's result from its runs, its pooled
// RCTs (µs) and its background flows.
func summariseOnRamp(v onrampVariant, runs []OnRampRun, rcts []float64, fcts []stats.FCT, ideal func(int64) time.Duration) OnRampVariant {
	out := OnRampVariant{Name: v.String(), CC: v.cc, OnRamp: v.onramp, KernelCCs: []string{},
		RCT: summariseRCT(rcts), FCT: pooledFCT(fcts, ideal), Figures: map[string]Spread{}, Runs: runs}
	for _, r := range runs {
		for _, k := range r.KernelCCs {
			if !slices.Contains(out.KernelCCs, k) {
				out.KernelCCs = append(out.KernelCCs, k)
			}
		}
	}
	slices.Sort(out.KernelCCs)
	for _, f := range onrampFigures() {
		var vs []float64
		for _, r := range runs {
			if x, ok := f.of(r); ok {
				vs = append(vs, x)
			}
		}
		if len(vs) > 0 {
			out.Figures[f.name] = spreadOf(vs)
		}
	}
	return out
}

// requestDetail is one completed request of a run: its RCT and start
// lag in µs, and whether a response's sender took a retransmission
// timeout or retransmitted at all.
type requestDetail struct {
	rctUs, lagUs float64
	rto, retrans bool
}

// rctTail describes the requests whose RCT is at least tailUs, or is nil
// when tailUs is 0 (no percentile supported) or no request reaches it.
// rtos says whether the kernel counted timeouts.
func rctTail(reqs []requestDetail, tailUs float64, rtos bool) *RCTTail {
	if !(tailUs > 0) {
		return nil
	}
	var out RCTTail
	var withRTO int
	var lags []float64
	for _, q := range reqs {
		if q.rctUs < tailUs {
			continue
		}
		out.Requests++
		if q.rto {
			withRTO++
		}
		if q.retrans {
			out.WithRetransmit++
		}
		lags = append(lags, q.lagUs)
	}
	if out.Requests == 0 {
		return nil
	}
	if rtos {
		out.WithRTO = &withRTO
	}
	out.StartLagP50Us = stats.Percentile(stats.Sorted(lags), 50)
	return &out
}

// kernelCountsRTOs reports whether a kernel of this release fills
// TCP_INFO's tcpi_total_rto, which Linux 6.7 added.
func kernelCountsRTOs(release string) bool {
	var major, minor int
	if _, err := fmt.Sscanf(release, "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 6 || (major == 6 && minor >= 7)
}

// summariseRCT summarises RCTs in µs.
func summariseRCT(us []float64) RCTSummary {
	if len(us) == 0 {
		return RCTSummary{}
	}
	s := stats.Sorted(us)
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	out := RCTSummary{Count: len(s), MeanUs: sum / float64(len(s)), P50Us: stats.Percentile(s, 50),
		P90Us: stats.Percentile(s, 90), P99Us: stats.Percentile(s, 99), MaxUs: s[len(s)-1],
		P99Supported: stats.Supports(len(s), 99), TailP: stats.SupportedPercentile(len(s))}
	if out.TailP > 0 {
		out.TailUs = stats.Percentile(s, out.TailP)
	}
	return out
}

// ratio is a/b, or nil when b is not positive.
func ratio(a, b float64) *float64 {
	if !(b > 0) {
		return nil
	}
	v := a / b
	return &v
}

// variantSamples is one variant's requests' RCTs (µs) and background
// flows, each repeat's apart, in repeat order: repeat i of one variant
// and repeat i of another share a workload seed.
type variantSamples struct {
	rcts [][]float64
	fcts [][]stats.FCT
}

// add appends one run's samples as the next repeat.
func (s *variantSamples) add(rcts []float64, fcts []stats.FCT) {
	s.rcts = append(s.rcts, rcts)
	s.fcts = append(s.fcts, fcts)
}

// pooledRCTs is every repeat's RCTs together.
func (s variantSamples) pooledRCTs() []float64 { return slices.Concat(s.rcts...) }

// pooledFCTs is every repeat's background flows together.
func (s variantSamples) pooledFCTs() []stats.FCT { return slices.Concat(s.fcts...) }

// bucketRepeats is each repeat's FCTs of bucket b, in µs.
func (s variantSamples) bucketRepeats(b string) [][]float64 {
	out := make([][]float64, len(s.fcts))
	for i, f := range s.fcts {
		out[i] = bucketMicros(f, b)
	}
	return out
}

// tailInterval bootstraps the ratio without/with of percentile p over the
// repeats (stats.PairedTailRatioInterval); nil with too few repeats.
func tailInterval(without, with [][]float64, p float64) *stats.Interval {
	iv, ok := stats.PairedTailRatioInterval(without, with, p, onrampIntervalDraws, onrampIntervalLevel, onrampIntervalSeed)
	if !ok {
		return nil
	}
	return &iv
}

// beyondNoise reports whether a ratio's interval lies wholly below 1:
// in nearly every resample of the repeats, On-Ramp's tail was the longer.
func beyondNoise(iv *stats.Interval) bool { return iv != nil && iv.Hi < 1 }

// compareOnRamp compares each CC's variant without On-Ramp with its
// variant with it, and judges the targets. samples are the variants'
// requests and background flows, per repeat, in the order of vs.
func compareOnRamp(ccs []string, vs []OnRampVariant, samples []variantSamples) ([]OnRampComparison, OnRampVerdict) {
	find := func(cc string, on bool) (OnRampVariant, variantSamples, bool) {
		for i, v := range vs {
			if v.CC == cc && v.OnRamp == on {
				return v, samples[i], true
			}
		}
		return OnRampVariant{}, variantSamples{}, false
	}
	verdict := OnRampVerdict{LongFlowMet: true, Worse: []string{}, WorseBeyondNoise: []string{}}
	out := []OnRampComparison{}
	for _, cc := range ccs {
		without, xw, ok1 := find(cc, false)
		with, xr, ok2 := find(cc, true)
		if !ok1 || !ok2 {
			continue
		}
		c := OnRampComparison{CC: cc, RCTP99WithoutUs: without.RCT.P99Us, RCTP99WithUs: with.RCT.P99Us, WorseFCT: []string{}}
		c.RCTP99Ratio = ratio(without.RCT.P99Us, with.RCT.P99Us)
		c.RCTP50Ratio = ratio(without.RCT.P50Us, with.RCT.P50Us)
		c.NetRCTP99Ratio = ratio(without.NetRCT.P99Us, with.NetRCT.P99Us)
		sw, sr := stats.Sorted(xw.pooledRCTs()), stats.Sorted(xr.pooledRCTs())
		fw, fr := xw.pooledFCTs(), xr.pooledFCTs()
		c.RCTTailP = stats.SupportedPercentile(min(len(sw), len(sr)))
		if c.RCTTailP > 0 {
			c.RCTTailRatio = ratio(stats.Percentile(sw, c.RCTTailP), stats.Percentile(sr, c.RCTTailP))
		}
		c.LongFlowWithoutBps = without.Figures["long_flow_bps"].Median
		c.LongFlowWithBps = with.Figures["long_flow_bps"].Median
		if c.LongFlowWithoutBps > 0 {
			loss := 1 - c.LongFlowWithBps/c.LongFlowWithoutBps
			c.LongFlowLoss = &loss
			if loss > OnRampTargetLongFlowLoss {
				verdict.LongFlowMet = false
			}
		}
		c.LongFlowPairedLoss = pairedLoss(without.Runs, with.Runs)
		c.CPUAdded, c.CPUBusier = pairedCPUAdded(without.Runs, with.Runs)
		if p := min(c.RCTTailP, 99); p > 0 {
			tw, tr := stats.Percentile(sw, p), stats.Percentile(sr, p)
			c.RCTTailRatioInterval = tailInterval(xw.rcts, xr.rcts, p)
			c.WorseRCT = tr > (1+onrampWorseMargin)*tw
			if c.WorseRCT {
				what := fmt.Sprintf("%s: RCT p%g", cc, p)
				verdict.Worse = append(verdict.Worse, what)
				if beyondNoise(c.RCTTailRatioInterval) {
					verdict.WorseBeyondNoise = append(verdict.WorseBeyondNoise, what)
				}
			}
		}
		for _, b := range []string{stats.BucketSmall, stats.BucketMedium, stats.BucketLarge, stats.BucketAll} {
			uw, ur := bucketMicros(fw, b), bucketMicros(fr, b)
			if len(uw) == 0 || len(ur) == 0 {
				continue
			}
			x := FCTComparison{Bucket: b, CountWithout: len(uw), CountWith: len(ur),
				P99WithoutUs: stats.Percentile(uw, 99), P99WithUs: stats.Percentile(ur, 99)}
			x.Ratio = ratio(x.P99WithoutUs, x.P99WithUs)
			x.PairedMeanRatio, x.PairedSlower = pairedMeanFCT(without.Runs, with.Runs, b)
			if x.TailP = min(stats.SupportedPercentile(min(len(uw), len(ur))), 99); x.TailP > 0 {
				x.TailWithoutUs, x.TailWithUs = stats.Percentile(uw, x.TailP), stats.Percentile(ur, x.TailP)
				x.TailRatio = ratio(x.TailWithoutUs, x.TailWithUs)
				x.TailRatioInterval = tailInterval(xw.bucketRepeats(b), xr.bucketRepeats(b), x.TailP)
				if b != stats.BucketAll && x.TailWithUs > (1+onrampWorseMargin)*x.TailWithoutUs {
					what := fmt.Sprintf("%s: background FCT p%g %s", cc, x.TailP, b)
					c.WorseFCT = append(c.WorseFCT, b)
					verdict.Worse = append(verdict.Worse, what)
					if beyondNoise(x.TailRatioInterval) {
						verdict.WorseBeyondNoise = append(verdict.WorseBeyondNoise, what)
					}
				}
			}
			c.FCT = append(c.FCT, x)
		}
		if c.FCT == nil {
			c.FCT = []FCTComparison{}
		}
		if cc == OnRampTargetCC && c.RCTP99Ratio != nil {
			met := *c.RCTP99Ratio >= OnRampTargetRCTRatio
			verdict.RCTMet = &met
		}
		out = append(out, c)
	}
	return out, verdict
}

// pairedLoss is the long flow's throughput loss, 1 − with/without, of
// each repeat that has a run in both variants with a long flow, as a
// Spread over the repeats; nil when no repeat has both.
func pairedLoss(without, with []OnRampRun) *Spread {
	s, _ := pairedSpread(without, with, func(r OnRampRun) float64 { return r.LongFlowBps },
		func(w, r float64) (float64, bool) { return 1 - r/w, true })
	return s
}

// pairedCPUAdded is, for each repeat with a run in both variants, how
// much busier the CPUs were with On-Ramp (CPUBusy, with less without), as
// a Spread over the repeats, and how many of those repeats were busier
// with On-Ramp; nil when no repeat has both.
func pairedCPUAdded(without, with []OnRampRun) (*Spread, int) {
	return pairedSpread(without, with, func(r OnRampRun) float64 { return r.CPUBusy },
		func(w, r float64) (float64, bool) { return r - w, true })
}

// pairedMeanFCT is, for each repeat with a run in both variants and flows
// of bucket b in both, the bucket's mean FCT without On-Ramp over the one
// with it, as a Spread over the repeats, and how many of those repeats
// were slower with On-Ramp; nil when no repeat has both.
func pairedMeanFCT(without, with []OnRampRun, b string) (*Spread, int) {
	mean := func(r OnRampRun) float64 {
		if f, ok := r.fct(b); ok && f.Count > 0 {
			return f.MeanUs
		}
		return 0
	}
	return pairedSpread(without, with, mean, func(w, r float64) (float64, bool) {
		return w / r, r > 0 // no flows of the bucket with On-Ramp: no pair
	})
}

// pairedSpread is figure(without, with) over the repeats that
// pairByRepeat pairs by value and figure keeps, as a Spread, and how many
// of those repeats had the larger value with On-Ramp; nil when none.
func pairedSpread(without, with []OnRampRun, value func(OnRampRun) float64,
	figure func(w, r float64) (float64, bool)) (*Spread, int) {
	var figs []float64
	larger := 0
	for _, p := range pairByRepeat(without, with, value) {
		f, ok := figure(p[0], p[1])
		if !ok {
			continue
		}
		figs = append(figs, f)
		if p[1] > p[0] {
			larger++
		}
	}
	if len(figs) == 0 {
		return nil, 0
	}
	s := spreadOf(figs)
	return &s, larger
}

// pairByRepeat is value of the run without and of the run with On-Ramp,
// in the order of with, for each repeat that has a run in both variants
// and a positive value without On-Ramp (the base of a ratio).
func pairByRepeat(without, with []OnRampRun, value func(OnRampRun) float64) [][2]float64 {
	base := map[int]float64{}
	for _, r := range without {
		if v := value(r); v > 0 {
			base[r.Repeat] = v
		}
	}
	var out [][2]float64
	for _, r := range with {
		if w, ok := base[r.Repeat]; ok {
			out = append(out, [2]float64{w, value(r)})
		}
	}
	return out
}

// bucketMicros is the FCTs of bucket b (stats.BucketAll: all of them), in
// µs, sorted.
func bucketMicros(fcts []stats.FCT, b string) []float64 {
	var us []float64
	for _, f := range fcts {
		if b == stats.BucketAll || stats.BucketOf(f.Bytes) == b {
			us = append(us, float64(f.Duration)/float64(time.Microsecond))
		}
	}
	return stats.Sorted(us)
}
