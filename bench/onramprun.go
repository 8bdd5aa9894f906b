package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"

	"github.com/ccload/ccload/bench/stats"
	"github.com/ccload/ccload/bench/workload"
	"github.com/ccload/ccload/clocksync"
	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/sharedmaps"
	"github.com/ccload/ccload/internal/units"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/onramp"
	"github.com/ccload/ccload/qdisc"
	"github.com/ccload/ccload/telemetry/hop"
	"github.com/ccload/ccload/telemetry/sockops"
	"github.com/ccload/ccload/testbed"
)

// onrampClockErrorNs is the error the fixed clock offsets are published
// with, and onrampClockValid how long they hold.
const (
	onrampClockErrorNs = 1000
	onrampClockValid   = 24 * time.Hour
	// onrampGoneWithin is how long the kernel may take to free On-Ramp's
	// programs after the last pin and link are gone.
	onrampGoneWithin = 5 * time.Second
	// onrampEnableWorkers bounds the Enables that run at once.
	onrampEnableWorkers = 8
)

// onrampPeers are the prefixes On-Ramp stamps for: the testbed's.
func onrampPeers() []netip.Prefix { return intPeers() }

// OnRampReport is a finished onramp scenario.
type OnRampReport struct {
	Results OnRampResults
	Config  OnRampConfig
	// rcts holds each variant's pooled RCTs in µs, in the order of
	// Results.Variants, for the plots.
	rcts [][]float64
	// netRCTs holds each variant's pooled network RCTs, likewise.
	netRCTs [][]float64
	// fcts holds each variant's pooled background flows, likewise.
	fcts [][]stats.FCT
}

// onrampRunner holds what one RunOnRamp shares between its runs. It
// embeds the CC scenarios' runner for the parts they share: the sink,
// INT, the ECN probe, the base RTT and the queue metrics.
type onrampRunner struct {
	*runner
	ocfg    OnRampConfig
	or      *onramp.OnRamp
	pins    kernel.Host
	servers []*testbed.Host
	bg      []*testbed.Host
	places  []onrampPlace
	// progsBefore is how many On-Ramp programs the kernel had before the
	// bench enabled any: the check after each disable goes back to it.
	progsBefore int
	// costs reads the BPF programs' run time over each run; nil without
	// OnRampConfig.BPFCosts.
	costs *programCosts
	// floors run where On-Ramp's programs do in the runs with On-Ramp,
	// to time runs that do nothing; nil without OnRampConfig.BPFCosts.
	floors *bpfFloors
}

// onrampPlace is an interface On-Ramp is enabled on in the runs with it.
type onrampPlace struct {
	h      *testbed.Host
	iface  string
	sender bool
}

// RunOnRamp runs the onramp scenario: every CC of cfg without On-Ramp and
// with it, Repeat times, interleaved, on one dumbbell whose senders all
// have fq and a small GSO size. It attaches ccload's CCs that cfg names
// and are not attached (θ-PowerTCP and the others with a host_bw get the
// bottleneck's rate), enables INT around the runs of CCs that read it,
// and undoes both before returning. On-Ramp's pins live in a directory
// of the bench's own below the bpffs, removed at the end. A kernel
// without sch_fq fails at once, with an error that names
// CONFIG_NET_SCH_FQ.
func RunOnRamp(ctx context.Context, l *loader.Loader, n *sockops.INT, cfg OnRampConfig, progress io.Writer) (_ *OnRampReport, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, &InputError{Err: err}
	}
	cfg = cfg.withDefaults()
	if err := kernel.CheckCaps(); err != nil {
		return nil, err
	}
	pins := kernel.DefaultHost()
	pins.PinDir = fmt.Sprintf("ccload-bench-onramp-%d", os.Getpid())
	defer os.RemoveAll(pins.PinRoot())

	base := Config{Scenario: ScenarioOnRamp, CCs: cfg.CCs, Duration: cfg.Duration, Quick: cfg.Quick,
		RateBps: cfg.RateBps, BufferBytes: cfg.BufferBytes, ECNThresholdBytes: cfg.ECNThresholdBytes,
		Marker: cfg.Marker, SampleInterval: cfg.SampleInterval, Seed: cfg.Seed, Repeat: cfg.Repeat, Prefix: cfg.Prefix}
	r := &onrampRunner{
		runner: &runner{cfg: base, l: l, int: n, progress: progress, builtin: map[string]*loader.CC{},
			params: map[string]map[string]string{}, ecn: map[string]bool{}},
		ocfg: cfg, or: onramp.New(pins, onramp.WithSharedMaps(sharedmaps.New(l.Host()))), pins: pins,
	}
	if cfg.BPFCosts {
		r.costs = newProgramCosts()
		defer r.costs.close()
		if r.costs.err != nil {
			return nil, fmt.Errorf("enable the kernel's BPF statistics to time the BPF programs: %w (needs CAP_SYS_ADMIN and Linux 5.8)", r.costs.err)
		}
		if r.floors, err = newBPFFloors(); err != nil {
			return nil, err
		}
		defer func() { err = errors.Join(err, r.floors.close()) }()
		r.say("BPF statistics on: every BPF program run also reads the clock twice; %s and %s, which do nothing, run where On-Ramp's programs do", tcFloorName, sockopsFloorName)
	}
	for _, cc := range loader.Builtin() {
		r.builtin[cc.Name] = cc
	}

	senders := cfg.Fanout + cfg.BackgroundSenders
	r.say("building %d incast servers + %d background senders -> router -> client: %s bottleneck, %d KiB buffer, fq (%s) and GSO %d B on every sender, CE above %d B by %s",
		cfg.Fanout, cfg.BackgroundSenders, units.FormatBandwidth(cfg.RateBps), cfg.BufferBytes>>10, senderRateText(cfg.SenderRateBps), cfg.GSOBytes, cfg.ECNThresholdBytes, cfg.Marker)
	hopK, aqmK := cfg.ECNThresholdBytes, time.Duration(0)
	if cfg.Marker == MarkerFQCodel {
		hopK, aqmK = 0, stats.LineTime(float64(cfg.ECNThresholdBytes), float64(cfg.RateBps))
	}
	r.topo, err = testbed.NewDumbbell(ctx, testbed.DumbbellConfig{
		Senders: senders, BottleneckRate: cfg.RateBps, BufferBytes: cfg.BufferBytes, Prefix: cfg.Prefix, ECNThreshold: aqmK,
		SteerFlows: true})
	if err != nil {
		return nil, fmt.Errorf("build the onramp topology: %w", err)
	}
	defer func() {
		if cerr := r.topo.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("tear down the onramp topology: %w", cerr))
		}
	}()
	r.servers, r.bg = r.topo.Senders[:cfg.Fanout], r.topo.Senders[cfg.Fanout:]
	if err := r.prepareSenders(); err != nil {
		return nil, err
	}

	params, err := r.ccParams()
	if err != nil {
		return nil, err
	}
	undo, err := AttachForRun(l, cfg.CCs, "the bench", params, func(a Attached) {
		r.params[a.Name] = a.Params
		if a.AlreadyAttached {
			r.say("%s is attached already; the bench uses its parameters (%s)", a.Name, loader.ParamsString(a.Params))
		} else {
			r.say("attached %s for the bench (%s)", a.Name, loader.ParamsString(a.Params))
		}
	})
	defer func() { err = errors.Join(err, undo()) }()
	if err != nil {
		return nil, err
	}
	if err := r.topo.Router.Do(func() (err error) {
		r.hop, err = hop.New(hop.Config{Iface: r.topo.BottleneckIface, RateBps: cfg.RateBps,
			BufferBytes: cfg.BufferBytes, BurstBytes: r.topo.BurstBytes(), ECNThreshold: hopK})
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
	r.progsBefore = len(onramp.ProgramsAlive())

	rep := &OnRampReport{Config: cfg, Results: r.header()}
	vs := cfg.variants()
	runs := make(map[string][]OnRampRun, len(vs))
	samples := make(map[string]*variantSamples, len(vs))
	netRCTs := make(map[string][]float64, len(vs))
	details := make(map[string][]requestDetail, len(vs))
	intOn := map[string]bool{}
	total := cfg.Repeat * len(vs)
	for i := range cfg.Repeat {
		order := runOrder(variantNames(vs), i)
		rep.Results.Order = append(rep.Results.Order, order)
		seed := cfg.Seed + uint64(i)
		for j, name := range order {
			v := variantByName(vs, name)
			step := fmt.Sprintf("[%d/%d]", i*len(order)+j+1, total)
			r.say("%s %s: onramp for %v (repeat %d/%d, seed %d)", step, name, cfg.Duration, i+1, cfg.Repeat, seed)
			started := time.Now()
			out, err := r.run(ctx, v, seed)
			if err != nil {
				return nil, fmt.Errorf("onramp with %s (repeat %d): %w", name, i+1, err)
			}
			out.res.Repeat = i
			runs[name] = append(runs[name], out.res)
			if samples[name] == nil {
				samples[name] = &variantSamples{}
			}
			samples[name].add(out.rcts, out.fcts)
			netRCTs[name] = append(netRCTs[name], out.netRCTs...)
			details[name] = append(details[name], out.reqs...)
			intOn[name] = intOn[name] || out.int
			r.say("%s %s: %s (%v)", step, name, onrampSummaryLine(out.res), time.Since(started).Round(100*time.Millisecond))
		}
	}
	var bySample []variantSamples
	for _, v := range vs {
		name := v.String()
		x := *samples[name]
		rcts, fcts := x.pooledRCTs(), x.pooledFCTs()
		res := summariseOnRamp(v, runs[name], rcts, fcts, r.idealFCT)
		res.NetRCT = summariseRCT(netRCTs[name])
		res.RCTTail = rctTail(details[name], res.RCT.TailUs, kernelCountsRTOs(rep.Results.Machine.Kernel))
		res.Params, res.ECN, res.INT = r.params[v.cc], r.ecn[v.cc], intOn[name]
		rep.Results.Variants = append(rep.Results.Variants, res)
		rep.rcts = append(rep.rcts, rcts)
		rep.netRCTs = append(rep.netRCTs, netRCTs[name])
		rep.fcts = append(rep.fcts, fcts)
		bySample = append(bySample, x)
	}
	rep.Results.Comparisons, rep.Results.Verdict = compareOnRamp(cfg.CCs, rep.Results.Variants, bySample)
	return rep, nil
}

// ccParams gives ccload's CCs that have a host_bw and are not attached
// yet the senders' NIC rate: the flows' cap (SenderRateBps), the
// bottleneck's rate by default, as every sender's NIC is as fast as the
// fabric here, or the bottleneck's rate without a cap. θ-PowerTCP's τ
// floor (one GSO packet at host_bw) is then GSOBytes at that rate, 655 µs
// for 8 KiB at 100 Mbit/s. --cc-param (CCParams) goes over these; it
// fails for a CC that is attached already.
func (r *onrampRunner) ccParams() (func(*loader.CC) map[string]string, error) {
	return runParams(r.l, r.ocfg.CCs, r.ocfg.CCParams, func(cc *loader.CC, attached map[string]bool) map[string]string {
		if attached[cc.Name] {
			return nil
		}
		params := map[string]string{}
		if _, has := cc.Param(hostBWParam); has {
			params[hostBWParam] = units.FormatBandwidth(r.ocfg.hostBWBps())
		}
		if _, has := cc.Param(onrampHoldsParam); has && r.ocfg.CCHolds {
			params[onrampHoldsParam] = "1"
		}
		return params
	})
}

// prepareSenders installs fq at the root of every sender's uplink and
// sets its GSO size, for every run, with On-Ramp or without.
func (r *onrampRunner) prepareSenders() error {
	d := r.topo
	for i, s := range d.Senders {
		iface := d.SenderIfaces[i]
		err := s.Do(func() error { return onramp.PrepareSender(iface, int(r.ocfg.GSOBytes), r.ocfg.senderFQ()) })
		if errors.Is(err, qdisc.ErrNoFQ) {
			return kernel.NewError(kernel.KindKernelTooOld,
				"use a kernel with CONFIG_NET_SCH_FQ (a distribution kernel's sch_fq module: modprobe sch_fq), or run the scenario in a vmtests guest, whose kernels have it: go run ./vmtests --kernel 6.12 --bench '--scenario onramp --quick'",
				err, "the onramp scenario needs the fq qdisc (CONFIG_NET_SCH_FQ) on every sender: it is what enforces On-Ramp's pauses, and the runs without On-Ramp use it too")
		}
		if err != nil {
			return fmt.Errorf("fq (%s) and GSO size %d on sender %d (%s): %w", senderRateText(r.ocfg.SenderRateBps), r.ocfg.GSOBytes, i, iface, err)
		}
	}
	rcv, err := d.Receiver.Interface()
	if err != nil {
		return err
	}
	r.places = []onrampPlace{{h: d.Receiver, iface: rcv}}
	for i, s := range d.Senders {
		r.places = append(r.places, onrampPlace{h: s, iface: d.SenderIfaces[i], sender: true})
	}
	return nil
}

// publishClocks gives the client an offset for every sender and every
// sender one for the client: 0, since the hosts share the kernel's clock.
func (r *onrampRunner) publishClocks() error {
	d := r.topo
	var senders []netip.Addr
	for _, s := range d.Senders {
		senders = append(senders, s.Addr)
	}
	publish := func(h *testbed.Host, peers []netip.Addr) error {
		if err := h.Do(func() error {
			return clocksync.PublishFixed(r.pins, peers, 0, onrampClockErrorNs, onrampClockValid)
		}); err != nil {
			return fmt.Errorf("publish clock offsets in %s: %w", h, err)
		}
		return nil
	}
	if err := publish(d.Receiver, senders); err != nil {
		return err
	}
	for _, s := range d.Senders {
		if err := publish(s, []netip.Addr{d.Receiver.Addr}); err != nil {
			return err
		}
	}
	return nil
}

// header is the results' settings, without any run.
func (r *onrampRunner) header() OnRampResults {
	c := r.ocfg
	var peers []string
	for _, p := range onrampPeers() {
		peers = append(peers, p.String())
	}
	var bgMax int64
	if c.Quick {
		bgMax = quickMaxFlowBytes
	}
	return OnRampResults{
		Schema: OnRampSchemaID, Scenario: ScenarioOnRamp, Command: c.Command,
		Started: time.Now().UTC().Round(time.Second), Machine: machine(),
		Topology: OnRampTopology{Kind: "dumbbell", Servers: c.Fanout, BackgroundSenders: c.BackgroundSenders,
			RateBps: c.RateBps, BufferBytes: c.BufferBytes, GSOBytes: c.GSOBytes, SenderQdisc: "fq", SenderRateBps: c.SenderRateBps,
			ECNThresholdBytes: c.ECNThresholdBytes, ECNMarker: c.Marker,
			BaseRTTMicros: float64(r.baseRTT) / float64(time.Microsecond)},
		Workload: OnRampWorkload{DurationSeconds: c.Duration.Seconds(), Quick: c.Quick, Fanout: c.Fanout,
			ResponseBytes: c.ResponseBytes, IncastLoad: c.IncastLoad, RequestRate: c.requestRate(),
			RequestsFromSeconds: (c.Duration / 10).Seconds(), MaxRequests: c.maxRequests(),
			BackgroundLoad: c.Load, BackgroundMaxBytes: bgMax, LongFlows: c.longFlows(), ResponseConns: c.responseConns(),
			SampleMicros: float64(c.SampleInterval) / float64(time.Microsecond), Seed: c.Seed},
		OnRamp: OnRampSettings{ThresholdNs: uint64(c.Threshold), MaxPauseNs: uint64(c.MaxPause), Gain: c.Gain,
			Peers: peers, Interfaces: len(r.places), ClockErrorNs: onrampClockErrorNs, BPFStats: c.BPFCosts,
			CCHolds: c.CCHolds, Strawman: c.Strawman, Observe: c.Observe, SparseStamps: !c.StampEveryPacket},
		Repeat:  c.Repeat,
		Targets: OnRampTargets{RCTRatio: OnRampTargetRCTRatio, RCTCC: OnRampTargetCC, LongFlowLoss: OnRampTargetLongFlowLoss, WorseMargin: onrampWorseMargin},
	}
}

// onrampOut is what one run yields.
type onrampOut struct {
	res     OnRampRun
	rcts    []float64 // µs, of the completed requests
	netRCTs []float64 // µs, their slowest response's FCT
	// reqs describes the same requests, in the same order.
	reqs []requestDetail
	fcts []stats.FCT
	int  bool
}

// run runs the traffic once for v with workload seed seed: with On-Ramp
// enabled around it for v.onramp, which is disabled and checked gone
// afterwards, also when the traffic fails.
func (r *onrampRunner) run(ctx context.Context, v onrampVariant, seed uint64) (out onrampOut, err error) {
	if v.onramp {
		if r.floors != nil {
			if err := r.floors.attach(r.places); err != nil {
				return out, err
			}
			defer func() { err = errors.Join(err, r.floors.detach()) }()
		}
		if err := r.enableOnRamp(); err != nil {
			return out, errors.Join(err, r.disableOnRamp())
		}
		defer func() { err = errors.Join(err, r.disableOnRamp()) }()
	}
	out.int, err = r.withINT(v.cc, func() error {
		var e error
		out, e = r.traffic(ctx, v, seed)
		return e
	})
	return out, err
}

// enableOnRamp publishes the clock offsets (the last disable of a
// namespace takes its clock map along, as no agent runs) and enables
// On-Ramp on the client's interface and every sender's uplink.
func (r *onrampRunner) enableOnRamp() error {
	c := r.ocfg
	start := time.Now()
	defer func() {
		r.say("      enabled On-Ramp on %d interfaces in %v", len(r.places), time.Since(start).Round(100*time.Millisecond))
	}()
	if err := r.publishClocks(); err != nil {
		return err
	}
	enable := func(p onrampPlace) error {
		cfg := onramp.Config{Iface: p.iface, Peers: onrampPeers(), Threshold: c.Threshold, MaxPause: c.MaxPause, Gain: c.Gain,
			Strawman: c.Strawman, Observe: c.Observe, StampEveryPacket: c.StampEveryPacket}
		if err := p.h.Do(func() error { _, err := r.or.Enable(cfg); return err }); err != nil {
			return fmt.Errorf("enable On-Ramp on %s %s: %w", p.h, p.iface, err)
		}
		return nil
	}
	// The client first: its Enable attaches the shared sockops program,
	// which the others then only join. Each Enable loads and verifies
	// On-Ramp's tc programs, CPU work that takes seconds per interface in
	// a TCG guest, so the senders' run on every CPU at once.
	if err := enable(r.places[0]); err != nil {
		return err
	}
	work := make(chan int)
	errs := make([]error, len(r.places))
	var wg sync.WaitGroup
	for range min(runtime.NumCPU(), onrampEnableWorkers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				errs[i] = enable(r.places[i])
			}
		}()
	}
	for i := 1; i < len(r.places); i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	return errors.Join(errs...)
}

// disableOnRamp disables On-Ramp everywhere enableOnRamp enabled it and
// checks that nothing is left: no pins, no status, no program in the
// kernel beyond those that were there before the bench, and fq still at
// the root of every sender (the bench installed it, not On-Ramp).
func (r *onrampRunner) disableOnRamp() error {
	start := time.Now()
	defer func() { r.say("      disabled On-Ramp in %v", time.Since(start).Round(100*time.Millisecond)) }()
	var errs []error
	for _, p := range r.places {
		if err := p.h.Do(func() error { _, err := r.or.Disable(p.iface); return err }); err != nil {
			errs = append(errs, fmt.Errorf("disable On-Ramp on %s %s: %w", p.h, p.iface, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var left []string
	for _, sub := range []string{"onramp", "clock"} {
		if dir := filepath.Join(r.pins.PinRoot(), sub); kernel.Exists(dir) {
			left = append(left, "its pins in "+dir)
		}
	}
	for _, p := range r.places {
		var sts []onramp.Status
		var fq bool
		err := p.h.Do(func() (err error) {
			if sts, err = r.or.Status(); err != nil {
				return err
			}
			_, fq, err = qdisc.InspectFQRoot(p.iface)
			return err
		})
		switch {
		case err != nil:
			left = append(left, fmt.Sprintf("an unreadable state on %s %s (%v)", p.h, p.iface, err))
		case len(sts) > 0:
			left = append(left, fmt.Sprintf("an instance on %s %s", p.h, p.iface))
		case p.sender && !fq:
			left = append(left, fmt.Sprintf("no fq at the root of %s %s (disable removed the bench's)", p.h, p.iface))
		}
	}
	deadline := time.Now().Add(onrampGoneWithin)
	for n := len(onramp.ProgramsAlive()); n > r.progsBefore; n = len(onramp.ProgramsAlive()) {
		if time.Now().After(deadline) {
			left = append(left, fmt.Sprintf("%d of its programs in the kernel", n-r.progsBefore))
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(left) > 0 {
		return fmt.Errorf("On-Ramp left behind after disable: %s", strings.Join(left, "; "))
	}
	return nil
}

// onrampStatus sums On-Ramp's counters over every interface it is
// enabled on.
func (r *onrampRunner) onrampStatus() (*OnRampCounters, error) {
	out := &OnRampCounters{Counters: map[string]uint64{}}
	var betas []float64
	var samples, above float64
	for _, p := range r.places {
		var sts []onramp.Status
		if err := p.h.Do(func() (err error) { sts, err = r.or.Status(); return err }); err != nil {
			return nil, fmt.Errorf("read On-Ramp's status on %s: %w", p.h, err)
		}
		for _, st := range sts {
			out.Interfaces++
			for k, v := range st.Stats {
				if onrampSockopsCounter(k) {
					out.Counters[k] = v // one program for all interfaces
				} else {
					out.Counters[k] += v
				}
			}
			if !p.sender {
				continue
			}
			out.Pauses += st.Pauses
			out.PauseSeconds += st.PauseSeconds
			if st.BetaFlows > 0 {
				betas = append(betas, st.BetaP50)
			}
			for _, ps := range st.PeerStats {
				out.OWDP99MaxNs = max(out.OWDP99MaxNs, ps.OWDP99Ns)
				if ps.ShareAboveThreshold >= 0 {
					samples += ps.SampledSeconds
					above += ps.ShareAboveThreshold * ps.SampledSeconds
				}
			}
		}
	}
	if len(betas) > 0 {
		b := median(stats.Sorted(betas))
		out.BetaP50 = &b
	}
	if samples > 0 {
		share := above / samples
		out.AboveThresholdShare = &share
	}
	return out, nil
}

// onrampProgramPrefix starts the names of On-Ramp's BPF programs
// (bpf/onramp.c, bpf/onramp_sockops.c).
const onrampProgramPrefix = "onramp_"

// mergePrograms sums the programs that share a name and a type (On-Ramp
// loads its tc programs once per interface) into one entry, whose
// NsPerRun is the mean over all their runs, busiest first.
func mergePrograms(progs []ProgramCost) []ProgramCost {
	var out []ProgramCost
	for _, p := range progs {
		i := slices.IndexFunc(out, func(o ProgramCost) bool { return o.Program == p.Program && o.Type == p.Type })
		if i < 0 {
			out = append(out, p)
			continue
		}
		o := &out[i]
		runs := o.Runs + p.Runs
		o.NsPerRun = (o.NsPerRun*float64(o.Runs) + p.NsPerRun*float64(p.Runs)) / float64(runs)
		o.Runs = runs
	}
	slices.SortStableFunc(out, busiestFirst)
	return out
}

// onrampBPFBusy is the share of cpus CPUs' time over wall that
// On-Ramp's programs among progs ran.
func onrampBPFBusy(progs []ProgramCost, wall time.Duration, cpus int) float64 {
	if wall <= 0 || cpus <= 0 {
		return 0
	}
	var ns float64
	for _, p := range progs {
		if strings.HasPrefix(p.Program, onrampProgramPrefix) {
			ns += p.NsPerRun * float64(p.Runs)
		}
	}
	return min(ns/(float64(wall.Nanoseconds())*float64(cpus)), 1)
}

// onrampSockopsCounter reports whether counter k is the shared sockops
// program's, which every interface's status repeats.
func onrampSockopsCounter(k string) bool {
	return k == "scoped_connections" || k == "stamp_no_space" || k == "echo_no_space"
}

// orFlow is one flow of an onramp run.
type orFlow struct {
	kind    orFlowKind
	request int           // the request of a response
	begin   time.Duration // since the run's start
	bytes   int64
	res     testbed.FlowResult
	err     error
	// rto and retrans say a response took a retransmission timeout, or
	// retransmitted, while it was in flight: from its connection's
	// TCP_INFO, or, on a persistent connection, from the counters' growth
	// over the response.
	rto, retrans bool
}

type orFlowKind int

const (
	orResponse orFlowKind = iota
	orBackground
	orLong
	// orResponseConn is a server's persistent connection, once closed:
	// its counters cover every response it carried.
	orResponseConn
)

// responseConnIdle is how long a server's persistent connection may sit
// idle before the server opens a new one for its next response, as
// servers close idle keep-alive connections: the client's sink fails a
// connection that delivers nothing for 30 s.
const responseConnIdle = 10 * time.Second

// orFlowSet collects a run's flows from their goroutines.
type orFlowSet struct {
	mu    sync.Mutex
	wg    sync.WaitGroup
	flows []orFlow
}

// start sends a flow from h to dst at offset at from t0, in the
// background.
func (s *orFlowSet) start(ctx context.Context, t0 time.Time, at time.Duration, h *testbed.Host, dst netip.AddrPort, f orFlow, cfg testbed.FlowConfig) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f.bytes = cfg.Bytes
		if !sleepUntil(ctx, t0.Add(at)) {
			f.begin, f.err = at, ctx.Err()
			s.add(f)
			return
		}
		f.begin = time.Since(t0)
		f.res, f.err = testbed.SendFlow(ctx, h, dst, cfg)
		if i := f.res.Info; f.err == nil && i != nil {
			f.rto, f.retrans = i.Total_rto > 0, i.Total_retrans > 0
		}
		s.add(f)
	}()
}

// sleepUntil waits until t, or until ctx ends; false means ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return true
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// serve answers every request of reqs (their arrival times from t0) with
// bytes from h to dst on one persistent connection, in the background:
// each response starts at its request's arrival, or once the response
// before it is acknowledged, whichever is later, as a server that
// answers its connection's requests in order. A response that fails
// ends its connection; the next one opens a new connection, as does one
// that follows a gap of more than responseConnIdle.
//
// Every connection ends by deadline. The n-th connection's pattern seed
// is seed+n.
func (s *orFlowSet) serve(ctx context.Context, t0, deadline time.Time, h *testbed.Host, dst netip.AddrPort, cc string, seed uint64, reqs []time.Duration, bytes int64) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		var (
			conn    *testbed.Stream
			lastEnd time.Time
			opened  uint64
		)
		closeConn := func() {
			if conn == nil {
				return
			}
			res, err := conn.Close(ctx)
			s.add(orFlow{kind: orResponseConn, res: res, err: err, bytes: res.Bytes})
			conn = nil
		}
		defer closeConn()
		// open leaves conn nil when it fails, and records the failure.
		open := func() {
			var err error
			conn, err = testbed.OpenStream(ctx, h, dst, cc, seed+opened)
			opened++
			if err != nil {
				s.add(orFlow{kind: orResponseConn, err: err})
			}
			lastEnd = time.Now()
		}
		open()
		for k, at := range reqs {
			f := orFlow{kind: orResponse, request: k, bytes: bytes}
			if !sleepUntil(ctx, t0.Add(at)) {
				f.begin, f.err = at, ctx.Err()
				s.add(f)
				continue
			}
			if ctx.Err() != nil {
				f.begin, f.err = time.Since(t0), ctx.Err()
				s.add(f)
				continue
			}
			if conn != nil && time.Since(lastEnd) > responseConnIdle {
				closeConn()
			}
			if conn == nil {
				open()
			}
			if conn == nil {
				f.begin, f.err = time.Since(t0), fmt.Errorf("response %d: no connection to %s", k, dst)
				s.add(f)
				continue
			}
			m, err := conn.Send(ctx, bytes)
			f.begin, f.err = time.Since(t0), err
			if !m.Start.IsZero() {
				f.begin = m.Start.Sub(t0)
			}
			f.res = testbed.FlowResult{Bytes: bytes, AckedIn: m.AckedIn, Duration: m.AckedIn}
			f.rto, f.retrans = m.RTOs > 0, m.Retrans > 0
			s.add(f)
			lastEnd = time.Now()
			if err != nil {
				closeConn()
			}
		}
	}()
}

func (s *orFlowSet) add(f orFlow) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flows = append(s.flows, f)
}

func (s *orFlowSet) done() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.flows)
}

func (s *orFlowSet) wait() []orFlow {
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.flows)
}

// requestArrivals are the run's request times: Poisson at the request
// rate from a tenth of the run to its end, at most maxRequests.
func (c OnRampConfig) requestArrivals(seed uint64) []time.Duration {
	rng := rand.New(rand.NewPCG(seed, 0x6f6e72616d70)) // "onramp"
	lambda := c.requestRate()
	t := (c.Duration / 10).Seconds()
	var out []time.Duration
	for len(out) < c.maxRequests() {
		t += rng.ExpFloat64() / lambda
		at := time.Duration(math.Round(t * 1e9))
		if at >= c.Duration {
			break
		}
		out = append(out, at)
	}
	return out
}

// plan starts the run's flows and returns the requests' arrival times.
func (r *onrampRunner) plan(ctx context.Context, cc string, runSeed uint64, t0 time.Time, set *orFlowSet) ([]time.Duration, int, error) {
	c := r.ocfg
	timeout := c.Duration + drainGrace
	dst := r.sink.Addr
	n := 0
	seed := func() uint64 { n++; return runSeed*1_000_003 + uint64(n) }
	if !c.NoLongFlow {
		set.start(ctx, t0, 0, r.bg[0], dst, orFlow{kind: orLong}, testbed.FlowConfig{
			CC: cc, For: c.Duration, Seed: seed(), Timeout: timeout, SampleEvery: onrampLongFlowSampleEvery})
	}
	sizes := workload.WebSearch()
	if c.Quick {
		sizes = sizes.Truncated(quickMaxFlowBytes)
	}
	arr, err := workload.Arrivals(workload.ArrivalConfig{
		Load: c.Load, LinkBps: float64(c.RateBps), Sizes: sizes, Senders: len(r.bg),
		Duration: c.Duration, MaxFlows: maxWebsearchFlows, Seed: runSeed,
	})
	if err != nil {
		return nil, n, fmt.Errorf("web-search arrivals: %w", err)
	}
	for _, a := range arr {
		set.start(ctx, t0, a.At, r.bg[a.Sender], dst, orFlow{kind: orBackground}, testbed.FlowConfig{
			CC: cc, Bytes: a.Bytes, Seed: seed(), Timeout: timeout})
	}
	reqs := c.requestArrivals(runSeed)
	if c.NewConnPerResponse {
		for k, at := range reqs {
			for _, s := range r.servers {
				set.start(ctx, t0, at, s, dst, orFlow{kind: orResponse, request: k}, testbed.FlowConfig{
					CC: cc, Bytes: c.ResponseBytes, Seed: seed(), Timeout: timeout})
			}
		}
		return reqs, n, nil
	}
	// n counts each server's connection (its seed) and, below, every
	// response on it.
	for _, s := range r.servers {
		set.serve(ctx, t0, t0.Add(timeout), s, dst, cc, seed(), reqs, c.ResponseBytes)
	}
	n += len(reqs) * len(r.servers)
	return reqs, n, nil
}

// traffic runs one run's traffic, with On-Ramp in the state the variant
// asks, and measures it.
func (r *onrampRunner) traffic(ctx context.Context, v onrampVariant, seed uint64) (out onrampOut, err error) {
	c := r.ocfg
	res := &out.res
	res.Seed, res.DurationMillis = seed, float64(c.Duration)/float64(time.Millisecond)
	closeSink, err := r.startSink(ctx, v.cc)
	if err != nil {
		return out, err
	}
	defer closeSink()
	cpuBefore, cpuErr := readCPUTimes()
	runtimeBefore := readRuntime()
	backlogBefore, backlogErr := readBacklogDrops()
	senders := append(slices.Clone(r.servers), r.bg...)
	tcpExtBefore, err := sumTCPExt(senders)
	if err != nil {
		return out, err
	}
	countersBefore := r.ccCounters(v.cc)
	defer func() {
		if err == nil {
			res.CCCounters = counterDelta(countersBefore, r.ccCounters(v.cc))
		}
	}()
	var progsBefore map[ebpf.ProgramID]progCounter
	if r.costs != nil {
		progsBefore = r.costs.snapshot()
	}
	progsFrom := time.Now()

	span := c.Duration + drainGrace + 5*time.Second
	sctx, stop := context.WithTimeout(ctx, span)
	defer stop()
	sampleStart := time.Now()
	queueCh, err := testbed.SampleQueue(sctx, r.topo.Router, r.topo.BottleneckIface, c.SampleInterval, int(span/c.SampleInterval)+1)
	if err != nil {
		return out, fmt.Errorf("sample the bottleneck queue: %w", err)
	}
	t0 := time.Now()
	var set orFlowSet
	reqs, n, err := r.plan(sctx, v.cc, seed, t0, &set)
	if err != nil {
		stop()
		<-queueCh
		set.wait()
		return out, err
	}
	done := make(chan []orFlow, 1)
	go func() { done <- set.wait() }()
	var flows []orFlow
	tick := time.NewTicker(progressEvery)
	for flows == nil {
		select {
		case flows = <-done:
		case <-tick.C:
			r.say("      %s: %v of %v, %d/%d flows done", v, time.Since(t0).Round(time.Second), c.Duration, set.done(), n)
		}
	}
	tick.Stop()
	stop()
	samples := <-queueCh
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	var progsOver time.Duration
	if r.costs != nil {
		res.BPF, progsOver = mergePrograms(r.costs.since(progsBefore)), time.Since(progsFrom)
	}
	if v.onramp {
		if res.OnRamp, err = r.onrampStatus(); err != nil {
			return out, err
		}
		if r.costs != nil {
			b := onrampBPFBusy(res.BPF, progsOver, runtime.NumCPU())
			res.OnRamp.BPFBusy = &b
			res.OnRamp.TCFloorNsPerRun = floorNsPerRun(res.BPF, tcFloorName, ProgramTC)
			res.OnRamp.SockopsFloorNsPerRun = floorNsPerRun(res.BPF, sockopsFloorName, ProgramSockOps)
		}
	}

	offset := t0.Sub(sampleStart)
	backlog := backlogSeries(samples, offset)
	kernelCCs := map[string]bool{}
	type request struct {
		done, failed    int
		last, lastBegin time.Duration
		slowest         time.Duration // the largest response FCT
		rto, retrans    bool          // a response hit an RTO, or retransmitted
	}
	byReq := make([]request, len(reqs))
	var lags []float64
	for _, f := range flows {
		if f.err == nil && f.res.CC != "" {
			kernelCCs[f.res.CC] = true
		}
		if f.err == nil && f.res.Info != nil {
			res.Retransmits += uint64(f.res.Info.Total_retrans)
			res.RTOs += uint64(f.res.Info.Total_rto)
			res.DSACKDups += uint64(f.res.Info.Dsack_dups)
		}
		if f.kind == orResponseConn {
			// Its responses are counted on their own; the connection
			// adds only its counters, above.
			res.ResponseConns++
			if f.err != nil {
				res.ResponseConnsFailed++
			}
			continue
		}
		fct := f.res.AckedIn
		if f.err == nil && f.kind != orLong && fct <= 0 {
			fct = f.res.Duration
			res.FCTsByAppClock++
		}
		switch f.kind {
		case orLong:
			if f.err != nil {
				res.LongFlowFailed = true
				continue
			}
			res.LongFlowBps = longFlowRate(f, c.Duration/10, c.Duration)
			res.LongFlow = longFlowState(f, c.Duration/10, c.Duration)
		case orBackground:
			res.BackgroundFlows++
			if f.err != nil {
				res.BackgroundFailed++
				continue
			}
			x := stats.FCT{Bytes: f.bytes, Duration: fct}
			if q, ok := stats.MaxDuring(backlog, f.begin, f.begin+f.res.Duration); ok {
				x.QueueDelay, x.Queued = stats.LineTime(q, float64(c.RateBps)), true
			}
			out.fcts = append(out.fcts, x)
		case orResponse:
			res.Responses++
			q := &byReq[f.request]
			q.lastBegin = max(q.lastBegin, f.begin)
			if f.err != nil {
				res.ResponsesFailed++
				q.failed++
				continue
			}
			q.done++
			q.last = max(q.last, f.begin+fct)
			q.slowest = max(q.slowest, fct)
			q.rto, q.retrans = q.rto || f.rto, q.retrans || f.retrans
		}
	}
	res.Requests = len(reqs)
	for k, q := range byReq {
		lag := float64(q.lastBegin-reqs[k]) / float64(time.Microsecond)
		lags = append(lags, lag)
		if q.failed > 0 || q.done != c.Fanout {
			continue
		}
		res.RequestsCompleted++
		rct := float64(q.last-reqs[k]) / float64(time.Microsecond)
		out.rcts = append(out.rcts, rct)
		out.netRCTs = append(out.netRCTs, float64(q.slowest)/float64(time.Microsecond))
		out.reqs = append(out.reqs, requestDetail{rctUs: rct, lagUs: lag, rto: q.rto, retrans: q.retrans})
	}
	if len(out.rcts) > 0 {
		s := stats.Sorted(out.rcts)
		res.RCTP50Us, res.RCTP99Us, res.RCTMaxUs = stats.Percentile(s, 50), stats.Percentile(s, 99), s[len(s)-1]
		n := stats.Sorted(out.netRCTs)
		res.NetRCTP50Us, res.NetRCTP99Us = stats.Percentile(n, 50), stats.Percentile(n, 99)
	}
	if len(lags) > 0 {
		res.StartLagP99Us = stats.Percentile(stats.Sorted(lags), 99)
	}
	for _, x := range r.sink.Results() {
		res.SinkResults++
		if !x.OK {
			res.SinkBad++
		}
	}
	if res.Responses > 0 && res.ResponsesFailed == res.Responses {
		return out, fmt.Errorf("all %d responses failed; first: %v", res.Responses, firstOnRampErr(flows))
	}
	res.KernelCCs = []string{}
	for k := range kernelCCs {
		res.KernelCCs = append(res.KernelCCs, k)
	}
	slices.Sort(res.KernelCCs)

	var q RunResult
	r.queueMetrics(&q, &ccSeries{}, samples, offset)
	res.ThroughputBps, res.Utilization = q.ThroughputBps, q.Utilization
	res.QueueP50Bytes, res.QueueP99Bytes, res.QueueMaxBytes, res.QueueSamples = q.QueueP50Bytes, q.QueueP99Bytes, q.QueueMaxBytes, q.QueueSamples
	res.Drops = q.Drops
	res.FCT = fctBuckets(out.fcts, r.idealFCT)
	if cpuErr == nil {
		if after, err := readCPUTimes(); err == nil {
			res.CPUBusy = after.busySince(cpuBefore)
		}
	}
	rt := readRuntime().since(runtimeBefore)
	res.Runtime = &rt
	if backlogErr == nil {
		if after, err := readBacklogDrops(); err == nil && after >= backlogBefore {
			res.BacklogDrops = after - backlogBefore
		}
	}
	tcpExtAfter, err := sumTCPExt(senders)
	if err != nil {
		return out, err
	}
	res.TCPExt = counterDelta(tcpExtBefore, tcpExtAfter)
	return out, nil
}

// longFlowState is the long flow's window and RTT, from its TCP_INFO
// samples between from and to after the run's start, and its limits,
// from its last TCP_INFO; nil without samples.
func longFlowState(f orFlow, from, to time.Duration) *LongFlowState {
	var cwnds, rtts []float64
	for _, x := range f.res.Samples {
		if at := f.begin + x.At; at >= from && at <= to {
			cwnds = append(cwnds, float64(x.Cwnd))
			rtts = append(rtts, float64(x.RTT)/float64(time.Microsecond))
		}
	}
	if len(cwnds) == 0 {
		return nil
	}
	out := &LongFlowState{CwndP50: stats.Percentile(stats.Sorted(cwnds), 50), SRTTP50Us: stats.Percentile(stats.Sorted(rtts), 50)}
	if i := f.res.Info; i != nil {
		out.MSS = i.Snd_mss
		out.BusyMs = float64(i.Busy_time) / 1e3
		out.RwndLimitedMs = float64(i.Rwnd_limited) / 1e3
		out.SndbufLimitedMs = float64(i.Sndbuf_limited) / 1e3
	}
	return out
}

// longFlowRate is the long flow's throughput between from and to after
// the run's start, from its TCP_INFO samples of bytes acked: the first
// sample at or after from, the last at or before to.
func longFlowRate(f orFlow, from, to time.Duration) float64 {
	var first, last *testbed.FlowSample
	for i := range f.res.Samples {
		x := &f.res.Samples[i]
		at := f.begin + x.At
		if at >= from && first == nil {
			first = x
		}
		if at <= to {
			last = x
		}
	}
	if first == nil || last == nil || last.At <= first.At || last.BytesAcked < first.BytesAcked {
		return 0
	}
	return float64(last.BytesAcked-first.BytesAcked) * 8 / (last.At - first.At).Seconds()
}

// fctBuckets summarises one run's FCTs by size bucket, the buckets with
// flows only.
func fctBuckets(fcts []stats.FCT, ideal func(int64) time.Duration) []FCTBucket {
	out := []FCTBucket{}
	for _, b := range stats.Buckets(fcts, ideal) {
		if b.Count == 0 {
			continue
		}
		out = append(out, FCTBucket{Bucket: b.Name, Count: b.Count, MeanUs: b.MeanUs, P50Us: b.P50Us, P99Us: b.P99Us,
			P999Us: b.P999Us, SlowdownP50: b.P50Slowdown, SlowdownP99: b.P99Slowdown, SlowdownP999: b.P999Slowdown})
	}
	return out
}

func firstOnRampErr(flows []orFlow) error {
	for _, f := range flows {
		if f.err != nil {
			return f.err
		}
	}
	return errors.New("none recorded")
}

// onrampSummaryLine is a run's progress line.
func onrampSummaryLine(x OnRampRun) string {
	s := fmt.Sprintf("%d/%d requests, RCT p50 %.1f ms p99 %.1f ms", x.RequestsCompleted, x.Requests, x.RCTP50Us/1e3, x.RCTP99Us/1e3)
	if x.ranLongFlow() {
		s += fmt.Sprintf(", long flow %.1f Mbit/s", x.LongFlowBps/1e6)
	}
	s += fmt.Sprintf(", queue p99 %.0f KB, %d drops (%d more at CPU backlogs), %d retransmits, %d RTOs",
		x.QueueP99Bytes/1e3, x.Drops, x.BacklogDrops, x.Retransmits, x.RTOs)
	if e := x.TCPExt; e != nil {
		s += fmt.Sprintf(", %d loss probes, %d recoveries (%d undone)", e["TCPLossProbes"],
			sumOf(e, tcpExtRecoveries()...), sumOf(e, tcpExtUndos()...))
	}
	if o := x.OnRamp; o != nil {
		s += fmt.Sprintf(", %d pauses (%.2f s)", o.Pauses, o.PauseSeconds)
	}
	if rt := x.Runtime; rt != nil {
		s += fmt.Sprintf(", bench process: goroutines waited p99 %.1f ms max %.1f ms, %d GCs (longest pause %.1f ms), %.0f MB allocated",
			rt.SchedLatencyP99Us/1e3, rt.SchedLatencyMaxUs/1e3, rt.GCCycles, rt.GCPauseMaxUs/1e3, rt.AllocatedMB)
	}
	if failed := x.ResponsesFailed + x.BackgroundFailed + x.SinkBad; failed > 0 || x.LongFlowFailed {
		s += fmt.Sprintf(", %d FAILED", failed)
	}
	return s
}
