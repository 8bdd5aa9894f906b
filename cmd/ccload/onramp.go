package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ccload/ccload/internal/units"
	"github.com/ccload/ccload/onramp"
)

// onRamp returns On-Ramp on the app's host.
func (a *app) onRamp() *onramp.OnRamp { return onramp.New(a.host) }

func newOnRampCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "onramp",
		Short: "Pause flows at the sender when their one-way delay passes a threshold (On-Ramp)",
		Long: `On-Ramp (NSDI'21) sits under any congestion control (cubic, bbr, bpf_dctcp,
theta_powertcp, ...) and handles transients: when the one-way delay of a
flow's packets exceeds a threshold T, the sender holds the flow's next
packets back, using earliest departure times that the fq qdisc enforces,
while fq keeps serving other flows. The CC keeps the equilibrium.

One-way delays need clocks that agree: run 'ccload clock run' on every host.
Enable On-Ramp on every host of the datacenter (a host is the receiver of
some flows and the sender of others). Its TCP options are in
docs/onramp-option.md; how it works and how to tune it in docs/onramp.md.`,
	}
	c.AddCommand(newOnRampEnableCmd(a), newOnRampDisableCmd(a), newOnRampStatusCmd(a))
	return c
}

// parseThreshold reads --threshold: a duration, or auto.
func newOnRampEnableCmd(a *app) *cobra.Command {
	var (
		iface, threshold, gain, cgroup string
		peers                          []string
		maxPause                       time.Duration
		replace, strawman, observe     bool
		stampEvery                     bool
		asJSON                         bool
	)
	c := &cobra.Command{
		Use:   "enable --iface IF --peers CIDR[,CIDR...] [--threshold D|auto] [--gain 1/16] [--max-pause 2ms] [--replace-qdisc] [--observe]",
		Short: "Turn On-Ramp on for an interface",
		Long: `Turn On-Ramp on for an interface of this network namespace, and pin it so
that it keeps running after ccload exits:

  - the root qdisc becomes fq (mq with an fq per queue on a multi-queue
    device), which enforces the pauses. A root qdisc that somebody else
    installed is refused unless --replace-qdisc is given; an fq that is
    already there is used as it is;
  - tc programs on both sides of the interface stamp data segments, compute
    one-way delays from the clock agent's offsets, echo them on ACKs, and
    pause flows;
  - a sockops program (one per host, shared by every interface) makes room
    for the options on connections to --peers, and only those.

--threshold is T: 50us by default; 'auto' sets it per peer to the least
recent one-way delay plus twice the clock agent's error (the paper's §7.1).
A pause never lasts longer than --max-pause. --gain is the EWMA gain of β,
the measured effect of this sender's pauses on the delay.

A flow whose newest echoed one-way delay was below T/2 is stamped at most
once per T/4, not on every data segment: each stamp costs work in the
programs on both hosts, and the CCs that keep short queues send the most
packets per byte. A queue that builds behind such a flow is seen at most
T/4 later. --stamp-every-packet stamps every data segment, as the paper
does ("Sparse stamps" in docs/onramp.md).

--observe measures without pausing: the options, one-way delays and echoes
run as above, but no flow is held and the root qdisc stays as it is (no fq
is needed). 'ccload onramp status' then shows, per peer, the one-way delays
and the share of echoes above T, those that would have paused a flow: a
way to choose T, and to see what On-Ramp would do, before it holds any
packet ("Observing before pausing" in docs/onramp.md).

Running it again on the same interface updates the parameters in place; run
without --observe, it turns the pauses on (installing fq).`,
		Example: `  ccload onramp enable --iface eth0 --peers 10.0.0.0/8
  ccload onramp enable --iface eth0 --peers 198.18.0.0/15,fd00::/8 --threshold auto
  ccload onramp enable --iface eth0 --peers 10.0.0.0/8 --threshold 100us --observe`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			cfg := onramp.Config{Iface: iface, MaxPause: maxPause, ReplaceQdisc: replace, Strawman: strawman, Observe: observe, Cgroup: cgroup,
				StampEveryPacket: stampEvery}
			var err error
			if cfg.Peers, err = parsePeers(peers); err != nil {
				return usage(c, err)
			}
			if cfg.Threshold, cfg.AutoThreshold, err = onramp.ParseThreshold(threshold); err != nil {
				return usage(c, fmt.Errorf("--%w", err))
			}
			g, err := units.ParseFraction(gain, 1<<32)
			if err != nil {
				return usage(c, fmt.Errorf("--gain: %w", err))
			}
			cfg.Gain = float64(g) / (1 << 32)
			st, err := a.onRamp().Enable(cfg)
			if err != nil {
				return fmt.Errorf("onramp enable: %w", err)
			}
			if asJSON {
				return a.printJSON(st)
			}
			for _, n := range st.Notes {
				fmt.Fprintf(a.out, "note: %s\n", n)
			}
			q := "no fq root"
			if st.Qdisc != nil {
				q = st.Qdisc.Kind
			}
			fmt.Fprintf(a.out, "On-Ramp enabled on %s (%s, %s) for %s: %s\n", st.Iface, st.Method, q,
				strings.Join(st.Peers, ", "), st.Settings)
			return nil
		},
	}
	c.Flags().StringVar(&iface, "iface", "", "the Ethernet interface whose egress On-Ramp paces (required; not a tunnel's layer-3 device)")
	c.Flags().StringSliceVar(&peers, "peers", nil, "the datacenter's prefixes; only connections to them are stamped")
	c.Flags().StringVar(&threshold, "threshold", "50us", "one-way delay above which a flow pauses, or auto")
	c.Flags().StringVar(&gain, "gain", "1/16", "EWMA gain of β, in (0, 1]")
	c.Flags().DurationVar(&maxPause, "max-pause", onramp.DefaultMaxPause, "longest single pause")
	c.Flags().BoolVar(&replace, "replace-qdisc", false, "replace a root qdisc that somebody else installed with fq")
	c.Flags().StringVar(&cgroup, "cgroup", "", "cgroup v2 directory for the sockops program (default: the cgroup2 root)")
	c.Flags().BoolVar(&strawman, "strawman", false, "pause O-T without lag compensation (the paper's §3.1; for comparisons)")
	c.Flags().BoolVar(&observe, "observe", false, "measure one-way delays and count the echoes above T, but pause nothing and leave the root qdisc as it is")
	c.Flags().BoolVar(&stampEvery, "stamp-every-packet", false, "stamp every data segment, also those of flows whose delay is far below T (sparse stamps are the default)")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	_ = c.Flags().MarkHidden("strawman")
	return c
}

func newOnRampDisableCmd(a *app) *cobra.Command {
	var iface string
	c := &cobra.Command{
		Use:   "disable --iface IF",
		Short: "Turn On-Ramp off for an interface, and remove all of it",
		Long: `Detach On-Ramp's tc programs from the interface, remove its pins and the fq
root qdisc that 'enable' installed (an fq that was there before stays), and
detach the sockops program once no interface has On-Ramp. Paused flows
resume at once. An interface that was deleted is named by the name it had.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			if iface == "" {
				return usage(c, fmt.Errorf("--iface is required"))
			}
			was, err := a.onRamp().Disable(iface)
			if err != nil {
				return fmt.Errorf("onramp disable: %w", err)
			}
			if !was {
				fmt.Fprintf(a.out, "On-Ramp is not enabled on %s; nothing to do\n", iface)
				return nil
			}
			fmt.Fprintf(a.out, "On-Ramp disabled on %s\n", iface)
			return nil
		},
	}
	c.Flags().StringVar(&iface, "iface", "", "the interface (required)")
	return c
}

func newOnRampStatusCmd(a *app) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status [--json]",
		Short: "Show On-Ramp's interfaces, pauses, β and one-way delays",
		Long: `For every interface of this network namespace with On-Ramp: how it is
attached, its qdisc and parameters; flows paused now, pauses and total pause
time, the median β over flows that paused; segments on which On-Ramp's or
INT's option found no room; and per peer this host sends to, the one-way
delay's p50 and p99 (to 1/8 of the value), the least recent one, the share
of echoes above a fixed T ("above T"; with --observe, each of them would
have paused a flow), samples and echoes without a clock offset. A peer's
samples are at most one echo per 100 µs; the least delay takes every echo.

The percentiles and shares are over every echo a peer's histogram took
since On-Ramp first saw the peer. A note names each peer whose median
one-way delay is above a fixed threshold: most of its echoes ask for a
pause, not only those of transients, because the CCs of flows to it keep a
queue above T or its clock offset is wrong (see "Choosing T" in
docs/onramp.md).`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			sts, err := a.onRamp().Status()
			if err != nil {
				return fmt.Errorf("onramp status: %w", err)
			}
			if asJSON {
				return a.printJSON(sts)
			}
			if len(sts) == 0 {
				fmt.Fprintln(a.out, "On-Ramp is not enabled in this network namespace (ccload onramp enable --iface IF --peers CIDR)")
				return nil
			}
			for i, st := range sts {
				if i > 0 {
					fmt.Fprintln(a.out)
				}
				a.printOnRamp(st)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func (a *app) printOnRamp(st onramp.Status) {
	q := "none"
	if st.Qdisc != nil {
		q = fmt.Sprintf("%s (%d queues, installed by ccload: %v)", st.Qdisc.Kind, st.Qdisc.Queues, st.Qdisc.Owned)
	}
	fmt.Fprintf(a.out, "%s: %s, attached %v, qdisc %s\n", st.Iface, st.Method, st.Attached, q)
	fmt.Fprintf(a.out, "  %s\n  peers: %s\n", st.Settings, strings.Join(st.Peers, ", "))
	fmt.Fprintf(a.out, "  flows %d, paused now %d; pauses %d, total %v; β p50 %.3f over %d flows\n",
		st.Flows, st.FlowsPaused, st.Pauses, time.Duration(st.PauseSeconds*1e9).Round(time.Microsecond), st.BetaP50, st.BetaFlows)
	fmt.Fprintf(a.out, "  segments without an option: %d (no room: On-Ramp stamp %d, echo %d, INT tag %d, echo %d; room not filled: %d)\n",
		st.NoSpace.Combined, st.NoSpace.Stamp, st.NoSpace.Echo, st.NoSpace.INTTag, st.NoSpace.INTEcho, st.NoSpace.Unfilled)
	for _, n := range st.Notes {
		fmt.Fprintf(a.out, "  note: %s\n", n)
	}
	if len(st.PeerStats) > 0 {
		w := tabwriter.NewWriter(a.out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "  peer\towd p50\towd p99\tleast\tabove T\tsamples\tno clock\tpauses\tpaused")
		d := func(ns int64) string {
			if ns < 0 {
				return "-"
			}
			return time.Duration(ns).String()
		}
		share := func(f float64) string {
			if f < 0 {
				return "-"
			}
			return fmt.Sprintf("%.1f%%", 100*f)
		}
		for _, p := range st.PeerStats {
			fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%v\n", p.Peer, d(p.OWDP50Ns), d(p.OWDP99Ns), d(p.MinOWDNs),
				share(p.ShareAboveThreshold), p.Samples, p.NoClock, p.Pauses, time.Duration(p.PauseSeconds*1e9).Round(time.Microsecond))
		}
		w.Flush()
	}
}

// traceOnRamp is 'ccload trace onramp': one record per echo the sender's
// control handled.
func (a *app) traceOnRamp(ctx context.Context, cancel func(), iface string, asCSV, asJSON bool, limit int) error {
	tr, err := a.onRamp().OpenTrace(iface)
	if err != nil {
		return fmt.Errorf("trace onramp: %w", err)
	}
	defer tr.Close()
	w := csv.NewWriter(a.out)
	if asCSV {
		w.Write([]string{"time", "flow", "owd_ns", "p_last_ns", "beta", "threshold_ns", "pause_ns", "paused_for_ns", "rtt_ns", "flags"})
	} else if !asJSON {
		fmt.Fprintf(a.out, "%-15s %-44s %10s %10s %6s %9s %9s %10s %10s %s\n", "time", "flow", "owd", "P", "beta", "T", "pause", "t_next", "rtt", "flags")
	}
	n := 0
	err = tr.Run(ctx, func(e onramp.TraceEvent) error {
		if limit > 0 && n >= limit {
			return nil
		}
		switch {
		case asJSON:
			if err := a.printJSONLine(e); err != nil {
				return err
			}
		case asCSV:
			ns := func(d time.Duration) string { return strconv.FormatInt(int64(d), 10) }
			w.Write([]string{e.Time.Format(time.RFC3339Nano), e.Flow, ns(e.OWD), ns(e.PLast), strconv.FormatFloat(e.Beta, 'f', 4, 64),
				ns(e.Threshold), ns(e.Pause), ns(e.PausedFor), ns(e.RTT), strings.Join(e.Flags, "|")})
		default:
			us := func(d time.Duration) string { return d.Round(100 * time.Nanosecond).String() }
			fmt.Fprintf(a.out, "%-15s %-44s %10s %10s %6.3f %9s %9s %10s %10s %s\n", e.Time.Format("15:04:05.000000"), e.Flow,
				us(e.OWD), us(e.PLast), e.Beta, us(e.Threshold), us(e.Pause), "+"+us(e.PausedFor), us(e.RTT), strings.Join(e.Flags, ","))
		}
		if n++; limit > 0 && n >= limit {
			cancel()
		}
		return nil
	})
	w.Flush()
	if err != nil {
		return fmt.Errorf("trace onramp: %w", err)
	}
	return w.Error()
}
