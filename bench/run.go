package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ccload/ccload/bench/stats"
	"github.com/ccload/ccload/internal/units"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/telemetry/hop"
	"github.com/ccload/ccload/telemetry/sockops"
	"github.com/ccload/ccload/testbed"
)

// Report is the outcome of Run: the results that go to results.json and
// the time series that go into the plots.
type Report struct {
	// Results is what results.json holds.
	Results Results
	// Config is the configuration the run used, defaults filled in.
	Config Config

	// series holds each CC's time series, one per repeat, in the order
	// of Config.CCs.
	series [][]ccSeries
}

// ccSeries is one run's time series, for the plots. Times are since the
// CC's traffic started.
type ccSeries struct {
	cc         string
	queue      []stats.Point // bytes
	throughput []stats.Point // bits/s, at the bottleneck
	perFlow    [][]stats.Point
}

// runner holds what one Run shares between its CCs.
type runner struct {
	cfg      Config
	l        *loader.Loader
	int      *sockops.INT
	topo     *testbed.Dumbbell
	sink     *testbed.Sink
	hop      *hop.Hop
	baseRTT  time.Duration
	progress io.Writer
	builtin  map[string]*loader.CC
	// params holds the parameters of ccload's CCs as they ran, by name.
	params map[string]map[string]string
	// ecn tells, by CC name, whether the CC asks for ECN (probeECN).
	ecn map[string]bool
}

func (r *runner) say(format string, args ...any) {
	if r.progress != nil {
		fmt.Fprintf(r.progress, format+"\n", args...)
	}
}

// intPeers are the prefixes INT is enabled for during INT CCs' runs: the
// testbed's own.
func intPeers() []netip.Prefix {
	return []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("fd00::/8")}
}

// Run runs cfg's scenario Repeat times per CC, the CCs one after the
// other on one topology, and returns the report. Repeat i runs the CCs in
// the order of cfg.CCs rotated by i places, with workload seed cfg.Seed+i
// for all of them. progress, if not nil, receives a line per step and
// every few seconds while traffic runs.
//
// It attaches ccload's built-in CCs that cfg names and are not attached
// yet, and enables INT (for the testbed's prefixes) around the runs of CCs
// that use it unless INT is already on; it undoes both before returning,
// also on error or when ctx is cancelled. The topology is always torn down.
func Run(ctx context.Context, l *loader.Loader, n *sockops.INT, cfg Config, progress io.Writer) (_ *Report, err error) {
	askedTag := cfg.INTTag != ""
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("bench config: %w", err)
	}
	if cfg.INTTag, err = intTagInEffect(n, cfg.INTTag, askedTag); err != nil {
		return nil, fmt.Errorf("bench config: %w", err)
	}
	r := &runner{cfg: cfg, l: l, int: n, progress: progress, builtin: map[string]*loader.CC{},
		params: map[string]map[string]string{}, ecn: map[string]bool{}}
	var control []ControlPlane
	if cfg.ControlPlaneExe != "" {
		if control, err = r.controlPlane(ctx); err != nil {
			return nil, err
		}
	}
	for _, cc := range loader.Builtin() { // sorted by name
		r.builtin[cc.Name] = cc
	}
	undo, err := r.prepareCCs()
	defer func() { err = errors.Join(err, undo()) }()
	if err != nil {
		return nil, err
	}

	costs := newProgramCosts()
	defer costs.close()
	if costs.err != nil {
		r.say("note: no BPF run-time statistics (%v); the bpf columns stay empty", costs.err)
	}

	r.say("building %d sender(s) -> router -> receiver: %s bottleneck, %d KiB buffer, INT hop, ECN K %d B marked by %s (ACK padding %v)",
		cfg.senderCount(), units.FormatBandwidth(cfg.RateBps), cfg.BufferBytes>>10, cfg.ECNThresholdBytes, cfg.Marker, cfg.ACKPadding)
	// One marker at a time: the hop marks on its model of the queue, or
	// fq_codel marks on the sojourn time that K takes to drain at the rate.
	hopK, aqmK := cfg.ECNThresholdBytes, time.Duration(0)
	if cfg.Marker == MarkerFQCodel {
		hopK, aqmK = 0, stats.LineTime(float64(cfg.ECNThresholdBytes), float64(cfg.RateBps))
	}
	r.topo, err = testbed.NewDumbbell(ctx, testbed.DumbbellConfig{
		Senders: cfg.senderCount(), BottleneckRate: cfg.RateBps, BufferBytes: cfg.BufferBytes, Prefix: cfg.Prefix,
		ECNThreshold: aqmK, SteerFlows: true})
	if err != nil {
		return nil, fmt.Errorf("build the bench topology: %w", err)
	}
	defer func() {
		if cerr := r.topo.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("tear down the bench topology: %w", cerr))
		}
	}()
	if err := r.topo.Router.Do(func() (err error) {
		r.hop, err = hop.New(hop.Config{Iface: r.topo.BottleneckIface, RateBps: cfg.RateBps,
			BufferBytes: cfg.BufferBytes, BurstBytes: r.topo.BurstBytes(), ECNThreshold: hopK,
			ACKPadding: cfg.ACKPadding})
		return err
	}); err != nil {
		return nil, fmt.Errorf("attach the INT hop to the bottleneck: %w", err)
	}
	defer func() { err = errors.Join(err, r.hop.Close()) }()
	if err := r.measureBaseRTT(ctx); err != nil {
		return nil, err
	}
	for _, cc := range cfg.CCs {
		if r.ecn[cc], err = r.probeECN(ctx, cc); err != nil {
			return nil, err
		}
	}

	if cfg.KeepCPUsAwake {
		cpus, awakeErr := allowedCPUs()
		if awakeErr != nil {
			return nil, fmt.Errorf("keep the CPUs awake: %w", awakeErr)
		}
		stopSpinners, awakeErr := keepCPUsAwake(cfg.SpinExe, cpus)
		if awakeErr != nil {
			return nil, fmt.Errorf("keep the CPUs awake: %w", awakeErr)
		}
		defer func() { err = errors.Join(err, stopSpinners()) }()
		r.say("keeping %d CPUs awake: one SCHED_IDLE spinner each (the cpu %% column counts them)", len(cpus))
	}

	m := machine()
	m.CPUsKeptAwake = cfg.KeepCPUsAwake
	rep := &Report{Config: cfg, Results: Results{
		Schema:   SchemaID,
		Scenario: cfg.Scenario,
		Command:  strings.Join(os.Args, " "),
		Started:  time.Now().UTC().Round(time.Second),
		Machine:  m,
		Topology: Topology{Kind: "dumbbell", Senders: cfg.senderCount(), RateBps: cfg.RateBps, BufferBytes: cfg.BufferBytes,
			ECNThresholdBytes: cfg.ECNThresholdBytes, ECNMarker: cfg.Marker, ACKPadding: cfg.ACKPadding, INTTag: cfg.INTTag,
			BaseRTTMicros: float64(r.baseRTT) / float64(time.Microsecond)},
		Workload:     workloadOf(cfg),
		Repeat:       cfg.Repeat,
		ControlPlane: control,
	}}
	runs := make(map[string][]RunResult, len(cfg.CCs))
	fcts := make(map[string][]stats.FCT, len(cfg.CCs))
	intOn := map[string]bool{}
	series := make(map[string][]ccSeries, len(cfg.CCs))
	total := cfg.Repeat * len(cfg.CCs)
	for i := range cfg.Repeat {
		order := runOrder(cfg.CCs, i)
		rep.Results.Order = append(rep.Results.Order, order)
		seed := cfg.Seed + uint64(i)
		floor := r.measureFloor(ctx, costs)
		arith := r.measureArith(costs)
		for j, cc := range order {
			step := fmt.Sprintf("[%d/%d]", i*len(order)+j+1, total)
			r.say("%s %s: %s for %v (repeat %d/%d, seed %d)", step, cc, cfg.Scenario, cfg.Duration, i+1, cfg.Repeat, seed)
			out, err := r.runCC(ctx, cc, seed, costs)
			if err != nil {
				return nil, fmt.Errorf("%s with %s (repeat %d): %w", cfg.Scenario, cc, i+1, err)
			}
			out.res.Repeat = i
			out.res.Cost = ackCost(out.res.BPF, floor)
			if a, ok := arith[cc]; ok && out.res.Cost != nil {
				out.res.Cost.ArithNsPerCall, out.res.Cost.ArithNsAboveFloor = &a.NsPerCall, &a.NsAboveFloor
			}
			runs[cc] = append(runs[cc], out.res)
			fcts[cc] = append(fcts[cc], out.fcts...)
			series[cc] = append(series[cc], out.series)
			intOn[cc] = intOn[cc] || out.int
			r.say("%s %s: %s", step, cc, summaryLine(out.res))
		}
	}
	for _, cc := range cfg.CCs {
		res := summarise(cc, runs[cc], fcts[cc], r.idealFCT)
		res.Params, res.INT, res.ECN = r.params[cc], intOn[cc], r.ecn[cc]
		rep.Results.CCs = append(rep.Results.CCs, res)
		rep.series = append(rep.series, series[cc])
	}
	return rep, nil
}

// prepareCCs checks every CC name and attaches the built-in ones that are
// not attached (AttachForRun). Those that read INT get host_bw = the
// bottleneck's rate: the emulated hosts' NICs are as fast as the fabric,
// as in the papers' topologies. θ-PowerTCP keeps host_bw=auto: its power
// is RTT/τ, and the τ floor of one GSO burst at 1 Gbit/s (524 µs) lies far
// above this testbed's RTT, so it would hold that difference as queue. CCs
// the user attached keep their parameters, since an attach of an attached
// CC changes only the parameters it is given, and the bench gives them
// none. --cc-param (cfg.CCParams) goes over the bench's own parameters for
// the CCs it attaches. The returned function detaches what it attached.
func (r *runner) prepareCCs() (func() error, error) {
	params, err := runParams(r.l, r.cfg.CCs, r.cfg.CCParams, func(cc *loader.CC, attachedBefore map[string]bool) map[string]string {
		if _, has := cc.Param(hostBWParam); has && !attachedBefore[cc.Name] && cc.UsesINT {
			return map[string]string{hostBWParam: units.FormatBandwidth(r.cfg.RateBps)}
		}
		return nil
	})
	if err != nil {
		return func() error { return nil }, err
	}
	return AttachForRun(r.l, r.cfg.CCs, "the bench", params, func(a Attached) {
		r.params[a.Name] = a.Params
		if a.AlreadyAttached {
			r.say("%s is attached already; the bench uses its parameters (%s)", a.Name, loader.ParamsString(a.Params))
		} else {
			r.say("attached %s for the bench (%s)", a.Name, loader.ParamsString(a.Params))
		}
	})
}

// controlPlaneCC is the CC whose attach, set and detach the bench times.
const controlPlaneCC = "theta_powertcp"

// controlPlane times the control-plane commands (MeasureControlPlane),
// unless the user has controlPlaneCC attached, which it leaves alone.
func (r *runner) controlPlane(ctx context.Context) ([]ControlPlane, error) {
	list, err := r.l.List()
	if err != nil {
		return nil, fmt.Errorf("list attached CCs: %w", err)
	}
	for _, st := range list {
		if st.Name == controlPlaneCC && st.Attached {
			r.say("note: %s is attached, so the bench does not time its attach and detach", controlPlaneCC)
			return nil, nil
		}
	}
	if kernelCCs, err := r.l.KernelCCs(); err == nil && slices.Contains(kernelCCs, controlPlaneCC) {
		r.say("note: %s is registered outside the bench's pin root (by the daemon or `ccload attach`), so the bench does not time its attach and detach", controlPlaneCC)
		return nil, nil
	}
	r.say("timing attach, set and detach of %s as processes (%s), %d times each", controlPlaneCC, r.cfg.ControlPlaneExe, r.cfg.ControlPlaneRuns)
	out, err := MeasureControlPlane(ctx, r.l, r.cfg.ControlPlaneExe, controlPlaneCC, r.cfg.ControlPlaneRuns)
	if err != nil {
		return nil, fmt.Errorf("measure the control plane: %w", err)
	}
	return out, nil
}

// hostBWParam is the parameter of ccload's CCs that holds the host's NIC
// rate.
const hostBWParam = "host_bw"

// onrampHoldsParam is the parameter of the power CCs that takes On-Ramp's
// holds out of their RTT samples (OnRampConfig.CCHolds).
const onrampHoldsParam = "onramp_holds"

// measureBaseRTT sends a small flow on the idle path and keeps its
// minimum RTT.
func (r *runner) measureBaseRTT(ctx context.Context) error {
	sink, err := testbed.StartSink(r.topo.Receiver, netip.AddrPortFrom(r.topo.Receiver.Addr, 0))
	if err != nil {
		return err
	}
	defer sink.Close()
	res, err := testbed.SendFlow(ctx, r.topo.Senders[0], sink.Addr, testbed.FlowConfig{CC: "reno", Bytes: 64 << 10, Seed: 99, Timeout: 10 * time.Second})
	if err != nil {
		return fmt.Errorf("measure the base RTT: %w", err)
	}
	if res.Info != nil {
		r.baseRTT = time.Duration(res.Info.Min_rtt) * time.Microsecond
	}
	if _, err := sink.WaitResults(ctx, 1); err != nil {
		return fmt.Errorf("measure the base RTT: %w", err)
	}
	return nil
}

// startSink starts the receiver for cc's run. A CC that asks for ECN
// (probeECN), such as DCTCP, runs on the receiver's listener too: the
// kernel grants ECN to an ECT-marked SYN when the listener's CC needs it,
// and DCTCP's receiver echoes CE precisely. Other CCs' flows meet a reno
// listener. The returned function closes the sink.
func (r *runner) startSink(ctx context.Context, cc string) (func(), error) {
	recvCC := "reno"
	if r.ecn[cc] {
		recvCC = cc
	}
	sink, err := testbed.StartSinkCC(r.topo.Receiver, netip.AddrPortFrom(r.topo.Receiver.Addr, 0), recvCC)
	if err != nil {
		return nil, fmt.Errorf("start the receiver with %s: %w", recvCC, err)
	}
	r.sink = sink
	return func() { sink.Close() }, nil
}

// intTagInEffect is the tagging the INT CCs will run with: tag (validated,
// the default filled in) when INT is off, since the bench then enables it,
// or the enabled INT's own, which the bench keeps (withINT). A tag the
// user asked for that differs from the enabled one is an error, not a run
// that records one policy and measures another.
func intTagInEffect(n *sockops.INT, tag string, asked bool) (string, error) {
	st, err := n.Status()
	if err != nil {
		return "", fmt.Errorf("read INT status: %w", err)
	}
	if !st.Enabled {
		return tag, nil
	}
	on := sockops.FormatTag(st.Every, st.TSOOnly)
	every, tsoOnly, err := sockops.ParseTag(tag)
	if err != nil {
		return "", fmt.Errorf("INT %w", err)
	}
	if asked && sockops.FormatTag(every, tsoOnly) != on {
		return "", fmt.Errorf("--int-tag %s: INT is already enabled with tag %s, which the bench keeps; leave --int-tag out, or run ccload int disable first", tag, on)
	}
	return on, nil
}

// withINT enables INT around fn when cc uses it and INT is off; it
// reports whether INT was on during fn.
func (r *runner) withINT(cc string, fn func() error) (bool, error) {
	st, err := r.int.Status()
	if err != nil {
		return false, fmt.Errorf("read INT status: %w", err)
	}
	if st.Enabled {
		return true, fn()
	}
	if b, ok := r.builtin[cc]; !ok || !b.UsesINT {
		return false, fn()
	}
	every, tsoOnly, err := sockops.ParseTag(r.cfg.INTTag)
	if err != nil {
		return false, fmt.Errorf("enable INT for %s: %w", cc, err)
	}
	if _, err := r.int.Enable(sockops.Config{Peers: intPeers(), Every: every, TSOOnly: tsoOnly}); err != nil {
		return false, fmt.Errorf("enable INT for %s: %w", cc, err)
	}
	err = fn()
	if _, derr := r.int.Disable(); derr != nil {
		err = errors.Join(err, fmt.Errorf("disable INT after %s: %w", cc, derr))
	}
	return true, err
}

func workloadOf(c Config) Workload {
	w := Workload{DurationSeconds: c.Duration.Seconds(), Quick: c.Quick,
		SampleMicros: float64(c.SampleInterval) / float64(time.Microsecond), Seed: c.Seed}
	switch c.Scenario {
	case ScenarioWebsearch:
		w.Load = c.Load
	case ScenarioIncast:
		w.Fanout, w.IncastBytes = c.Fanout, c.IncastBytes
	case ScenarioFairness:
		w.Flows = c.Flows
	}
	return w
}

func summaryLine(c RunResult) string {
	s := fmt.Sprintf("%.0f Mbit/s, queue p50 %.0f KB p99 %.0f KB", c.ThroughputBps/1e6, c.QueueP50Bytes/1e3, c.QueueP99Bytes/1e3)
	for _, b := range c.FCT {
		if b.Bucket == stats.BucketAll {
			s += fmt.Sprintf(", %d flows, FCT p99 %.0f us", b.Count, b.P99Us)
		}
	}
	if c.FlowsFailed > 0 {
		s += fmt.Sprintf(", %d FAILED", c.FlowsFailed)
	}
	return s
}
