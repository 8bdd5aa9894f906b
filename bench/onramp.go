package bench

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ccload/ccload/onramp"
	"github.com/ccload/ccload/qdisc"
)

// The onramp scenario: On-Ramp (package onramp) under each CC, measured
// as the paper measures it (NSDI'21, §5): incast request–response traffic
// over web-search background load, each CC run once without On-Ramp and
// once with it, with the same traffic, on the same topology, fq on every
// sender's uplink in both runs, so that only On-Ramp's pauses differ.
//
// Topology: a dumbbell of Fanout incast servers plus BackgroundSenders
// background senders, one router and one client (the receiver) behind a
// bottleneck of RateBps with a BufferBytes queue. Every sender's uplink
// has an fq root qdisc and a GSO size of GSOBytes: with earliest
// departure times a pause holds only what reaches fq after it, and TCP
// small queues lets a flow keep about two GSO packets in fq, so the GSO
// size bounds how tight a pause is (docs/onramp.md). fq also caps each
// flow at SenderRateBps (its maxrate), the bottleneck's rate by default:
// a host's NIC in a fabric of equal links. Without it a sender's veth
// sends as fast as the CPU goes, and one cubic flow alone, paced at
// about twice its delivery rate, builds a queue at the bottleneck that
// no datacenter host could build on its own (docs/benchmarks.md). The cap
// is per flow, not per host: a sender with several flows may exceed it.
//
// Traffic, per run:
//   - requests arrive as a Poisson process at IncastLoad of the
//     bottleneck, after the first tenth of the run; each asks all Fanout
//     servers at once for ResponseBytes, from server to client. Each
//     server sends its responses on one TCP connection that it keeps
//     open for the run, starting each at its request's arrival, or once
//     the one before it is acknowledged if that is later
//     (NewConnPerResponse: a connection per response, opened at the
//     arrival). Its request completion time (RCT) runs from the arrival
//     to the kernel's timestamp of the ACK of the last response's last
//     byte;
//   - web-search flows (workload.WebSearch, capped at 1 MB with Quick)
//     from the background senders to the client, Poisson at Load;
//   - one long flow from the first background sender for the whole run,
//     whose throughput after the first tenth is the long-flow throughput
//     (left out with NoLongFlow).
//
// Every flow runs the CC under test. The hosts share the kernel's clock,
// so every clock offset is 0 (clocksync.PublishFixed). With On-Ramp, it is
// enabled on every sender's uplink and on the client's interface before
// the run's traffic, its counters are read after it, and it is disabled
// and checked gone before the next run.

// ScenarioOnRamp is On-Ramp's scenario; it runs apart from the CC
// scenarios (RunOnRamp), and `--scenario all` does not include it: it
// needs sch_fq.
const ScenarioOnRamp = "onramp"

// Defaults of OnRampConfig, for a 100 Mbit/s bottleneck, which a QEMU TCG
// guest sustains.
const (
	DefaultOnRampRateBps = 100_000_000
	// DefaultOnRampBufferBytes holds one incast's initial windows (16
	// new connections of 10 segments: 232 KB) four times over, 84 ms at
	// 100 Mbit/s. A datacenter switch's buffer holds them many times (the
	// On-Ramp paper's CloudLab ToRs: 9 MB, 15 times its 40 initial
	// windows). 256 KiB, the default before, held them once, and only on
	// an empty queue: every incast that met any standing queue lost
	// packets of its first windows, which no pause at the sender can hold
	// back, since a new connection sends its first window before its
	// first echo (docs/benchmarks.md, On-Ramp).
	DefaultOnRampBufferBytes = 1 << 20
	// DefaultOnRampECNBytes is DCTCP's K: 1.6 ms at 100 Mbit/s, under T,
	// so that DCTCP keeps its queue below On-Ramp's threshold and On-Ramp
	// acts on transients only.
	DefaultOnRampECNBytes   = 20_000
	DefaultOnRampFanout     = 16
	DefaultOnRampResponse   = 64 << 10
	DefaultOnRampIncastLoad = 0.2
	DefaultOnRampLoad       = 0.4
	DefaultOnRampBackground = 4
	DefaultOnRampGSOBytes   = 8 << 10
	DefaultOnRampThreshold  = 2 * time.Millisecond
	DefaultOnRampMaxPause   = 100 * time.Millisecond
	// DefaultOnRampSampleEvery is coarser than the other scenarios'
	// 100us: each sample is a netlink dump of the bottleneck's qdisc by
	// the process that starts the flows, and in a TCG guest sampling
	// every 1 ms kept its CPUs about 15 points busier and delayed the
	// responses' starts (docs/benchmarks.md, On-Ramp). The queue's
	// percentiles need many samples, not fine ones: a 30 s run still
	// takes 3,000.
	DefaultOnRampSampleEvery = 10 * time.Millisecond
	defaultOnRampDuration    = 15 * time.Second
	quickOnRampDuration      = 4 * time.Second
	maxOnRampRequests        = 5000
	quickOnRampRequests      = 8
	// A quick run has fewer servers and background senders: enabling
	// On-Ramp verifies its programs once per interface, seconds each in
	// a TCG guest.
	quickOnRampFanout         = 8
	quickOnRampBackground     = 2
	onrampLongFlowSampleEvery = 20 * time.Millisecond
	// onrampWorseMargin is how much higher a tail must be with On-Ramp
	// than without before the comparison calls it worse: the runs of a
	// few minutes in a TCG guest scatter by that much.
	onrampWorseMargin = 0.10
	// onrampIntervalDraws and onrampIntervalLevel are how the comparison
	// bootstraps each tail ratio over the repeats
	// (stats.PairedTailRatioInterval): 1,000 resamples, the middle 95 %.
	// onrampIntervalSeed fixes the resamples, so that the same runs give
	// the same intervals.
	onrampIntervalDraws = 1000
	onrampIntervalLevel = 0.95
	onrampIntervalSeed  = 1
)

// Targets of the On-Ramp issue, recorded in the results.
const (
	// OnRampTargetRCTRatio is the least RCT p99 without/with On-Ramp
	// asked of cubic.
	OnRampTargetRCTRatio = 3.0
	// OnRampTargetCC is the CC the RCT target is for.
	OnRampTargetCC = "cubic"
	// OnRampTargetLongFlowLoss is the largest long-flow throughput loss
	// with On-Ramp asked of every CC.
	OnRampTargetLongFlowLoss = 0.05
)

// DefaultOnRampCCs is the CC list of an onramp run that names none.
func DefaultOnRampCCs() []string { return []string{"cubic", "bbr", "bpf_dctcp", "theta_powertcp"} }

// OnRampConfig is one onramp benchmark.
type OnRampConfig struct {
	// CCs run one after the other, each once without and once with
	// On-Ramp per repeat.
	CCs []string
	// Repeat is how many times every variant runs; the runs interleave
	// (runOrder over the variants) and repeat i uses Seed+i for all.
	Repeat int
	// Duration is each run's traffic time.
	Duration time.Duration
	// Quick shortens the run for smoke tests: Duration 4 s, at most 8
	// requests a run, web-search flows capped at 1 MB, and unless given,
	// 8 servers and 2 background senders.
	Quick bool
	// RateBps and BufferBytes shape the bottleneck.
	RateBps     uint64
	BufferBytes uint32
	// ECNThresholdBytes is where CE marking starts (DCTCP's K), for the
	// CCs that ask for ECN; NoECN turns marking off. Marker is MarkerHop
	// or MarkerFQCodel, as in Config.
	ECNThresholdBytes uint32
	NoECN             bool
	Marker            string
	// Fanout is the number of incast servers, and ResponseBytes each
	// one's response.
	Fanout        int
	ResponseBytes int64
	// IncastLoad is the requests' offered load, a fraction of the
	// bottleneck: requests arrive at IncastLoad·RateBps/(8·Fanout·
	// ResponseBytes) per second.
	IncastLoad float64
	// Load is the web-search background load, a fraction of the
	// bottleneck; BackgroundSenders send it (the first also sends the
	// long flow).
	Load              float64
	BackgroundSenders int
	// NewConnPerResponse sends each response on a connection of its own,
	// opened at the request's arrival, as the bench did before. By
	// default each server keeps one connection to the client open for
	// the run and answers its requests on it in order: no handshake and
	// no connection setup per response, for the network or for the
	// process that starts the flows.
	NewConnPerResponse bool
	// NoLongFlow leaves out the long flow that the first background
	// sender otherwise sends for the whole run, as in the On-Ramp paper's
	// basic scenario, whose only long flows are web-search's largest.
	// The long-flow figures and target are then not measured.
	NoLongFlow bool
	// GSOBytes is the GSO size of every sender's uplink.
	GSOBytes uint32
	// SenderRateBps is the most each flow may send, in bits/s: fq's
	// maxrate on every sender's uplink, standing in for the sender's NIC
	// (0: RateBps). UnlimitedSenders leaves it out, so that a flow may
	// send as fast as its veth goes, as the bench did before the cap.
	SenderRateBps    uint64
	UnlimitedSenders bool
	// Threshold (T), MaxPause and Gain are On-Ramp's parameters (0 means
	// onramp.DefaultGain for Gain).
	Threshold time.Duration
	MaxPause  time.Duration
	Gain      float64
	// BPFCosts times every BPF program with the kernel's BPF statistics
	// and records the programs' costs (OnRampRun.BPF) and On-Ramp's
	// share of the CPUs (OnRampCounters.BPFBusy), and in the runs with
	// On-Ramp runs a tc and a sockops program that do nothing where
	// On-Ramp's programs run, to time a run there that does no work
	// (OnRampCounters.TCFloorNsPerRun, SockopsFloorNsPerRun). Off by
	// default: the statistics add two clock reads to every program run,
	// which changes what the run measures (docs/benchmarks.md, On-Ramp).
	BPFCosts bool
	// CCHolds attaches the CCs that have the parameter onramp_holds
	// (theta_powertcp, powertcp) with it set, so that they take On-Ramp's
	// holds out of their RTT samples (docs/onramp.md). Like host_bw, it
	// only reaches a CC the bench attaches itself.
	CCHolds bool
	// CCParams are parameters for ccload's CCs that the bench attaches,
	// by CC (--cc-param), over the scenario's own (host_bw,
	// onramp_holds). A CC that is attached already keeps its user's
	// parameters, and may have none here.
	CCParams map[string]map[string]string
	// Strawman runs On-Ramp's strawman (the paper's §3.1: pause O - T,
	// without lag compensation) instead of its final algorithm, to
	// compare the two (onramp.Config.Strawman).
	Strawman bool
	// Observe runs On-Ramp in observe mode (onramp.Config.Observe): it
	// stamps, measures and echoes, and pauses nothing, so that the runs
	// with it differ from those without by its presence alone, and report
	// the share of echoes above T.
	Observe bool
	// StampEveryPacket has On-Ramp stamp every data segment, as before
	// sparse stamps (onramp.Config.StampEveryPacket), to compare the two.
	StampEveryPacket bool
	// SampleInterval is the bottleneck queue's sampling interval.
	SampleInterval time.Duration
	// Seed is the workload seed of the first repeat.
	Seed uint64
	// Prefix is the netns name prefix.
	Prefix string
	// Command is the command line, recorded in the results.
	Command string
}

func (c OnRampConfig) withDefaults() OnRampConfig {
	if len(c.CCs) == 0 {
		c.CCs = DefaultOnRampCCs()
	}
	if c.Repeat == 0 {
		c.Repeat = 1
	}
	if c.Duration == 0 {
		c.Duration = defaultOnRampDuration
		if c.Quick {
			c.Duration = quickOnRampDuration
		}
	}
	if c.RateBps == 0 {
		c.RateBps = DefaultOnRampRateBps
	}
	if c.BufferBytes == 0 {
		c.BufferBytes = DefaultOnRampBufferBytes
	}
	if c.ECNThresholdBytes == 0 {
		c.ECNThresholdBytes = DefaultOnRampECNBytes
	}
	if c.NoECN {
		c.ECNThresholdBytes = 0
	}
	if c.Marker == "" {
		c.Marker = MarkerHop
	}
	if c.Fanout == 0 {
		c.Fanout = DefaultOnRampFanout
		if c.Quick {
			c.Fanout = quickOnRampFanout
		}
	}
	if c.ResponseBytes == 0 {
		c.ResponseBytes = DefaultOnRampResponse
	}
	if c.IncastLoad == 0 {
		c.IncastLoad = DefaultOnRampIncastLoad
	}
	if c.Load == 0 {
		c.Load = DefaultOnRampLoad
	}
	if c.BackgroundSenders == 0 {
		c.BackgroundSenders = DefaultOnRampBackground
		if c.Quick {
			c.BackgroundSenders = quickOnRampBackground
		}
	}
	if c.GSOBytes == 0 {
		c.GSOBytes = DefaultOnRampGSOBytes
	}
	switch {
	case c.UnlimitedSenders:
		c.SenderRateBps = 0
	case c.SenderRateBps == 0:
		c.SenderRateBps = c.RateBps
	}
	if c.Threshold == 0 {
		c.Threshold = DefaultOnRampThreshold
	}
	if c.MaxPause == 0 {
		c.MaxPause = DefaultOnRampMaxPause
	}
	if c.Gain == 0 {
		c.Gain = onramp.DefaultGain
	}
	if c.SampleInterval == 0 {
		c.SampleInterval = DefaultOnRampSampleEvery
	}
	if c.Seed == 0 {
		c.Seed = DefaultSeed
	}
	if c.Prefix == "" {
		c.Prefix = "cco"
	}
	return c
}

// Validate checks the configuration, defaults filled in. Its errors name
// the flags of `ccload bench --scenario onramp`.
func (c OnRampConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	seen := map[string]bool{}
	for _, cc := range c.CCs {
		if cc == "" || seen[cc] || strings.Contains(cc, "+") {
			errs = append(errs, fmt.Errorf("--cc %q: names must be non-empty, distinct, and without '+'", strings.Join(c.CCs, ",")))
			break
		}
		seen[cc] = true
	}
	if c.Repeat < 1 || c.Repeat > MaxRepeat {
		errs = append(errs, fmt.Errorf("--repeat %d: give 1 to %d", c.Repeat, MaxRepeat))
	}
	if c.Duration < 2*time.Second || c.Duration > 10*time.Minute {
		errs = append(errs, fmt.Errorf("--duration %v: give 2s to 10m per run", c.Duration))
	}
	if c.RateBps < 1_000_000 || c.RateBps > 10_000_000_000 {
		errs = append(errs, fmt.Errorf("--rate %d bit/s: give 1mbit to 10gbit (100mbit is what a TCG guest sustains)", c.RateBps))
	}
	if c.BufferBytes < 16<<10 || c.BufferBytes > 64<<20 {
		errs = append(errs, fmt.Errorf("--buffer %d: give 16KiB to 64MiB", c.BufferBytes))
	}
	switch {
	case c.Marker != MarkerHop && c.Marker != MarkerFQCodel:
		errs = append(errs, fmt.Errorf("--marker %q: use %s (the INT hop) or %s (the bottleneck's AQM)", c.Marker, MarkerHop, MarkerFQCodel))
	case c.Marker == MarkerFQCodel && c.ECNThresholdBytes == 0:
		errs = append(errs, fmt.Errorf("--marker %s with no ECN threshold: give --ecn-threshold above 0", MarkerFQCodel))
	}
	if c.Fanout < 1 || c.Fanout > 64 {
		errs = append(errs, fmt.Errorf("--fanout %d: give 1 to 64 incast servers", c.Fanout))
	}
	if c.ResponseBytes < 1 || c.ResponseBytes > 64<<20 {
		errs = append(errs, fmt.Errorf("--incast-size %d: give 1 byte to 64 MiB per response", c.ResponseBytes))
	}
	if !(c.IncastLoad > 0 && c.IncastLoad < 1) {
		errs = append(errs, fmt.Errorf("--incast-load %g: give a fraction of the bottleneck in (0, 1)", c.IncastLoad))
	}
	if !(c.Load > 0 && c.Load < 1) {
		errs = append(errs, fmt.Errorf("--load %g: give the background load as a fraction of the bottleneck in (0, 1)", c.Load))
	} else if c.Load+c.IncastLoad >= 1 {
		errs = append(errs, fmt.Errorf("--load %g plus --incast-load %g: together they must stay below 1, leaving room for the long flow", c.Load, c.IncastLoad))
	}
	if c.BackgroundSenders < 1 || c.BackgroundSenders > 32 {
		errs = append(errs, fmt.Errorf("--senders %d: give 1 to 32 background senders", c.BackgroundSenders))
	}
	if c.GSOBytes < 1500 || c.GSOBytes > 65536 {
		errs = append(errs, fmt.Errorf("--gso %d: give 1500 bytes to 64KiB", c.GSOBytes))
	}
	if !c.UnlimitedSenders && (c.SenderRateBps < 1_000_000 || c.SenderRateBps > maxSenderRateBps) {
		errs = append(errs, fmt.Errorf("--sender-rate %d bit/s: give 1mbit to 32gbit (fq's per-flow maxrate), or none", c.SenderRateBps))
	}
	if c.Threshold < time.Microsecond || c.Threshold > time.Second {
		errs = append(errs, fmt.Errorf("--onramp-threshold %v: give 1us to 1s", c.Threshold))
	}
	if c.MaxPause < time.Microsecond || c.MaxPause > 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("--onramp-max-pause %v: give 1us to 100ms", c.MaxPause))
	}
	if math.IsNaN(c.Gain) || c.Gain <= 0 || c.Gain > 1 {
		errs = append(errs, fmt.Errorf("On-Ramp gain %v: give (0, 1]", c.Gain))
	}
	if c.Observe && (c.Strawman || c.CCHolds) {
		errs = append(errs, errors.New("--onramp-observe pauses nothing: leave out --onramp-strawman and --onramp-cc-holds, which change how pauses work"))
	}
	if c.SampleInterval < 50*time.Microsecond || c.SampleInterval > 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("--sample-interval %v: give 50us to 100ms", c.SampleInterval))
	}
	return errors.Join(errs...)
}

// longFlows is how many long flows a run has: 1, or 0 with NoLongFlow.
func (c OnRampConfig) longFlows() int {
	if c.NoLongFlow {
		return 0
	}
	return 1
}

// responseConns names how the servers send their responses, for the
// results: "new" or "persistent".
func (c OnRampConfig) responseConns() string {
	if c.NewConnPerResponse {
		return "new"
	}
	return "persistent"
}

// maxSenderRateBps is the largest flow cap fq takes: its maxrate is a
// 32-bit count of bytes per second.
const maxSenderRateBps = 32_000_000_000

// senderFQ is the fq options of every sender's uplink.
func (c OnRampConfig) senderFQ() qdisc.FQConfig {
	return qdisc.FQConfig{FlowMaxRateBps: c.SenderRateBps}
}

// hostBWBps is the NIC rate the CCs with a host_bw are given: the flows'
// cap, or the bottleneck's rate without one.
func (c OnRampConfig) hostBWBps() uint64 {
	if c.SenderRateBps > 0 {
		return c.SenderRateBps
	}
	return c.RateBps
}

// senderRateText says how fast a sender's flows may go: "flows at most
// RATE", or "flows uncapped" for 0.
func senderRateText(bps uint64) string {
	if bps == 0 {
		return "flows uncapped"
	}
	return "flows at most " + formatRate(float64(bps))
}

// requestRate is the requests' arrival rate, per second.
func (c OnRampConfig) requestRate() float64 {
	return c.IncastLoad * float64(c.RateBps) / (8 * float64(c.Fanout) * float64(c.ResponseBytes))
}

// maxRequests bounds the requests of one run.
func (c OnRampConfig) maxRequests() int {
	if c.Quick {
		return quickOnRampRequests
	}
	return maxOnRampRequests
}

// onrampVariant is one of a run's configurations: a CC, with or without
// On-Ramp.
type onrampVariant struct {
	cc     string
	onramp bool
}

func (v onrampVariant) String() string {
	if v.onramp {
		return v.cc + "+onramp"
	}
	return v.cc
}

// variants lists, for each CC, its run without On-Ramp and then with it.
func (c OnRampConfig) variants() []onrampVariant {
	var out []onrampVariant
	for _, cc := range c.CCs {
		out = append(out, onrampVariant{cc, false}, onrampVariant{cc, true})
	}
	return out
}

// variantNames are the variants' names, for runOrder.
func variantNames(vs []onrampVariant) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.String()
	}
	return out
}

// variantByName finds a variant by its name.
func variantByName(vs []onrampVariant, name string) onrampVariant {
	i := slices.IndexFunc(vs, func(v onrampVariant) bool { return v.String() == name })
	return vs[i]
}
