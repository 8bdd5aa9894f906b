package bench

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ccload/ccload/telemetry/sockops"
)

// Scenario names.
const (
	// ScenarioLongflow is one long flow alone on the bottleneck.
	ScenarioLongflow = "longflow"
	// ScenarioIncast is a long flow plus repeated incasts: Fanout senders
	// each send IncastBytes to the same receiver at the same moment.
	ScenarioIncast = "incast"
	// ScenarioWebsearch is Poisson arrivals of web-search sized flows at a
	// target load.
	ScenarioWebsearch = "websearch"
	// ScenarioFairness is flows that join one by one and then leave one
	// by one, as in the PowerTCP paper's Figure 5.
	ScenarioFairness = "fairness"
)

// Scenarios lists the scenario names, in the order `--scenario all` runs
// them.
func Scenarios() []string {
	return []string{ScenarioLongflow, ScenarioIncast, ScenarioWebsearch, ScenarioFairness}
}

// Config is one benchmark run: one scenario, several CCs.
type Config struct {
	// Scenario is one of Scenarios().
	Scenario string
	// CCs are run one after the other on the same topology. Kernel CCs
	// (cubic, bbr, reno, dctcp, ...) and ccload's built-in CCs are both
	// accepted; built-in ones are attached for the run if they are not
	// attached already, and detached afterwards.
	CCs []string
	// CCParams are parameters for ccload's CCs that the bench attaches,
	// by CC (--cc-param), over the scenario's own (host_bw). A CC that is
	// attached already keeps its user's parameters, and may have none here.
	CCParams map[string]map[string]string
	// Load is the websearch scenario's offered load, a fraction of the
	// bottleneck rate in (0, 1].
	Load float64
	// Duration is how long each CC's traffic runs.
	Duration time.Duration
	// Quick shortens the scenario for smoke runs: shorter durations,
	// fewer senders, web-search flows capped at 1 MB.
	Quick bool
	// RateBps and BufferBytes are the bottleneck's rate and queue limit.
	RateBps     uint64
	BufferBytes uint32
	// ECNThresholdBytes is where the INT hop marks CE (DCTCP's K); 0 means
	// DefaultECNThresholdBytes.
	ECNThresholdBytes uint32
	// NoECN turns CE marking off.
	NoECN bool
	// Marker is what marks CE at ECNThresholdBytes: MarkerHop (the INT
	// hop's model of the queue, the default) or MarkerFQCodel (the
	// bottleneck's leaf is fq_codel with ce_threshold K·8/rate, a real AQM;
	// it needs CONFIG_NET_SCH_FQ_CODEL).
	Marker string
	// ACKPadding makes the INT hop refresh its record on returning ACKs.
	ACKPadding bool
	// INTTag is which data skbs INT's sockops program tags for the CCs
	// that use INT, as `ccload int enable --tag` takes it: "every" (the
	// default), "nth=N" or "tso-head" (sockops.ParseTag).
	INTTag string
	// Fanout and IncastBytes shape the incast scenario.
	Fanout      int
	IncastBytes int64
	// Senders is the number of sender hosts of the websearch scenario.
	Senders int
	// Flows is the number of flows of the fairness scenario.
	Flows int
	// SampleInterval is the queue sampling interval.
	SampleInterval time.Duration
	// Seed makes the workload repeatable: repeat i of a run uses Seed+i
	// for every CC, so that each repeat is new traffic and every CC meets
	// the same traffic in it.
	Seed uint64
	// Repeat is how many times every CC runs the scenario; the runs
	// interleave (runOrder), and results report medians and spreads over
	// them, with flow completion times pooled.
	Repeat int
	// Prefix is the netns name prefix of the topology.
	Prefix string
	// ControlPlaneExe, when not "", is a ccload executable whose attach,
	// set and detach of theta_powertcp Run times ControlPlaneRuns times
	// each, as whole processes, before it attaches anything
	// (MeasureControlPlane).
	ControlPlaneExe  string
	ControlPlaneRuns int
	// KeepCPUsAwake runs one SCHED_IDLE spinner per CPU (SpinExe spin)
	// while the CCs run, so that the per-ACK costs are those of CPUs that
	// never halt (awake.go). The CPU column then counts the spinners too.
	KeepCPUsAwake bool
	// SpinExe is the ccload executable that runs the spinners.
	SpinExe string
}

// Defaults of Config, used where a field is zero.
const (
	DefaultRateBps           = 1_000_000_000
	DefaultBufferBytes       = 1 << 20
	DefaultECNThresholdBytes = 30_000
	// DefaultINTTag tags every data skb, as `ccload int enable` does.
	DefaultINTTag = "every"
	// MarkerHop and MarkerFQCodel are the values of Config.Marker.
	MarkerHop             = "hop"
	MarkerFQCodel         = "fq_codel"
	DefaultLoad           = 0.6
	DefaultFanout         = 10
	DefaultIncastBytes    = 64 << 10
	DefaultSenders        = 8
	DefaultFlows          = 4
	DefaultSampleInterval = 100 * time.Microsecond
	DefaultSeed           = 1
	// MaxRepeat bounds Config.Repeat.
	MaxRepeat = 50
)

// DefaultCCs is the CC list of a run that names none.
func DefaultCCs() []string {
	return []string{"cubic", "bbr", "bpf_dctcp", "theta_powertcp", "powertcp", "hpcc"}
}

// DefaultDuration is the per-CC traffic duration of a scenario.
func DefaultDuration(scenario string, quick bool) time.Duration {
	if quick {
		return 3 * time.Second
	}
	switch scenario {
	case ScenarioLongflow:
		return 10 * time.Second
	case ScenarioFairness:
		return 16 * time.Second
	}
	return 20 * time.Second
}

// withDefaults fills in zero fields.
func (c Config) withDefaults() Config {
	if len(c.CCs) == 0 {
		c.CCs = DefaultCCs()
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration(c.Scenario, c.Quick)
	}
	if c.Load == 0 {
		c.Load = DefaultLoad
	}
	if c.RateBps == 0 {
		c.RateBps = DefaultRateBps
	}
	if c.BufferBytes == 0 {
		c.BufferBytes = DefaultBufferBytes
	}
	if c.ECNThresholdBytes == 0 {
		c.ECNThresholdBytes = DefaultECNThresholdBytes
	}
	if c.NoECN {
		c.ECNThresholdBytes = 0
	}
	if c.Marker == "" {
		c.Marker = MarkerHop
	}
	if c.INTTag == "" {
		c.INTTag = DefaultINTTag
	}
	if c.Fanout == 0 {
		c.Fanout = DefaultFanout
	}
	if c.IncastBytes == 0 {
		c.IncastBytes = DefaultIncastBytes
	}
	if c.Senders == 0 {
		c.Senders = DefaultSenders
		if c.Quick {
			c.Senders = 4
		}
	}
	if c.Flows == 0 {
		c.Flows = DefaultFlows
	}
	if c.SampleInterval == 0 {
		c.SampleInterval = DefaultSampleInterval
	}
	if c.Seed == 0 {
		c.Seed = DefaultSeed
	}
	if c.Repeat == 0 {
		c.Repeat = 1
	}
	if c.Prefix == "" {
		c.Prefix = "ccb"
	}
	return c
}

// validate checks a Config with defaults filled in.
func (c Config) validate() error {
	var errs []error
	if !slices.Contains(Scenarios(), c.Scenario) {
		errs = append(errs, fmt.Errorf("unknown scenario %q: use one of %s", c.Scenario, strings.Join(Scenarios(), ", ")))
	}
	seen := map[string]bool{}
	for _, cc := range c.CCs {
		if cc == "" || seen[cc] {
			errs = append(errs, fmt.Errorf("CC list %q: names must be non-empty and distinct", strings.Join(c.CCs, ",")))
			break
		}
		seen[cc] = true
	}
	switch {
	case c.Marker != MarkerHop && c.Marker != MarkerFQCodel:
		errs = append(errs, fmt.Errorf("ECN marker %q: use %s (the INT hop) or %s (the bottleneck's AQM)", c.Marker, MarkerHop, MarkerFQCodel))
	case c.Marker == MarkerFQCodel && c.ECNThresholdBytes == 0:
		errs = append(errs, fmt.Errorf("ECN marker %s with no ECN threshold: give --ecn-threshold above 0", MarkerFQCodel))
	}
	if _, _, err := sockops.ParseTag(c.INTTag); err != nil {
		errs = append(errs, fmt.Errorf("INT %w", err))
	}
	if c.Load <= 0 || c.Load > 1 {
		errs = append(errs, fmt.Errorf("load %g: give a fraction of the bottleneck in (0, 1], e.g. 0.6", c.Load))
	}
	if c.Duration < time.Second || c.Duration > time.Hour {
		errs = append(errs, fmt.Errorf("duration %v: give 1s to 1h", c.Duration))
	}
	if c.Fanout < 1 || c.Fanout > 64 {
		errs = append(errs, fmt.Errorf("fanout %d: give 1 to 64", c.Fanout))
	}
	if c.IncastBytes < 1 || c.IncastBytes > 1<<30 {
		errs = append(errs, fmt.Errorf("incast size %d: give 1 byte to 1 GiB", c.IncastBytes))
	}
	if c.Senders < 1 || c.Senders > 64 {
		errs = append(errs, fmt.Errorf("senders %d: give 1 to 64", c.Senders))
	}
	if c.Flows < 2 || c.Flows > 16 {
		errs = append(errs, fmt.Errorf("fairness flows %d: give 2 to 16", c.Flows))
	}
	if c.ControlPlaneExe != "" && (c.ControlPlaneRuns < 1 || c.ControlPlaneRuns > MaxControlPlaneRuns) {
		errs = append(errs, fmt.Errorf("control-plane runs %d: give 1 to %d", c.ControlPlaneRuns, MaxControlPlaneRuns))
	}
	if c.KeepCPUsAwake && c.SpinExe == "" {
		errs = append(errs, errors.New("keep CPUs awake: no ccload executable to run the spinners"))
	}
	if c.Repeat < 1 || c.Repeat > MaxRepeat {
		errs = append(errs, fmt.Errorf("repeat %d: give 1 to %d", c.Repeat, MaxRepeat))
	}
	if c.SampleInterval < 50*time.Microsecond || c.SampleInterval > 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("sample interval %v: give 50us to 100ms", c.SampleInterval))
	}
	return errors.Join(errs...)
}

// senderCount is how many sender hosts the scenario's topology needs.
func (c Config) senderCount() int {
	switch c.Scenario {
	case ScenarioIncast:
		return c.Fanout + 1
	case ScenarioWebsearch:
		return c.Senders
	case ScenarioFairness:
		return c.Flows
	}
	return 1
}
