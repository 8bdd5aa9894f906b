package bench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/ccload/ccload/bench/workload"
	"github.com/ccload/ccload/testbed"
)

// flowRecord is one flow of a run, as its sender saw it.
type flowRecord struct {
	sender int
	start  time.Duration // since the run's start
	bytes  int64         // payload asked for; 0 for a time-bounded flow
	res    testbed.FlowResult
	err    error
}

// flowSet collects the flows of one run from many goroutines.
type flowSet struct {
	mu    sync.Mutex
	wg    sync.WaitGroup
	flows []flowRecord
	done  int
}

// start sends one flow in the background at offset at from t0 (it sleeps
// until then, or gives up when ctx ends).
func (s *flowSet) start(ctx context.Context, t0 time.Time, at time.Duration, h *testbed.Host, sender int, dst netip.AddrPort, cfg testbed.FlowConfig) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if d := time.Until(t0.Add(at)); d > 0 {
			select {
			case <-ctx.Done():
				s.add(flowRecord{sender: sender, start: at, bytes: cfg.Bytes, err: ctx.Err()})
				return
			case <-time.After(d):
			}
		}
		begin := time.Since(t0)
		res, err := testbed.SendFlow(ctx, h, dst, cfg)
		s.add(flowRecord{sender: sender, start: begin, bytes: cfg.Bytes, res: res, err: err})
	}()
}

func (s *flowSet) add(r flowRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flows = append(s.flows, r)
	s.done++
}

// progress is how many flows have finished.
func (s *flowSet) progress() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

// wait waits for every flow and returns them.
func (s *flowSet) wait() []flowRecord {
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]flowRecord(nil), s.flows...)
}

// flowSampleEvery is how often long flows read TCP_INFO, for per-flow
// throughput over time.
const flowSampleEvery = 5 * time.Millisecond

// drainGrace is how long past the scenario's duration flows may take to
// finish before they count as failed.
const drainGrace = 30 * time.Second

// plan starts the scenario's flows for one CC. It returns how many flows
// it started; the caller waits on set.
func (r *runner) plan(ctx context.Context, cc string, runSeed uint64, t0 time.Time, set *flowSet) (int, error) {
	c := r.cfg
	d := r.topo
	timeout := c.Duration + drainGrace
	target := r.sink.Addr
	seed := func(i int) uint64 { return runSeed*1_000_003 + uint64(i) }
	switch c.Scenario {
	case ScenarioLongflow:
		set.start(ctx, t0, 0, d.Senders[0], 0, target, testbed.FlowConfig{
			CC: cc, For: c.Duration, Seed: seed(0), Timeout: timeout, SampleEvery: flowSampleEvery})
		return 1, nil

	case ScenarioFairness:
		// Flow i joins at i·step and leaves at (2n-1-i)·step: the number
		// of flows climbs to n and falls back to 1.
		n := c.Flows
		step := c.Duration / time.Duration(2*n)
		for i := 0; i < n; i++ {
			set.start(ctx, t0, time.Duration(i)*step, d.Senders[i], i, target, testbed.FlowConfig{
				CC: cc, For: time.Duration(2*n-1-2*i) * step, Seed: seed(i), Timeout: timeout, SampleEvery: flowSampleEvery})
		}
		return n, nil

	case ScenarioIncast:
		// A long flow from sender 0, and an incast from all the others
		// every incastPeriod, starting after a tenth of the run.
		set.start(ctx, t0, 0, d.Senders[0], 0, target, testbed.FlowConfig{
			CC: cc, For: c.Duration, Seed: seed(0), Timeout: timeout, SampleEvery: flowSampleEvery})
		started := 1
		for _, at := range incastStarts(c) {
			for i, a := range workload.Incast(c.Fanout, c.IncastBytes) {
				set.start(ctx, t0, at+a.At, d.Senders[1+i], 1+i, target, testbed.FlowConfig{
					CC: cc, Bytes: a.Bytes, Seed: seed(started), Timeout: timeout})
				started++
			}
		}
		return started, nil

	case ScenarioWebsearch:
		sizes := workload.WebSearch()
		if c.Quick {
			sizes = sizes.Truncated(quickMaxFlowBytes)
		}
		arr, err := workload.Arrivals(workload.ArrivalConfig{
			Load: c.Load, LinkBps: float64(c.RateBps), Sizes: sizes, Senders: len(d.Senders),
			Duration: c.Duration, MaxFlows: maxWebsearchFlows, Seed: runSeed,
		})
		if err != nil {
			return 0, fmt.Errorf("websearch arrivals: %w", err)
		}
		for i, a := range arr {
			set.start(ctx, t0, a.At, d.Senders[a.Sender], a.Sender, target, testbed.FlowConfig{
				CC: cc, Bytes: a.Bytes, Seed: seed(i), Timeout: timeout})
		}
		return len(arr), nil
	}
	return 0, errors.New("unknown scenario " + c.Scenario)
}

// quickMaxFlowBytes caps web-search flows in quick runs.
const quickMaxFlowBytes = 1_000_000

// maxWebsearchFlows bounds the arrivals of one run.
const maxWebsearchFlows = 20_000
