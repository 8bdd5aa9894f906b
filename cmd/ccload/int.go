package main

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ccload/ccload/loader"
)

func newINTCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "int",
		Short: "In-band network telemetry in a TCP option, for powertcp",
		Long: `INT carries per-hop queue length, transmitted bytes, a timestamp and the
link rate in a TCP option (docs/int-option.md). 'ccload int enable' makes
hosts tag their data and echo what hops wrote; 'ccload int hop' makes a
forwarding interface write its record; powertcp reads the echoes.`,
	}
	c.AddCommand(newINTEnableCmd(a), newINTDisableCmd(a), newINTStatusCmd(a), newINTHopCmd(a))
	return c
}

// parseTag reads --tag: every, nth=N or tso-head.
func parseTag(s string) (every uint32, tsoOnly bool, err error) {
	switch {
	case s == "every":
		return 1, false, nil
	case s == "tso-head":
		return 1, true, nil
	case strings.HasPrefix(s, "nth="):
		n, perr := strconv.ParseUint(strings.TrimPrefix(s, "nth="), 10, 32)
		if perr != nil || n < 1 {
			return 0, false, fmt.Errorf("--tag %s: N must be a whole number >= 1", s)
		}
		return uint32(n), false, nil
	}
	return 0, false, fmt.Errorf("--tag %q: want every, nth=N or tso-head", s)
}

func newINTEnableCmd(a *app) *cobra.Command {
	var (
		peers  []string
		cgroup string
		tag    string
		slots  int
		asJSON bool
	)
	c := &cobra.Command{
		Use:   "enable --peers PREFIX[,PREFIX...] [--cgroup PATH] [--tag every|nth=N|tso-head]",
		Short: "Tag data to in-datacenter peers with the INT option, and echo it",
		Long: `Attach the INT sockops program to a cgroup (the cgroup v2 root by default,
which covers every socket on the host). Connections to peers in --peers get
the option: data segments carry empty hop slots for INT hops to fill, and
ACKs echo the filled records back to the sender, where powertcp reads them.
Connections to anything else never carry it, so the experimental option
does not leave the datacenter; with no --peers nothing is tagged.

Tagging policy: every data segment (every), one in N (nth=N), or only
segments of more than one MSS (tso-head). Options that differ per packet stop
GRO from merging segments at the receiver: tagging fewer segments costs
less CPU there, at the price of fewer telemetry samples.

Running it again replaces the peers and policy in place.`,
		Example: `  ccload int enable --peers 198.18.0.0/15,fd00::/8
  ccload int enable --peers 10.0.0.0/8 --tag nth=4`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			cfg := loader.INTConfig{Cgroup: cgroup, Slots: slots}
			for _, p := range peers {
				pfx, err := netip.ParsePrefix(strings.TrimSpace(p))
				if err != nil {
					return usageError{cmd: "enable", err: fmt.Errorf("--peers %q: %w", p, err)}
				}
				cfg.Peers = append(cfg.Peers, pfx)
			}
			var err error
			if cfg.Every, cfg.TSOOnly, err = parseTag(tag); err != nil {
				return usageError{cmd: "enable", err: err}
			}
			st, err := a.loader().EnableINT(cfg)
			if err != nil {
				return fmt.Errorf("int enable: %w", err)
			}
			if asJSON {
				return a.printJSON(st)
			}
			for _, n := range st.Notes {
				fmt.Fprintf(a.out, "note: %s\n", n)
			}
			fmt.Fprintf(a.out, "INT enabled on %s for %s (%d hop slots, tag %s)\n", st.Cgroup,
				strings.Join(st.Peers, ", "), st.Slots, tag)
			return nil
		},
	}
	c.Flags().StringSliceVar(&peers, "peers", nil, "the datacenter's prefixes; only connections to them are tagged")
	c.Flags().StringVar(&cgroup, "cgroup", "", "cgroup v2 directory to attach to (default: the cgroup2 root)")
	c.Flags().StringVar(&tag, "tag", "every", "which data segments carry the option: every, nth=N or tso-head")
	c.Flags().IntVar(&slots, "slots", 3, "hop slots per option, 1-4 (3 fit beside TCP timestamps)")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func newINTDisableCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "disable",
		Short: "Stop tagging and echoing",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			was, err := a.loader().DisableINT()
			if err != nil {
				return fmt.Errorf("int disable: %w", err)
			}
			if !was {
				fmt.Fprintln(a.out, "INT is not enabled; nothing to do")
				return nil
			}
			fmt.Fprintln(a.out, "INT disabled")
			return nil
		},
	}
}

func newINTStatusCmd(a *app) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status",
		Short: "Show whether INT is enabled, for which peers, and its counters",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			st, err := a.loader().INTStatus()
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(st)
			}
			if !st.Enabled {
				fmt.Fprintln(a.out, "INT is not enabled (ccload int enable --peers PREFIX...)")
				return nil
			}
			fmt.Fprintf(a.out, "INT enabled on %s\npeers: %s\nslots: %d, tag one data segment in %d", st.Cgroup,
				strings.Join(st.Peers, ", "), st.Slots, st.Every)
			if st.TSOOnly {
				fmt.Fprint(a.out, ", TSO bursts only")
			}
			fmt.Fprintln(a.out)
			for _, n := range st.Notes {
				fmt.Fprintf(a.out, "note: %s\n", n)
			}
			keys := make([]string, 0, len(st.Stats))
			for k := range st.Stats {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			for _, k := range keys {
				fmt.Fprintf(tw, "  %s\t%d\n", k, st.Stats[k])
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func newINTHopCmd(a *app) *cobra.Command {
	var (
		iface, rate, buffer, burst, ecn string
		duration                        time.Duration
		asJSON                          bool
	)
	c := &cobra.Command{
		Use:   "hop --iface IF --rate RATE [--buffer SIZE] [--ecn-threshold SIZE]",
		Short: "Run a software INT hop on a forwarding interface",
		Long: `Attach the INT hop to the egress of IF (TCX on 6.6+, clsact before) and
keep it there while this command runs (Ctrl-C, or --duration, ends it and
detaches it). Every forward INT option that leaves through IF gets this
hop's record: the queue length, bytes sent, a timestamp and the link rate.

The queue length comes from a model of the shaper on IF: give the shaper's
rate, burst and buffer (the htb class's rate and burst, as
'tc -d class show dev IF' prints them, and its leaf's limit). A burst
smaller than the shaper's makes the model report queue that is not there.
The rate must be one of the INT rate codes: 100mbit, 1gbit, 2.5gbit, 5gbit, 10gbit, 25gbit,
40gbit, 50gbit, 100gbit, 200gbit, 400gbit, 800gbit.

--ecn-threshold also marks CE on ECT packets that find more than that
queued, DCTCP style.

It prints the hop's counters every second (--json: one JSON object per line).`,
		Example: `  ccload int hop --iface eth1 --rate 1gbit --burst 126600 --buffer 1MiB
  ccload int hop --iface eth1 --rate 10gbit --buffer 4MiB --ecn-threshold 60KB --duration 30s`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			if iface == "" {
				return usageError{cmd: "hop", err: fmt.Errorf("--iface is required")}
			}
			bps, err := loader.ParseBandwidth(rate)
			if err != nil {
				return usageError{cmd: "hop", err: fmt.Errorf("--rate: %w", err)}
			}
			buf, err := loader.ParseBytes(buffer)
			if err != nil {
				return usageError{cmd: "hop", err: fmt.Errorf("--buffer: %w", err)}
			}
			bucket, err := loader.ParseBytes(burst)
			if err != nil {
				return usageError{cmd: "hop", err: fmt.Errorf("--burst: %w", err)}
			}
			var k uint64
			if ecn != "" {
				if k, err = loader.ParseBytes(ecn); err != nil {
					return usageError{cmd: "hop", err: fmt.Errorf("--ecn-threshold: %w", err)}
				}
			}
			hop, err := loader.NewHop(loader.HopConfig{Iface: iface, RateBps: bps, BufferBytes: uint32(buf),
				BurstBytes: uint32(bucket), ECNThreshold: uint32(k)})
			if err != nil {
				return fmt.Errorf("int hop: %w", err)
			}
			defer hop.Close()
			ctx, cancel := runContext(c, duration)
			defer cancel()
			if !asJSON {
				fmt.Fprintf(a.out, "INT hop on %s (%s), %s, buffer %d B; Ctrl-C detaches it\n", iface, hop.Method(), rate, buf)
			}
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-tick.C:
				}
				s, err := hop.Stats()
				if err != nil {
					return err
				}
				if asJSON {
					if err := a.printJSONLine(s); err != nil {
						return err
					}
					continue
				}
				fmt.Fprintf(a.out, "packets %d  records %d  full %d  malformed %d  ce %d  model backlog %d B  drops %d\n",
					s.Packets, s.Records, s.Full, s.Malformed, s.CEMarked, s.BacklogBytes, s.DroppedPackets)
			}
		},
	}
	c.Flags().StringVar(&iface, "iface", "", "the forwarding interface")
	c.Flags().StringVar(&rate, "rate", "", "the shaper's rate on the interface (an INT rate code)")
	c.Flags().StringVar(&buffer, "buffer", "1MiB", "the shaper's queue limit")
	c.Flags().StringVar(&burst, "burst", "1514", "the shaper's bucket (htb/tbf burst)")
	c.Flags().StringVar(&ecn, "ecn-threshold", "", "mark CE above this many queued bytes (off when empty)")
	c.Flags().DurationVar(&duration, "duration", 0, "detach after this long (0: until interrupted)")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON lines")
	return c
}
