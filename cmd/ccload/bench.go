package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/ccload/ccload/bench"
	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/units"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/telemetry/sockops"
)

func newBenchCmd(a *app) *cobra.Command {
	var (
		scenario, out string
		sizes         bench.Sizes
		ccs           []string
		ccParamSpecs  []string
		cfg           bench.Config
		asJSON        bool
		controlRuns   int
		clockCfg      bench.ClockConfig
		orCfg         bench.OnRampConfig
		gso           string
		senderRate    string
		longFlow      bool
		responseConns string
	)
	c := &cobra.Command{
		Use:   "bench --scenario NAME [--cc LIST] [--out DIR]",
		Short: "Measure congestion controls side by side on datacenter scenarios",
		Long: `Build an emulated datacenter bottleneck out of network namespaces
(senders -> router -> receiver, the router shaping to --rate with an htb
queue of --buffer bytes and an INT hop on its egress), then run the
scenario's traffic with each CC in --cc, one after the other, on the same
topology, --repeat times, and measure:

  - throughput and utilisation at the bottleneck,
  - the bottleneck queue (qdisc backlog sampled every 100us, and the INT
    hop's own model of it),
  - flow completion times (p50, p99, p99.9) and slowdown by size bucket
    (<10KB, 10KB-1MB, >1MB), from connect() to the kernel's timestamp of
    the ACK of the flow's last byte, and the queueing delay the slowest
    flows of each bucket met at the bottleneck (whether the queue explains
    the tail),
  - Jain's fairness and convergence time (fairness scenario),
  - what each ACK costs the CC's BPF program and INT's sockops program
    (kernel BPF statistics), above a floor measured on a null CC in the
    same repeat, and the CPUs' busy share,
  - how long 'ccload attach', 'set' and 'detach' take as processes
    (--control-plane-runs; skipped when theta_powertcp is attached).

One run per CC cannot rank CCs on a busy machine. With --repeat N, every
CC runs N times: the runs interleave (repeat i starts i places down the
--cc list) and repeat i uses workload seed --seed+i for every CC. The table
shows each figure's median and its range (min-max) over the runs; flow
completion times are percentiles over the flows of all runs pooled, and a
percentile is shown only when enough flows support it (p99 needs 1,000,
p99.9 10,000); otherwise the table shows the highest percentile they do.

Scenarios:
  longflow   one long flow for --duration
  incast     a long flow, plus --fanout senders sending --incast-size each
             at the same moment, every 250ms
  websearch  Poisson arrivals of web-search sized flows (the DCTCP paper's
             distribution, mean 1.67MB) at --load of the bottleneck
  fairness   --flows flows join one by one, then leave one by one
  all        every scenario above, each into its own subdirectory of --out
  clock      not CCs: --agents clock agents (ccload clock) on both sides of
             the router, each given a clock off by milliseconds and tens
             of ppm, with web-search cross traffic in one direction at each
             of --clock-loads; reports |offset error| p50/p99/max of the
             published offsets, the agents' direct fits, the NTP-style
             midpoint of the same probes and ptp4l (software timestamps,
             unicast, free running) in the same run, and the drift error
  onramp     On-Ramp (ccload onramp) under each CC: Poisson requests, each
             asking --fanout servers (default 16) for --incast-size at once,
             at --incast-load, each server answering on one connection it
             keeps open (--response-conns new: a connection per response),
             over web-search flows at --load (default 0.4)
             from --senders background senders and one long flow (none
             with --onramp-long-flow=false); each CC once without and
             once with On-Ramp (--onramp-threshold, --onramp-max-pause)
             per repeat, fq and GSO --gso on every sender in both, fq
             capping each flow at --sender-rate (default --rate: a NIC
             no faster than the bottleneck).
             Reports request completion times, background FCTs, the long
             flow's throughput, window and RTT, the queue, retransmission
             timeouts (and how many of the slowest requests took one), how
             the senders' TCP found and repaired losses (loss probes,
             recoveries, undos: their TcpExt counters), On-Ramp's pauses,
             the CPUs busy (and with --onramp-bpf-costs the share
             On-Ramp's programs took), how long the bench's own goroutines
             waited to run (they start the flows), and the ratios
             without/with, pooled and, for the background flows' mean
             FCT, paired by repeat, with the CPU On-Ramp added in each
             repeat; with --repeat 5 or more, each tail ratio's 95%
             interval over resamples of the repeats, and what is worse
             beyond that noise. Its own defaults: --cc
             cubic,bbr,bpf_dctcp,theta_powertcp, --rate 100mbit, --buffer
             1MiB, --ecn-threshold 20KB, 15s per run, queue sampled every
             10ms; --quick: 8 servers, 2 background senders. It needs
             sch_fq (CONFIG_NET_SCH_FQ); 'all' leaves it out

Kernel CCs (cubic, bbr, reno, dctcp) and ccload's CCs can be mixed. ccload's
CCs are attached for the run if they are not attached yet, and INT is
turned on (for 198.18.0.0/15 and fd00::/8) around the runs of powertcp and
hpcc; both are undone at the end, also on Ctrl-C. CCs that ask for ECN
(bpf_dctcp, the kernel's dctcp) get CE marks above --ecn-threshold: from
the INT hop's model of the queue (--marker hop), or from a real AQM, an
fq_codel leaf with ce_threshold (--marker fq_codel; kernels without
sch_fq_codel, like some cloud hosts', can't).

The table goes to stdout; --out gets results.json (schema: 'ccload bench
--schema') and PNG plots of the queue, the throughput and the FCTs.
--quick shortens each scenario to a few seconds, for smoke tests.`,
		Example: `  ccload bench --scenario incast
  ccload bench --scenario incast --cc cubic,powertcp,hpcc --repeat 5
  ccload bench --scenario websearch --cc cubic,bbr,bpf_dctcp,theta_powertcp,powertcp,hpcc --load 0.6 --duration 20s --out results/
  ccload bench --scenario all --quick --out /tmp/smoke
  ccload bench --scenario clock --out results/clock
  ccload bench --schema > results.schema.json
  ccload bench --scenario clock --schema > clock.schema.json
  ccload bench --scenario onramp --repeat 3 --out results/onramp`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			if c.Flags().Changed("schema") {
				schema := bench.Schema()
				switch scenario {
				case bench.ScenarioClock:
					schema = bench.ClockSchema()
				case bench.ScenarioOnRamp:
					schema = bench.OnRampSchema()
				}
				_, err := a.out.Write(schema)
				return err
			}
			params, err := bench.ParseCCParams(ccParamSpecs)
			if err != nil {
				return usage(c, err)
			}
			if len(params) > 0 && scenario == bench.ScenarioClock {
				return usage(c, fmt.Errorf("--cc-param: --scenario clock runs no CC"))
			}
			cfg.CCParams, orCfg.CCParams = params, params
			if cfg.KeepCPUsAwake && (scenario == bench.ScenarioClock || scenario == bench.ScenarioOnRamp) {
				return usage(c, fmt.Errorf("--keep-cpus-awake: for the CC scenarios (longflow, incast, websearch, fairness, all), not --scenario %s", scenario))
			}
			if scenario == bench.ScenarioClock {
				clockCfg.Duration, clockCfg.Quick, clockCfg.Seed = cfg.Duration, cfg.Quick, cfg.Seed
				clockCfg.Command = strings.Join(os.Args, " ")
				return a.runClockBench(c, clockCfg, sizes, out, asJSON)
			}
			if scenario == bench.ScenarioOnRamp {
				orCfg.NoLongFlow = !longFlow
				if err := applySenderRate(&orCfg, senderRate); err != nil {
					return usage(c, err)
				}
				switch responseConns {
				case "persistent":
				case "new":
					orCfg.NewConnPerResponse = true
				default:
					return usage(c, fmt.Errorf("--response-conns %q: use persistent (each server answers on one connection kept open) or new (a connection per response)", responseConns))
				}
				return a.runOnRampBench(c, orCfg, cfg, ccs, sizes, gso, out, asJSON)
			}
			scenarios, err := bench.ScenariosFor(scenario)
			if err != nil {
				return benchInputError(c, err)
			}
			if err := sizes.Apply(&cfg); err != nil {
				return benchInputError(c, err)
			}
			cfg.CCs = ccs
			if cfg.KeepCPUsAwake || controlRuns > 0 {
				// The bench runs ccload itself: its spinners, and the
				// commands it times.
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("find ccload's executable to time its commands and run the spinners of --keep-cpus-awake: %w (or pass --control-plane-runs 0 and leave out --keep-cpus-awake)", err)
				}
				if cfg.KeepCPUsAwake {
					cfg.SpinExe = exe
				}
				if controlRuns > 0 {
					cfg.ControlPlaneExe, cfg.ControlPlaneRuns = exe, controlRuns
				}
			}
			ctx, stop := runContext(c, 0)
			defer stop()
			var progress io.Writer = a.out
			if asJSON {
				progress = c.ErrOrStderr()
			}
			var all []bench.Results
			l, in, cleanup, err := a.benchParts()
			if err != nil {
				return err
			}
			defer cleanup()
			a.noteHostINT(progress)
			_, err = bench.RunAll(ctx, l, in, cfg, scenarios, out, progress, func(rep *bench.Report) error {
				if asJSON {
					all = append(all, rep.Results)
					return nil
				}
				fmt.Fprintln(a.out)
				return rep.Table(a.out)
			})
			if err != nil {
				return err
			}
			if asJSON {
				if len(all) == 1 {
					return a.printJSON(all[0])
				}
				return a.printJSON(all)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&scenario, "scenario", "", "longflow, incast, websearch, fairness, all, clock, or onramp")
	f.Float64SliceVar(&clockCfg.Loads, "clock-loads", bench.DefaultClockLoads(), "clock: the cross traffic's loads, one run each")
	f.DurationVar(&clockCfg.Window, "window", 0, "clock: the agents' estimation window (default 2s; 500ms with --quick)")
	f.IntVar(&clockCfg.Agents, "agents", 0, "clock: clock agents, one on the receiver and the rest on senders (default 5)")
	f.BoolVar(&clockCfg.PTP, "ptp4l", true, "clock: run linuxptp's ptp4l beside the agents, for comparison")
	f.StringSliceVar(&ccs, "cc", bench.DefaultCCs(), "CCs to compare, in run order")
	f.StringArrayVar(&ccParamSpecs, "cc-param", nil, "a parameter for one of ccload's CCs that the bench attaches, as CC:NAME=VALUE (what ccload attach CC --param NAME=VALUE takes; ccload list shows the names), over the bench's own (host_bw); repeat for more. Not for a CC attached already: it keeps its parameters")
	f.Float64Var(&cfg.Load, "load", bench.DefaultLoad, "websearch: offered load, a fraction of the bottleneck")
	f.DurationVar(&cfg.Duration, "duration", 0, "traffic time per CC (default 10s longflow, 16s fairness, 20s otherwise; 3s with --quick)")
	f.BoolVar(&cfg.Quick, "quick", false, "a few seconds per CC, fewer senders, web-search flows capped at 1MB: a smoke run")
	f.StringVar(&out, "out", "", "directory for results.json and the PNG plots")
	f.StringVar(&sizes.Rate, "rate", "1gbit", "bottleneck rate")
	f.StringVar(&sizes.Buffer, "buffer", "1MiB", "bottleneck buffer")
	f.StringVar(&sizes.ECNThreshold, "ecn-threshold", "30KB", "INT hop marks CE above this queue (DCTCP's K); 0 turns it off")
	f.StringVar(&cfg.Marker, "marker", bench.MarkerHop, "what marks CE at --ecn-threshold: hop (the INT hop's model of the queue) or fq_codel (the bottleneck's leaf qdisc, ce_threshold = K at the rate; needs CONFIG_NET_SCH_FQ_CODEL)")
	f.BoolVar(&cfg.ACKPadding, "ack-padding", false, "the INT hop refreshes its record on returning ACKs (FastTune)")
	f.StringVar(&cfg.INTTag, "int-tag", "", "which data skbs INT tags for the CCs that use it: every, nth=N or tso-head, as in ccload int enable --tag (default every; fewer tags: less sockops work per ACK, fewer samples for the CC)")
	f.IntVar(&cfg.Fanout, "fanout", bench.DefaultFanout, "incast: senders per incast")
	f.StringVar(&sizes.IncastSize, "incast-size", "64KiB", "incast: bytes each incast sender sends")
	f.IntVar(&cfg.Senders, "senders", 0, "websearch: sender hosts (default 8; 4 with --quick)")
	f.IntVar(&cfg.Flows, "flows", bench.DefaultFlows, "fairness: flows that join and leave")
	f.Uint64Var(&cfg.Seed, "seed", bench.DefaultSeed, "workload seed of the first repeat; repeat i uses seed+i")
	f.IntVar(&cfg.Repeat, "repeat", 1, fmt.Sprintf("runs per CC, interleaved, reported as median and range (1 to %d)", bench.MaxRepeat))
	f.DurationVar(&cfg.SampleInterval, "sample-interval", bench.DefaultSampleInterval, fmt.Sprintf("queue sampling interval (onramp: default %v, as each sample costs the process that starts the flows)", bench.DefaultOnRampSampleEvery))
	f.IntVar(&controlRuns, "control-plane-runs", 15, fmt.Sprintf("time attach, set and detach of theta_powertcp as processes this many times each, before the scenarios (0 to skip; at most %d)", bench.MaxControlPlaneRuns))
	f.DurationVar(&orCfg.Threshold, "onramp-threshold", bench.DefaultOnRampThreshold, "onramp: On-Ramp's threshold T on the one-way delay (think of it as bytes of queue at the bottleneck: 5ms at 100mbit is the paper's 62.5 KB, the T of the current record in docs/benchmarks.md)")
	f.DurationVar(&orCfg.MaxPause, "onramp-max-pause", bench.DefaultOnRampMaxPause, "onramp: On-Ramp's longest single pause (at most 100ms)")
	f.StringVar(&gso, "gso", "8KiB", "onramp: GSO size of every sender's uplink")
	f.StringVar(&senderRate, "sender-rate", "", "onramp: the most each flow of a sender may send, as fq's maxrate on its uplink, standing in for the sender's NIC, and the host_bw of the CCs that have one (default: the bottleneck's --rate, as in a fabric of equal links); none lets a flow send as fast as its veth goes")
	f.Float64Var(&orCfg.IncastLoad, "incast-load", bench.DefaultOnRampIncastLoad, "onramp: the requests' load, a fraction of the bottleneck")
	f.StringVar(&responseConns, "response-conns", "persistent", "onramp: persistent: each server answers every request on one connection it keeps open for the run; new: a connection per response, opened at the request's arrival (handshake and connection setup per response)")
	f.BoolVar(&longFlow, "onramp-long-flow", true, "onramp: one sender also runs a long flow for the whole run, whose throughput with and without On-Ramp is the long-flow target; --onramp-long-flow=false leaves it out, as in the On-Ramp paper's basic scenario")
	f.BoolVar(&orCfg.Strawman, "onramp-strawman", false, "onramp: run On-Ramp's strawman (pause O - T, without the lag compensation of its final algorithm), to compare the two")
	f.BoolVar(&orCfg.Observe, "onramp-observe", false, "onramp: run On-Ramp observing only (ccload onramp enable --observe): it measures and pauses nothing, so the runs with it differ by its presence alone, and the table gives the share of echoes above T")
	f.BoolVar(&orCfg.StampEveryPacket, "onramp-stamp-every-packet", false, "onramp: have On-Ramp stamp every data segment (ccload onramp enable --stamp-every-packet), as it did before sparse stamps, to compare the two")
	f.BoolVar(&orCfg.CCHolds, "onramp-cc-holds", false, "onramp: attach the CCs that can (theta_powertcp, powertcp) with onramp_holds=1, so that they take On-Ramp's pauses out of their RTT samples (docs/onramp.md)")
	f.BoolVar(&orCfg.BPFCosts, "onramp-bpf-costs", false, "onramp: time every BPF program with the kernel's BPF statistics and report On-Ramp's share of the CPUs (the On-Ramp BPF % column) and each program's cost (results.json), with a tc and a sockops program that do nothing run where On-Ramp's run, whose ns per run (the floor ns columns) is what a run costs there before any work; off by default, as the statistics' clock reads slow every program and so change what the run measures")
	f.BoolVar(&cfg.KeepCPUsAwake, "keep-cpus-awake", false, "run a SCHED_IDLE spinner on every CPU while the CCs run, so that no CPU halts between ACKs: per-ACK costs as on a busy server rather than an idle VM (the cpu % column then counts the spinners)")
	f.BoolVar(&asJSON, "json", false, "print results.json's content instead of the table (progress goes to stderr)")
	f.Bool("schema", false, "print the JSON Schema of results.json and exit (with --scenario clock or onramp: of that scenario's)")
	return c
}

// applySenderRate sets the onramp scenario's per-flow cap at the senders
// from --sender-rate: empty for the default (the bottleneck's rate),
// none for no cap, or a rate such as 100mbit.
func applySenderRate(cfg *bench.OnRampConfig, s string) error {
	switch s {
	case "":
		return nil
	case "none":
		cfg.UnlimitedSenders = true
		return nil
	}
	bps, err := units.ParseBandwidth(s)
	if err != nil {
		return fmt.Errorf("--sender-rate %q: want a rate such as 100mbit, or none: %w", s, err)
	}
	if bps == 0 {
		return fmt.Errorf("--sender-rate %q: give a rate above 0 (such as 100mbit), or none for no cap", s)
	}
	cfg.SenderRateBps = bps
	return nil
}

// benchInputError makes a mistake in the bench's flags a usage error.
func benchInputError(c *cobra.Command, err error) error {
	var in *bench.InputError
	if errors.As(err, &in) {
		return usage(c, in)
	}
	return err
}

// runClockBench runs `ccload bench --scenario clock`.
func (a *app) runClockBench(c *cobra.Command, cfg bench.ClockConfig, sizes bench.Sizes, out string, asJSON bool) error {
	var rates bench.Config
	if err := sizes.Apply(&rates); err != nil {
		return benchInputError(c, err)
	}
	cfg.RateBps, cfg.BufferBytes = rates.RateBps, rates.BufferBytes
	if err := cfg.Validate(); err != nil {
		return usage(c, err)
	}
	ctx, stop := runContext(c, 0)
	defer stop()
	var progress io.Writer = a.out
	if asJSON {
		progress = c.ErrOrStderr()
	}
	rep, err := bench.RunClock(ctx, cfg, progress)
	if err != nil {
		return err
	}
	if out != "" {
		if err := bench.WriteReport(progress, rep.Write, out); err != nil {
			return err
		}
	}
	if asJSON {
		return a.printJSON(rep.Results)
	}
	fmt.Fprintln(a.out)
	return rep.Table(a.out)
}

// runOnRampBench runs `ccload bench --scenario onramp`. The flags the CC
// scenarios share with it keep the onramp scenario's own defaults
// (bench.OnRampConfig) unless the user set them.
func (a *app) runOnRampBench(c *cobra.Command, cfg bench.OnRampConfig, shared bench.Config, ccs []string, sizes bench.Sizes,
	gso, out string, asJSON bool) error {
	var parsed bench.Config
	if err := sizes.Apply(&parsed); err != nil {
		return benchInputError(c, err)
	}
	g, err := units.ParseBytes(gso)
	if err != nil || g > 1<<16 {
		return usage(c, fmt.Errorf("--gso %q: want a size up to 64KiB, e.g. 8KiB", gso))
	}
	changed := c.Flags().Changed
	cfg.GSOBytes = uint32(g)
	cfg.Duration, cfg.Quick, cfg.Seed, cfg.Repeat = shared.Duration, shared.Quick, shared.Seed, shared.Repeat
	cfg.Command = strings.Join(os.Args, " ")
	if changed("cc") {
		cfg.CCs = ccs
	}
	if changed("rate") {
		cfg.RateBps = parsed.RateBps
	}
	if changed("buffer") {
		cfg.BufferBytes = parsed.BufferBytes
	}
	if changed("ecn-threshold") {
		cfg.ECNThresholdBytes, cfg.NoECN = parsed.ECNThresholdBytes, parsed.NoECN
	}
	if changed("incast-size") {
		cfg.ResponseBytes = parsed.IncastBytes
	}
	if changed("marker") {
		cfg.Marker = shared.Marker
	}
	if changed("fanout") {
		cfg.Fanout = shared.Fanout
	}
	if changed("load") {
		cfg.Load = shared.Load
	}
	if changed("senders") {
		cfg.BackgroundSenders = shared.Senders
	}
	if changed("sample-interval") {
		cfg.SampleInterval = shared.SampleInterval
	}
	if err := cfg.Validate(); err != nil {
		return usage(c, err)
	}
	ctx, stop := runContext(c, 0)
	defer stop()
	var progress io.Writer = a.out
	if asJSON {
		progress = c.ErrOrStderr()
	}
	l, in, cleanup, err := a.benchParts()
	if err != nil {
		return err
	}
	defer cleanup()
	a.noteHostINT(progress)
	rep, err := bench.RunOnRamp(ctx, l, in, cfg, progress)
	if err != nil {
		return benchInputError(c, err)
	}
	if out != "" {
		if err := bench.WriteReport(progress, rep.Write, out); err != nil {
			return err
		}
	}
	if asJSON {
		return a.printJSON(rep.Results)
	}
	fmt.Fprintln(a.out)
	return rep.Table(a.out)
}

// noteHostINT warns when INT is enabled outside the bench (ccload int
// enable, or the daemon): its sockops program sits on the same cgroup as
// the bench's and sees the bench's flows too, if its prefixes cover the
// testbed's, so the INT figures may not be the bench's alone.
func (a *app) noteHostINT(progress io.Writer) {
	st, err := a.int().Status()
	if err != nil || !st.Enabled {
		return
	}
	fmt.Fprintf(progress, "note: INT is enabled on this host (%s, for %s); its sockops program may tag and echo the bench's flows beside the bench's own; for figures that are the bench's alone, run ccload int disable first\n",
		st.Cgroup, strings.Join(st.Peers, ", "))
}

// benchParts returns the CC loader and INT of a pin root of the bench's
// own, <bpffs>/ccload-bench-<pid>/ccload, so that the bench never shares
// pins with the CLI or the daemon: a daemon does not fight the bench over
// parameters, and the bench's attach and detach never touch their CCs. A
// CC that they have registered cannot be registered again by the bench,
// which says so. cleanup removes the pin root once the bench has detached
// what it attached.
func (a *app) benchParts() (*loader.Loader, *sockops.INT, func(), error) {
	h := a.host
	h.BPFFS = filepath.Join(a.host.BPFFS, fmt.Sprintf("ccload-bench-%d", os.Getpid()))
	h.PinDir = a.host.PinDir
	if _, err := a.host.EnsureBPFFS(); err != nil {
		return nil, nil, nil, err
	}
	if err := os.MkdirAll(h.BPFFS, 0o700); err != nil {
		return nil, nil, nil, fmt.Errorf("create the bench's pin root: %w", err)
	}
	in := sockops.New(h)
	opts := []loader.Option{loader.WithSharedMaps(in.Store())}
	if a.legacy {
		opts = append(opts, loader.WithRegistration(kernel.RegLegacy))
	}
	return loader.New(h, opts...), in, func() { _ = os.RemoveAll(h.BPFFS) }, nil
}

// newSpinCmd is the hidden `ccload spin --cpu N`: one spinner of
// `bench --keep-cpus-awake`, which starts one per CPU and kills them when
// it is done (bench.Spin).
func newSpinCmd() *cobra.Command {
	var cpu int
	c := &cobra.Command{
		Use:    bench.SpinCommand + " --cpu N",
		Short:  "Keep CPU N busy at SCHED_IDLE until killed (used by ccload bench --keep-cpus-awake)",
		Hidden: true,
		Args:   exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			if cpu < 0 {
				return usage(c, fmt.Errorf("--cpu %d: give a CPU this process may run on, from 0", cpu))
			}
			ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return bench.Spin(ctx, cpu)
		},
	}
	c.Flags().IntVar(&cpu, "cpu", -1, "the CPU to keep busy")
	return c
}
