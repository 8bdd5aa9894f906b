package bench

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/ccload/ccload/bench/stats"
	"github.com/ccload/ccload/bench/workload"
	"github.com/ccload/ccload/clocksync"
	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/testbed"
)

// The clock scenario: clock agents (package clocksync) in netns hosts on
// both sides of the dumbbell's router, with cross traffic through the
// bottleneck in one direction only, at each of several loads. Every host
// runs on the same kernel, so all share one clock; each agent is given a
// clock of its own (clocksync.Skewed: an offset of milliseconds and a
// drift of tens of ppm), and the true offset between any two is known.
// Every estimate is compared with it.
//
// Reported per load, over every agent, peer and window after the first
// clockWarmupWindows:
//   - published: the offset the agent writes to its clock map, after the
//     network effect;
//   - direct: the agent's own maximum-margin fit, before it;
//   - midpoint: the NTP-style estimate of the same probes (the midpoint
//     of the least-delay round trip);
//   - ptp4l: linuxptp's "master offset", software timestamps, unicast,
//     free running, from a master on the receiver to a slave on the first
//     agent's host, in the same run (its truth is 0: it sees the real,
//     shared clock);
//   - the drift error once the agents have run clockDriftAfter.

// ScenarioClock is the clock agent's scenario; it runs apart from the CC
// scenarios (RunClock), and `--scenario all` does not include it.
const ScenarioClock = "clock"

// Defaults of ClockConfig.
const (
	clockWarmupWindows = 3
	clockDriftAfter    = 30 * time.Second
	defaultClockAgents = 5
	clockCrossSenders  = 4
)

// DefaultClockLoads are the cross traffic's loads the clock scenario runs
// at, fractions of the bottleneck.
func DefaultClockLoads() []float64 { return []float64{0, 0.4, 0.8} }

// ClockConfig is one clock benchmark.
type ClockConfig struct {
	// Loads are the cross traffic's offered loads, each in [0, 1).
	Loads []float64
	// Duration is how long the agents run at each load.
	Duration time.Duration
	// Window is the agents' estimation window.
	Window time.Duration
	// Agents is how many agents run: one on the receiver, the others on
	// senders (at least 4 in all).
	Agents int
	// RateBps and BufferBytes shape the bottleneck.
	RateBps     uint64
	BufferBytes uint32
	// ProbeRate is each agent's probe pairs per second per peer.
	ProbeRate float64
	// PTP runs ptp4l beside the agents.
	PTP bool
	// Seed seeds the cross traffic and the agents' choices.
	Seed uint64
	// Quick shortens the run for smoke tests.
	Quick bool
	// Command is the command line, recorded in the results.
	Command string
}

func (c ClockConfig) withDefaults() ClockConfig {
	if len(c.Loads) == 0 {
		c.Loads = DefaultClockLoads()
	}
	if c.Window == 0 {
		c.Window = clocksync.DefaultWindow
		if c.Quick {
			c.Window = 500 * time.Millisecond
		}
	}
	if c.Duration == 0 {
		// 30 windows after the warm-up, and a few to spare.
		c.Duration = time.Duration(clockWarmupWindows+33) * c.Window
		if c.Quick {
			c.Duration = 8 * c.Window
		}
	}
	if c.Agents == 0 {
		c.Agents = defaultClockAgents
	}
	if c.RateBps == 0 {
		c.RateBps = 1_000_000_000
	}
	if c.BufferBytes == 0 {
		c.BufferBytes = testbed.DefaultBufferBytes
	}
	if c.ProbeRate == 0 {
		c.ProbeRate = clocksync.DefaultProbeRate
	}
	if c.Seed == 0 {
		c.Seed = DefaultSeed
	}
	return c
}

// Validate checks the configuration, defaults filled in.
func (c ClockConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	for _, l := range c.Loads {
		if !(l >= 0 && l < 1) {
			errs = append(errs, fmt.Errorf("--load %g: each clock load must be in [0, 1)", l))
		}
	}
	if c.Agents < 4 || c.Agents > 20 {
		errs = append(errs, fmt.Errorf("agents %d: the clock scenario runs 4 to 20", c.Agents))
	}
	if c.Duration < 4*c.Window {
		errs = append(errs, fmt.Errorf("--duration %s: give the agents at least 4 windows of %s", c.Duration, c.Window))
	}
	return errors.Join(errs...)
}

// ClockResults is what the clock scenario writes to results.json.
type ClockResults struct {
	// Schema is ClockSchemaID.
	Schema   string    `json:"schema"`
	Scenario string    `json:"scenario"`
	Command  string    `json:"command,omitempty"`
	Started  time.Time `json:"started"`
	Machine  Machine   `json:"machine"`
	// RateBps is the bottleneck's rate.
	RateBps uint64 `json:"rate_bps"`
	// Agents, WindowMs and ProbeRate describe the agents.
	Agents    int     `json:"agents"`
	WindowMs  float64 `json:"window_ms"`
	ProbeRate float64 `json:"probe_rate"`
	// Clocks are the injected clocks, per agent.
	Clocks []InjectedClock `json:"clocks"`
	// Loads holds one result per load, in run order.
	Loads []ClockLoad `json:"loads"`
}

// ClockSchemaID names the layout of the clock scenario's results.json.
const ClockSchemaID = "https://ccload.dev/schema/bench-clock/v1"

//go:embed clock.schema.json
var clockSchemaJSON []byte

// ClockSchema returns the JSON Schema (draft 2020-12) of the clock
// scenario's results.json.
func ClockSchema() []byte { return append([]byte(nil), clockSchemaJSON...) }

// InjectedClock is one agent's clock.
type InjectedClock struct {
	Host     string  `json:"host"`
	Addr     string  `json:"addr"`
	OffsetNs int64   `json:"offset_ns"`
	DriftPPM float64 `json:"drift_ppm"`
}

// ClockLoad is the clock scenario's result at one load.
type ClockLoad struct {
	// Load is the cross traffic's offered load; AchievedLoad what its
	// completed flows carried, both fractions of the bottleneck.
	Load         float64 `json:"load"`
	AchievedLoad float64 `json:"achieved_load"`
	// Windows is the windows per agent that count (after the warm-up).
	Windows int `json:"windows"`
	// Published, Direct and Midpoint are the |offset error| of the three
	// estimates, over every agent, peer and counted window, in ns.
	Published ErrorSummary `json:"published"`
	// Settled is Published over the windows after the agents' first
	// 30 s (or the last half of a shorter run): by then each peer's drift
	// comes from 16 windows of offsets rather than from one fit, which is
	// what an agent that has been running a while publishes.
	Settled ErrorSummary `json:"published_settled"`
	// SettledAfterMs is when the settled windows start, since the
	// agents started.
	SettledAfterMs float64      `json:"settled_after_ms"`
	Direct         ErrorSummary `json:"direct"`
	Midpoint       ErrorSummary `json:"midpoint"`
	// AcrossBottleneck is Published for the pairs whose probes cross the
	// bottleneck (one end is the receiver).
	AcrossBottleneck ErrorSummary `json:"across_bottleneck"`
	// PTP4L is |master offset| of ptp4l's slave, in ns, after its first
	// clockWarmupWindows windows; PTP4LError says why it is missing.
	PTP4L      ErrorSummary `json:"ptp4l"`
	PTP4LError string       `json:"ptp4l_error,omitempty"`
	// DriftPPM is the |drift error| of the published estimates once the
	// agents have run 30 s (or the last half of a shorter run), in ppm.
	DriftPPM ErrorSummary `json:"drift_ppm"`
	// PureShare is the median share of pure probe pairs.
	PureShare float64 `json:"pure_share"`
	// Series is the published |error| over time: the largest of each
	// window, for the plot.
	Series []ClockPoint `json:"series"`
}

// ErrorSummary is the distribution of an absolute error.
type ErrorSummary struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func summarizeErrors(xs []float64) ErrorSummary {
	if len(xs) == 0 {
		return ErrorSummary{}
	}
	s := stats.Sorted(xs)
	return ErrorSummary{N: len(s), P50: stats.Percentile(s, 50), P99: stats.Percentile(s, 99), Max: s[len(s)-1]}
}

// ClockPoint is one window's largest published |error|.
type ClockPoint struct {
	AtMs    float64 `json:"at_ms"`
	ErrorNs float64 `json:"error_ns"`
}

// ClockReport is a finished clock scenario.
type ClockReport struct {
	Results ClockResults
}

// RunClock runs the clock scenario, one load after another, on one
// dumbbell, and reports progress to progress.
func RunClock(ctx context.Context, cfg ClockConfig, progress io.Writer) (*ClockReport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := kernel.CheckCaps(); err != nil {
		return nil, err
	}
	senders := cfg.Agents - 1 + clockCrossSenders
	d, err := testbed.NewDumbbell(ctx, testbed.DumbbellConfig{
		Senders: senders, BottleneckRate: cfg.RateBps, BufferBytes: cfg.BufferBytes,
	})
	if err != nil {
		return nil, fmt.Errorf("build the dumbbell: %w", err)
	}
	defer d.Close()
	pins := kernel.DefaultHost()
	pins.PinDir = fmt.Sprintf("ccload-bench-%d", os.Getpid())
	defer os.RemoveAll(pins.PinRoot())

	hosts := append(append([]*testbed.Host(nil), d.Senders[:cfg.Agents-1]...), d.Receiver)
	clocks := benchClocks(len(hosts))
	res := ClockResults{
		Schema: ClockSchemaID, Scenario: ScenarioClock, Command: cfg.Command,
		Started: time.Now().UTC(), Machine: machine(), RateBps: cfg.RateBps,
		Agents: len(hosts), WindowMs: float64(cfg.Window) / float64(time.Millisecond), ProbeRate: cfg.ProbeRate,
	}
	for i, h := range hosts {
		res.Clocks = append(res.Clocks, InjectedClock{Host: h.Name, Addr: h.Addr.String(), OffsetNs: clocks[i].Offset, DriftPPM: clocks[i].Drift * 1e6})
	}
	sink, err := testbed.StartSink(d.Receiver, netip.AddrPortFrom(d.Receiver.Addr, 0))
	if err != nil {
		return nil, fmt.Errorf("start the cross traffic's sink: %w", err)
	}
	defer sink.Close()
	for i, load := range cfg.Loads {
		fmt.Fprintf(progress, "clock: load %.0f%%, %s, %d agents\n", load*100, cfg.Duration, len(hosts))
		l, err := runClockLoad(ctx, cfg, d, hosts, clocks, pins, sink.Addr, load, cfg.Seed+uint64(i))
		if err != nil {
			return nil, fmt.Errorf("clock at load %.0f%%: %w", load*100, err)
		}
		res.Loads = append(res.Loads, l)
	}
	return &ClockReport{Results: res}, nil
}

// benchClocks are the agents' injected clocks: a few ms apart, drifting
// by up to 20 ppm either way, no two alike.
func benchClocks(n int) []clocksync.Skewed {
	base, err := clocksync.NewSystemClock()
	if err != nil {
		// adjtimex fails only without /proc-level access; use TAI 0.
		base = &clocksync.SystemClock{}
	}
	origin := base.Now()
	out := make([]clocksync.Skewed, n)
	for i := range out {
		sign := int64(1 - 2*(i%2))
		out[i] = clocksync.Skewed{
			Base:   base,
			Offset: sign * int64(1+i) * 1_300_000,
			Drift:  float64(sign) * float64(5+3*i) * 1e-6,
			Origin: origin,
		}
	}
	return out
}

// clockRun gathers the agents' window reports.
type clockRun struct {
	mu      sync.Mutex
	reports [][]clocksync.WindowReport // per agent
}

func runClockLoad(ctx context.Context, cfg ClockConfig, d *testbed.Dumbbell, hosts []*testbed.Host, clocks []clocksync.Skewed,
	pins kernel.Host, sinkAddr netip.AddrPort, load float64, seed uint64) (ClockLoad, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var peers clocksync.PeerSet
	for _, h := range hosts {
		peers.Addrs = append(peers.Addrs, h.Addr)
		peers.Explicit = append(peers.Explicit, h.Addr)
	}
	run := &clockRun{reports: make([][]clocksync.WindowReport, len(hosts))}
	agents := make([]*clocksync.Agent, len(hosts))
	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()
	for i, h := range hosts {
		err := h.Do(func() error {
			o, err := clocksync.OpenForAgent(pins)
			if err != nil {
				return err
			}
			closers = append(closers, func() { o.Close() })
			a, err := clocksync.New(clocksync.Config{
				Peers: peers, Window: cfg.Window, ProbeRate: cfg.ProbeRate, Clock: clocks[i],
				Offsets: o, Seed: seed*31 + uint64(i) + 1,
				OnWindow: func(r clocksync.WindowReport) {
					run.mu.Lock()
					run.reports[i] = append(run.reports[i], r)
					run.mu.Unlock()
				},
			})
			if err != nil {
				return err
			}
			closers = append(closers, func() { a.Close() })
			agents[i] = a
			return nil
		})
		if err != nil {
			return ClockLoad{}, fmt.Errorf("start the agent on %s: %w", h, err)
		}
	}

	var ptp *PTP4L
	var ptpErr error
	if cfg.PTP {
		rcvIface, err := d.Receiver.Interface()
		if err == nil {
			ptp, err = StartPTP4L(ctx, d.Receiver, rcvIface, d.Receiver.Addr, hosts[0], d.SenderIfaces[0])
		}
		ptpErr = err
	}

	start := time.Now()
	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = a.Run(ctx)
		}()
	}
	carried, crossErr := runCrossTraffic(ctx, cfg, d, sinkAddr, load, seed)
	if rest := cfg.Duration - time.Since(start); rest > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(rest):
		}
	}
	// ptp4l first: its processes end with ctx, and Stop reports how.
	var samples []PTPSample
	if ptp != nil {
		samples, ptpErr = ptp.Stop()
	}
	cancel()
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return ClockLoad{}, err
	}
	if crossErr != nil {
		return ClockLoad{}, crossErr
	}
	out := summarizeClock(cfg, hosts, clocks, run.reports, start)
	out.Load = load
	out.AchievedLoad = float64(carried) * 8 / cfg.Duration.Seconds() / float64(cfg.RateBps)
	out.PTP4L = ptpErrors(samples, clockWarmupWindows*cfg.Window)
	if ptpErr != nil {
		out.PTP4LError = ptpErr.Error()
	} else if cfg.PTP && out.PTP4L.N == 0 {
		out.PTP4LError = "ptp4l's slave printed no offsets"
	}
	return out, nil
}

// runCrossTraffic sends web-search flows at load from the cross senders
// (the senders after the agents') to the receiver, for the run's
// duration, and returns the bytes of the flows that completed.
func runCrossTraffic(ctx context.Context, cfg ClockConfig, d *testbed.Dumbbell, dst netip.AddrPort, load float64, seed uint64) (int64, error) {
	if load == 0 {
		return 0, nil
	}
	cross := d.Senders[cfg.Agents-1:]
	arr, err := workload.Arrivals(workload.ArrivalConfig{
		Load: load, LinkBps: float64(cfg.RateBps), Sizes: workload.WebSearch(), Senders: len(cross),
		Duration: cfg.Duration, MaxFlows: maxWebsearchFlows, Seed: seed,
	})
	if err != nil {
		return 0, fmt.Errorf("cross traffic: %w", err)
	}
	t0 := time.Now()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		carried int64
	)
	for i, a := range arr {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(t0.Add(a.At))):
			}
			r, err := testbed.SendFlow(ctx, cross[a.Sender], dst, testbed.FlowConfig{
				CC: "cubic", Bytes: a.Bytes, Seed: seed*1_000_003 + uint64(i), Timeout: cfg.Duration + drainGrace,
			})
			if err == nil {
				mu.Lock()
				carried += r.Bytes
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return carried, nil
}

// summarizeClock compares every report with the injected clocks.
func summarizeClock(cfg ClockConfig, hosts []*testbed.Host, clocks []clocksync.Skewed, reports [][]clocksync.WindowReport, start time.Time) ClockLoad {
	index := map[netip.Addr]int{}
	for i, h := range hosts {
		index[h.Addr] = i
	}
	receiver := len(hosts) - 1
	driftFrom := clockDriftAfter
	if cfg.Duration < 2*clockDriftAfter {
		driftFrom = cfg.Duration / 2
	}
	var (
		out                                   ClockLoad
		published, direct, mid, across, drift []float64
		settled                               []float64
		pure                                  []float64
		windows                               = math.MaxInt
		perWindow                             = map[uint32]float64{}
	)
	for i, rs := range reports {
		counted := 0
		for _, r := range rs {
			if r.Window <= clockWarmupWindows {
				continue
			}
			counted++
			for _, p := range r.Peers {
				j, ok := index[p.Peer]
				if !ok {
					continue
				}
				truth := clocksync.OffsetAt(clocks[i], clocks[j], r.Ref)
				if p.Err > 0 {
					e := math.Abs(p.Offset - truth)
					published = append(published, e)
					perWindow[r.Window] = math.Max(perWindow[r.Window], e)
					if i == receiver || j == receiver {
						across = append(across, e)
					}
					// r.Ref is on agent i's clock; the wall time since
					// start is near enough to decide the drift's span.
					if time.Duration(r.Window)*cfg.Window >= driftFrom {
						settled = append(settled, e)
						drift = append(drift, math.Abs(p.Drift-clocksync.DriftOf(clocks[i], clocks[j]))*1e6)
					}
				}
				if p.HasDirect {
					direct = append(direct, math.Abs(p.Direct.Offset-truth))
				}
				if p.HasMidpoint {
					mid = append(mid, math.Abs(p.Midpoint-clocksync.OffsetAt(clocks[i], clocks[j], p.MidpointAt)))
				}
				if p.Pairs > 0 {
					pure = append(pure, float64(p.PurePairs)/float64(p.Pairs))
				}
			}
		}
		windows = min(windows, counted)
	}
	if windows == math.MaxInt {
		windows = 0
	}
	out.Windows = windows
	out.Published, out.Direct, out.Midpoint = summarizeErrors(published), summarizeErrors(direct), summarizeErrors(mid)
	out.AcrossBottleneck, out.DriftPPM = summarizeErrors(across), summarizeErrors(drift)
	out.Settled = summarizeErrors(settled)
	out.SettledAfterMs = float64(driftFrom) / float64(time.Millisecond)
	if len(pure) > 0 {
		out.PureShare = stats.Percentile(stats.Sorted(pure), 50)
	}
	for w := uint32(clockWarmupWindows + 1); ; w++ {
		e, ok := perWindow[w]
		if !ok {
			break
		}
		out.Series = append(out.Series, ClockPoint{AtMs: float64(time.Duration(w)*cfg.Window) / float64(time.Millisecond), ErrorNs: e})
	}
	return out
}

// ptpErrors summarises ptp4l's |master offset| after warm-up.
func ptpErrors(samples []PTPSample, warmup time.Duration) ErrorSummary {
	var xs []float64
	for _, s := range samples {
		if s.At >= warmup {
			xs = append(xs, math.Abs(float64(s.OffsetNs)))
		}
	}
	return summarizeErrors(xs)
}
