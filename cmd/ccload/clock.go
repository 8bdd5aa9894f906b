package main

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ccload/ccload/clocksync"
)

func newClockCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "clock",
		Short: "Measure the clock offsets to other hosts (Huygens-style), for one-way delays",
		Long: `A clock agent probes up to K peers over UDP with coded probe pairs and the
kernel's timestamps, fits each peer's offset and drift, corrects them over
the loops of the probe graph, and publishes them in a pinned BPF map of its
network namespace, where data-path programs (On-Ramp) read them:

  /sys/fs/bpf/ccload/clock/ns<netns inode>/clock_offsets

Every host runs one agent; each answers the others' probes. docs/clock.md
describes the protocol and the map's layout.`,
		Example: `  ccload clock run --peers 198.18.1.2,198.18.2.2,198.19.0.2
  ccload clock run --peers /etc/ccload/peers --duration 1m
  ccload clock status
  nsenter --net=/run/netns/NS ccload clock status --json`,
	}
	c.AddCommand(newClockRunCmd(a), newClockStatusCmd(a))
	return c
}

func newClockRunCmd(a *app) *cobra.Command {
	var (
		peers    string
		listen   string
		port     uint16
		cfg      clocksync.Config
		hw       bool
		iface    string
		duration time.Duration
		asJSON   bool
	)
	c := &cobra.Command{
		Use:   "run --peers ADDR|PREFIX|FILE[,...]",
		Short: "Run the clock agent in the foreground",
		Long: `Run the clock agent of this network namespace until Ctrl-C (or --duration).

--peers lists the agents to probe: addresses, prefixes and files that list
them (one per line, # comments). Up to --max-peers of them are probed, at
random. A prefix of up to 256 addresses is probed address by address; a
larger one only admits the agents in it that turn up (by probing this one,
or in a peer's estimates). Every agent listens on the same --port.

Each window (--window) the agent fits every peer's offset and drift to the
window's pure probe pairs, corrects them over the probe graph's loops with
the estimates its neighbours send it, and writes them to the clock map.
Entries expire three windows after their last update, so a stopped agent's
offsets are soon ignored. Timestamps are the kernel's software ones, or the
NIC's with --hw-timestamps --iface IF (the NIC's clock must follow
CLOCK_REALTIME, as phc2sys keeps it).

Software receive timestamps are stamped on every packet the host receives,
which fq drops where a received packet is sent on with its stamp
(multicast routing, tc mirred mirror). While it runs, the agent therefore
keeps a small tc program (clock_scrub) at the egress of every interface of
this network namespace that clears such stamps; it goes when the agent
stops. See docs/clock.md.`,
		Args: exactArgs(0, "no arguments (peers go in --peers)"),
		RunE: func(c *cobra.Command, args []string) error {
			if !c.Flags().Changed("peers") {
				return usage(c, errors.New("--peers is required: the addresses, prefixes or files of the agents to probe"))
			}
			set, err := clocksync.ParsePeers(peers)
			if err != nil {
				return usage(c, err)
			}
			cfg.Peers = set
			addr, err := netip.ParseAddr(listen)
			if err != nil {
				return usage(c, fmt.Errorf("--listen %q: %w", listen, err))
			}
			cfg.Listen = netip.AddrPortFrom(addr, port)
			if hw {
				if iface == "" {
					return usage(c, errors.New("--hw-timestamps needs --iface, the interface whose NIC stamps the probes"))
				}
				cfg.HWIface = iface
			}
			// Zero means the default in Config; on the command line it is
			// a mistake.
			switch {
			case cfg.MaxPeers < 1:
				return usage(c, fmt.Errorf("--max-peers %d: probe at least one peer", cfg.MaxPeers))
			case cfg.ProbeRate <= 0:
				return usage(c, fmt.Errorf("--probe-rate %g: must be above 0 pairs per second", cfg.ProbeRate))
			case cfg.Window <= 0:
				return usage(c, fmt.Errorf("--window %s: must be between 200ms and 1m", cfg.Window))
			}
			if err := cfg.Validate(); err != nil {
				return usage(c, err)
			}
			offsets, err := clocksync.OpenForAgent(a.host)
			if err != nil {
				return fmt.Errorf("clock run: %w", err)
			}
			defer offsets.Close()
			cfg.Offsets = offsets
			cfg.Logf = func(f string, args ...any) { fmt.Fprintf(c.ErrOrStderr(), "clock: "+f+"\n", args...) }
			cfg.OnWindow = func(r clocksync.WindowReport) { a.printClockWindow(r, asJSON) }
			agent, err := clocksync.New(cfg)
			if err != nil {
				return fmt.Errorf("clock run: %w", err)
			}
			defer agent.Close()
			if !asJSON {
				fmt.Fprintf(a.out, "clock agent on UDP %s, publishing to %s; Ctrl-C stops it\n", cfg.Listen, offsets.Path())
			}
			ctx, cancel := runContext(c, duration)
			defer cancel()
			return agent.Run(ctx)
		},
	}
	f := c.Flags()
	f.StringVar(&peers, "peers", "", "peers to probe and answer: addresses, prefixes and files of them, comma-separated")
	f.StringVar(&listen, "listen", "::", "local address to listen on (:: is every address, IPv4 included)")
	f.Uint16Var(&port, "port", clocksync.DefaultPort, "UDP port of every agent")
	f.IntVar(&cfg.MaxPeers, "max-peers", clocksync.DefaultMaxPeers, "K: how many peers to probe")
	f.Float64Var(&cfg.ProbeRate, "probe-rate", clocksync.DefaultProbeRate, "probe pairs per second to each peer (at most 1000)")
	f.DurationVar(&cfg.Window, "window", clocksync.DefaultWindow, "estimation window: how often offsets are fitted and published")
	f.BoolVar(&hw, "hw-timestamps", false, "use the NIC's hardware timestamps (needs --iface)")
	f.StringVar(&iface, "iface", "", "the interface whose NIC stamps the probes, with --hw-timestamps")
	f.DurationVar(&duration, "duration", 0, "stop after this long (0: until Ctrl-C)")
	f.BoolVar(&asJSON, "json", false, "print each window's estimates as a line of JSON")
	return c
}

// printClockWindow prints one window of `clock run`.
func (a *app) printClockWindow(r clocksync.WindowReport, asJSON bool) {
	if asJSON {
		_ = a.printJSONLine(r)
		return
	}
	var (
		worst            float64
		estimated        int
		pairs, purePairs int
	)
	for _, p := range r.Peers {
		worst = max(worst, p.Err)
		if p.Err > 0 {
			estimated++
		}
		pairs, purePairs = pairs+p.Pairs, purePairs+p.PurePairs
	}
	fmt.Fprintf(a.out, "window %d: %d peers, %d estimated, largest error %.0f ns; %d probe pairs, %d pure\n",
		r.Window, len(r.Peers), estimated, worst, pairs, purePairs)
}

// clockStatus is what `clock status --json` prints.
type clockStatus struct {
	Map   string             `json:"map"`
	Peers []clockStatusEntry `json:"peers"`
}

// clockStatusEntry is one peer of `clock status --json`.
type clockStatusEntry struct {
	clocksync.Entry
	AgeNs   int64 `json:"age_ns"`
	Expired bool  `json:"expired"`
}

func newClockStatusCmd(a *app) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status",
		Short: "Show the clock offsets published in this network namespace",
		Long: `Show, per peer, what this network namespace's clock agent published: the
peer's clock minus this host's (offset, now), the drift, the standard error,
the share of pure probe pairs, the age of the estimate, the RMS loop
residual, and whether the agent probes the peer itself or knows it through
its neighbours. Run it inside a namespace with nsenter --net=..., which
keeps the host's bpffs (ip netns exec hides it).`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			o, err := clocksync.OpenReadOnly(a.host)
			if err != nil {
				return fmt.Errorf("clock status: %w", err)
			}
			defer o.Close()
			entries, err := o.List()
			if err != nil {
				return fmt.Errorf("clock status: %w", err)
			}
			clock, err := clocksync.NewSystemClock()
			if err != nil {
				return fmt.Errorf("clock status: %w", err)
			}
			now := clock.Now()
			sort.Slice(entries, func(i, j int) bool { return entries[i].Peer.Less(entries[j].Peer) })
			out := make([]clockStatusEntry, len(entries))
			for i, e := range entries {
				out[i] = clockStatusEntry{Entry: e, AgeNs: now - int64(e.UpdatedNs), Expired: uint64(now) > e.ValidUntilNs}
			}
			if asJSON {
				return a.printJSON(clockStatus{Map: o.Path(), Peers: out})
			}
			fmt.Fprintf(a.out, "clock offsets in %s\n", o.Path())
			if len(out) == 0 {
				fmt.Fprintln(a.out, "no peers yet")
				return nil
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PEER\tOFFSET\tDRIFT\tERROR\tPURE\tAGE\tRESIDUAL\tVIA")
			for _, e := range out {
				via := "probes"
				if !e.Probed {
					via = "mesh"
				}
				age := time.Duration(e.AgeNs).Round(time.Millisecond).String()
				if e.Expired {
					age += " (expired)"
				}
				fmt.Fprintf(tw, "%s\t%+.3fus\t%+.3fppm\t%dns\t%.0f%%\t%s\t%dns\t%s\n", e.Peer,
					float64(e.OffsetAt(uint64(now)))/1e3, e.Drift*1e6, e.ErrorNs, e.PureShare*100, age, e.ResidualNs, via)
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
