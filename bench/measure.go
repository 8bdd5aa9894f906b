package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ccload/ccload/bench/stats"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/testbed"
)

// Windows of the time series.
const (
	throughputWindow = 10 * time.Millisecond // aggregate, at the bottleneck
	flowRateWindow   = 20 * time.Millisecond // per flow, from TCP_INFO
	intModelEvery    = time.Millisecond      // the INT hop's queue model
	progressEvery    = 2 * time.Second
)

// Fairness criteria of ConvergenceMillis.
const (
	convergenceTolerance = 0.1 // Jain ≥ 0.9
	convergenceHold      = 100 * time.Millisecond
)

// ccRun is what one run of a CC yields: its measurements, its time series
// and its flows' completion times.
type ccRun struct {
	res    RunResult
	series ccSeries
	fcts   []stats.FCT
	int    bool
}

// runCC runs the scenario's traffic once with cc and workload seed seed,
// and measures it.
func (r *runner) runCC(ctx context.Context, cc string, seed uint64, costs *programCosts) (out ccRun, err error) {
	out.int, err = r.withINT(cc, func() error {
		var e error
		out, e = r.traffic(ctx, cc, seed, costs)
		return e
	})
	return out, err
}

// traffic is runCC's body, with INT in the state the CC needs.
func (r *runner) traffic(ctx context.Context, cc string, seed uint64, costs *programCosts) (out ccRun, err error) {
	c := r.cfg
	res, s := &out.res, &out.series
	res.Seed, s.cc = seed, cc
	res.durationMs = float64(c.Duration) / float64(time.Millisecond)
	closeSink, err := r.startSink(ctx, cc)
	if err != nil {
		return out, err
	}
	defer closeSink()
	costBefore := costs.snapshot()
	cpuBefore, cpuErr := readCPUTimes()
	countersBefore := r.ccCounters(cc)
	defer func() {
		if err == nil {
			res.CCCounters = counterDelta(countersBefore, r.ccCounters(cc))
		}
	}()

	// Sampling covers the traffic and the drain after it.
	sctx, stop := context.WithTimeout(ctx, c.Duration+drainGrace+5*time.Second)
	defer stop()
	maxSamples := int((c.Duration+drainGrace+5*time.Second)/c.SampleInterval) + 1
	sampleStart := time.Now()
	queueCh, err := testbed.SampleQueue(sctx, r.topo.Router, r.topo.BottleneckIface, c.SampleInterval, maxSamples)
	if err != nil {
		return out, fmt.Errorf("sample the bottleneck queue: %w", err)
	}
	model := r.sampleModel(sctx)

	t0 := time.Now()
	var set flowSet
	n, err := r.plan(sctx, cc, seed, t0, &set)
	if err != nil {
		stop()
		<-queueCh
		model.wait()
		set.wait()
		return out, err
	}
	done := make(chan []flowRecord, 1)
	go func() { done <- set.wait() }()
	var flows []flowRecord
	tick := time.NewTicker(progressEvery)
	for flows == nil {
		select {
		case flows = <-done:
		case <-tick.C:
			r.say("      %s: %v of %v, %d/%d flows done", cc, time.Since(t0).Round(time.Second), c.Duration, set.progress(), n)
		}
	}
	tick.Stop()
	end := time.Since(t0)
	stop()
	samples := <-queueCh
	model.wait()
	if ctx.Err() != nil {
		return out, ctx.Err()
	}

	// The sink records a flow's result before it closes the connection,
	// so every flow that completed is already in Results.
	sunk := r.sink.Results()
	res.Flows = n
	kernel := map[string]bool{}
	offset := t0.Sub(sampleStart)
	backlog := backlogSeries(samples, offset)
	var fcts []stats.FCT
	var goodBytes int64
	for _, f := range flows {
		if f.err != nil {
			res.FlowsFailed++
			continue
		}
		if f.res.CC != "" {
			kernel[f.res.CC] = true
		}
		if f.res.Info != nil {
			res.Retransmits += uint64(f.res.Info.Total_retrans)
		}
		goodBytes += f.res.Bytes
		if f.bytes > 0 {
			fct := stats.FCT{Bytes: f.bytes, Duration: f.res.AckedIn}
			if fct.Duration <= 0 {
				fct.Duration = f.res.Duration
				res.FCTsByAppClock++
			}
			if q, ok := stats.MaxDuring(backlog, f.start, f.start+f.res.Duration); ok {
				fct.QueueDelay, fct.Queued = stats.LineTime(q, float64(c.RateBps)), true
			}
			fcts = append(fcts, fct)
		}
	}
	for _, x := range sunk {
		if !x.OK {
			res.FlowsFailed++
		}
	}
	if res.FlowsFailed == n {
		return out, fmt.Errorf("all %d flows failed; first: %v", n, firstErr(flows))
	}
	for k := range kernel {
		res.KernelCCs = append(res.KernelCCs, k)
	}
	slices.Sort(res.KernelCCs)
	if end > 0 {
		res.GoodputBps = float64(goodBytes) * 8 / end.Seconds()
	}

	r.queueMetrics(res, s, samples, offset)
	if c.Scenario == ScenarioIncast {
		starts := incastStarts(c)
		for i := range starts {
			starts[i] += offset
		}
		res.Incast = incastDrains(samples, starts, incastDrainConfig(c.RateBps))
	}
	model.summarise(res, t0.Sub(model.start), c.Duration)
	out.fcts = fcts
	for _, b := range stats.Buckets(fcts, r.idealFCT) {
		if b.Count == 0 {
			continue
		}
		res.FCT = append(res.FCT, FCTBucket{Bucket: b.Name, Count: b.Count, MeanUs: b.MeanUs, P50Us: b.P50Us, P99Us: b.P99Us,
			P999Us: b.P999Us, SlowdownP50: b.P50Slowdown, SlowdownP99: b.P99Slowdown, SlowdownP999: b.P999Slowdown})
	}
	if res.FCT == nil {
		res.FCT = []FCTBucket{}
	}
	if res.KernelCCs == nil {
		res.KernelCCs = []string{}
	}
	r.flowMetrics(res, s, flows)
	res.BPF = costs.since(costBefore)
	if cpuErr == nil {
		if after, err := readCPUTimes(); err == nil {
			res.CPUBusy = after.busySince(cpuBefore)
		}
	}
	return out, nil
}

// backlogSeries is the bottleneck's backlog in bytes on the run's clock
// (since t0, which is offset after the sampler's start), in time order.
func backlogSeries(samples []testbed.QueueSample, offset time.Duration) []stats.Point {
	out := make([]stats.Point, len(samples))
	for i, x := range samples {
		out[i] = stats.Point{T: x.At - offset, V: float64(x.BacklogBytes)}
	}
	return out
}

// idealFCT is the FCT of a flow of bytes alone on the idle bottleneck.
func (r *runner) idealFCT(bytes int64) time.Duration {
	return stats.IdealFCT(bytes, float64(r.cfg.RateBps), r.baseRTT, mss)
}

// mss is the segment size the ideal FCT assumes: 1500-byte MTU, IPv6
// (the sink listens on ::, and the senders dial the receiver's IPv4
// address, so this is conservative by 20 bytes) with TCP timestamps.
const mss = 1448

func firstErr(flows []flowRecord) error {
	for _, f := range flows {
		if f.err != nil {
			return f.err
		}
	}
	return errors.New("none recorded")
}

// queueMetrics fills the queue and throughput fields from the qdisc
// samples taken during [offset, offset+Duration] on the samples' clock.
func (r *runner) queueMetrics(res *RunResult, s *ccSeries, samples []testbed.QueueSample, offset time.Duration) {
	c := r.cfg
	var in []testbed.QueueSample
	for _, x := range samples {
		if x.At >= offset && x.At <= offset+c.Duration {
			in = append(in, x)
		}
	}
	if len(samples) > 1 {
		res.Drops = uint64(samples[len(samples)-1].Drops - samples[0].Drops)
	}
	if len(in) < 2 {
		return
	}
	q := make([]float64, len(in))
	gaps := make([]float64, 0, len(in)-1)
	counter := make([]stats.Point, len(in))
	for i, x := range in {
		q[i] = float64(x.BacklogBytes)
		at := x.At - offset
		s.queue = append(s.queue, stats.Point{T: at, V: q[i]})
		counter[i] = stats.Point{T: at, V: float64(x.SentBytes)}
		if i > 0 {
			gaps = append(gaps, float64(x.At-in[i-1].At)/float64(time.Microsecond))
		}
	}
	sum := stats.Summary(q)
	res.QueueP50Bytes, res.QueueP99Bytes, res.QueueMaxBytes, res.QueueMeanBytes = sum.P50, sum.P99, sum.Max, sum.Mean
	res.QueueSamples = len(in)
	res.QueueSampleGapP50Micros = stats.Summary(gaps).P50
	first, last := in[0], in[len(in)-1]
	if span := (last.At - first.At).Seconds(); span > 0 {
		res.ThroughputBps = float64(last.SentBytes-first.SentBytes) * 8 / span
		res.Utilization = res.ThroughputBps / float64(c.RateBps)
	}
	for _, p := range stats.RateSeries(counter, throughputWindow) {
		s.throughput = append(s.throughput, stats.Point{T: p.T, V: p.V})
	}
}

// flowMetrics fills the per-flow series, and for the fairness scenario
// Jain's index and the convergence times.
func (r *runner) flowMetrics(res *RunResult, s *ccSeries, flows []flowRecord) {
	c := r.cfg
	rates := make([][]stats.Point, 0, len(flows))
	bySender := slices.Clone(flows)
	slices.SortFunc(bySender, func(a, b flowRecord) int { return a.sender - b.sender })
	for _, f := range bySender {
		if len(f.res.Samples) < 2 {
			continue
		}
		counter := make([]stats.Point, len(f.res.Samples))
		for i, x := range f.res.Samples {
			counter[i] = stats.Point{T: f.start + x.At, V: float64(x.BytesAcked)}
		}
		rates = append(rates, stats.RateSeries(counter, flowRateWindow))
	}
	s.perFlow = rates
	if c.Scenario != ScenarioFairness || len(rates) != c.Flows {
		return
	}
	n := c.Flows
	step := c.Duration / time.Duration(2*n)
	// All n flows run during [(n-1)·step, n·step]; skip its first half,
	// where the last one is still ramping up.
	from, to := time.Duration(n-1)*step+step/2, time.Duration(n)*step
	means := make([]float64, 0, n)
	for _, fl := range rates {
		var sum float64
		var cnt int
		for _, p := range fl {
			if p.T >= from && p.T < to {
				sum += p.V
				cnt++
			}
		}
		if cnt > 0 {
			means = append(means, sum/float64(cnt))
		} else {
			means = append(means, 0)
		}
	}
	j := stats.Jain(means)
	res.Jain = &j
	for i := 1; i < 2*n-1; i++ {
		at := time.Duration(i) * step
		d, ok := stats.ConvergenceTime(rates, at, convergenceTolerance, convergenceHold)
		if !ok {
			res.ConvergenceMillis = append(res.ConvergenceMillis, -1)
			continue
		}
		res.ConvergenceMillis = append(res.ConvergenceMillis, float64(d)/float64(time.Millisecond))
	}
}

// modelSampler reads the INT hop's queue model while traffic runs.
type modelSampler struct {
	wg      sync.WaitGroup
	start   time.Time
	samples []stats.Point // since start
}

func (r *runner) sampleModel(ctx context.Context) *modelSampler {
	m := &modelSampler{start: time.Now()}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(intModelEvery)
		defer t.Stop()
		for len(m.samples) < 1<<20 {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			st, err := r.hop.Stats()
			if err != nil {
				return
			}
			m.samples = append(m.samples, stats.Point{T: time.Since(m.start), V: float64(st.BacklogBytes)})
		}
	}()
	return m
}

func (m *modelSampler) wait() []stats.Point {
	m.wg.Wait()
	return m.samples
}

// summarise fills the INT view of the queue over [offset, offset+d].
func (m *modelSampler) summarise(res *RunResult, offset, d time.Duration) {
	var q []float64
	for _, p := range m.samples {
		if p.T >= offset && p.T <= offset+d {
			q = append(q, p.V)
		}
	}
	sum := stats.Summary(q)
	res.INTQueueP50Bytes, res.INTQueueP99Bytes = sum.P50, sum.P99
}

// ccCounters reads the counters of ccload's CC cc; nil for a kernel CC or
// when they can't be read.
func (r *runner) ccCounters(cc string) loader.Stats {
	if r.builtin[cc] == nil {
		return nil
	}
	st, err := r.l.Stats(cc)
	if err != nil {
		return nil
	}
	return st
}

// counterDelta is after − before for each counter both hold.
func counterDelta(before, after loader.Stats) map[string]uint64 {
	if before == nil || after == nil {
		return nil
	}
	d := make(map[string]uint64, len(after))
	for k, a := range after {
		if b, ok := before[k]; ok && a >= b {
			d[k] = a - b
		}
	}
	return d
}
