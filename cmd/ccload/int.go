package main

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ccload/ccload/internal/scope"
	"github.com/ccload/ccload/internal/units"
	"github.com/ccload/ccload/telemetry/hop"
	"github.com/ccload/ccload/telemetry/sockops"
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

// parsePeers reads --peers: prefixes such as 198.18.0.0/15 or fd00::/8.
func parsePeers(peers []string) ([]netip.Prefix, error) {
	out, err := scope.ParsePrefixes(peers)
	if err != nil {
		return nil, fmt.Errorf("--peers: %w", err)
	}
	return out, nil
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
segments of more than one MSS (tso-head). Each set of records is echoed
once, so the ACKs between two tagged segments carry no echo. Options that
differ per packet stop GRO from merging segments at the receiver: tagging
fewer segments costs less CPU, at the price of fewer telemetry samples.
In ccload's bench, nth=4 cut INT's sockops work per ACK by a fifth to a
half, and powertcp and hpcc kept their utilisation (docs/benchmarks.md,
"INT: tagging one data skb in four").

Running it again replaces the peers and policy in place.`,
		Example: `  ccload int enable --peers 198.18.0.0/15,fd00::/8
  ccload int enable --peers 10.0.0.0/8 --tag nth=4`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			cfg := sockops.Config{Cgroup: cgroup, Slots: slots}
			var err error
			if cfg.Peers, err = parsePeers(peers); err != nil {
				return usage(c, err)
			}
			if cfg.Every, cfg.TSOOnly, err = sockops.ParseTag(tag); err != nil {
				return usage(c, fmt.Errorf("--%w", err))
			}
			st, err := a.int().Enable(cfg)
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
			was, err := a.int().Disable()
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

// intStatusJSON is what 'int status --json' prints: INTStatus as before,
// plus the INT hops of this network namespace.
type intStatusJSON struct {
	*sockops.Status
	Hops      []hop.Status `json:"hops"`
	HopsError string       `json:"hops_error,omitempty"`
}

func newINTStatusCmd(a *app) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status",
		Short: "Show whether INT is enabled, for which peers, the INT hops, and their counters",
		Long: `Show whether the INT sockops program is enabled (ccload int enable), for
which peers, with its counters; then the INT hops pinned in this network
namespace (ccload int hop): interface, how they are attached, the shaper
they model, and their counters.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			st, err := a.int().Status()
			if err != nil {
				return err
			}
			hops, herr := a.hops().List()
			if asJSON {
				out := intStatusJSON{Status: st, Hops: hops}
				if herr != nil {
					out.HopsError = herr.Error()
				}
				if out.Hops == nil {
					out.Hops = []hop.Status{}
				}
				return a.printJSON(out)
			}
			if err := a.printINTStatus(st); err != nil {
				return err
			}
			fmt.Fprintln(a.out)
			if herr != nil {
				fmt.Fprintf(a.out, "note: cannot list the INT hops: %v\n", herr)
				return nil
			}
			return a.printHops(hops)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// printINTStatus prints the sockops side of 'int status'.
func (a *app) printINTStatus(st *sockops.Status) error {
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
}

// printHops prints the INT hops of this network namespace as a table.
func (a *app) printHops(hops []hop.Status) error {
	if len(hops) == 0 {
		fmt.Fprintln(a.out, "no INT hops in this network namespace (ccload int hop --iface IF --rate RATE)")
		return nil
	}
	fmt.Fprintln(a.out, "INT hops in this network namespace:")
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  IFACE\tMETHOD\tATTACHED\tRATE\tBUFFER\tBURST\tECN\tPACKETS\tRECORDS\tFULL\tMALFORMED\tCE\tBACKLOG\tDROPS")
	for _, h := range hops {
		ecn := "off"
		if h.ECNThreshold > 0 {
			ecn = fmt.Sprintf("%dB", h.ECNThreshold)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%dB\t%dB\t%s\t%d\t%d\t%d\t%d\t%d\t%dB\t%d\n",
			h.Iface, h.Method, yesNo(h.Attached), h.Rate, h.BufferBytes, h.BurstBytes, ecn,
			h.Stats.Packets, h.Stats.Records, h.Stats.Full, h.Stats.Malformed, h.Stats.CEMarked,
			h.Stats.BacklogBytes, h.Stats.DroppedPackets)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, h := range hops {
		for _, n := range h.Notes {
			fmt.Fprintf(a.out, "note: %s: %s\n", h.Iface, n)
		}
	}
	return nil
}

// hopFlags are the flags of 'int hop'.
type hopFlags struct {
	iface, rate, buffer, burst, ecn string
	duration                        time.Duration
	off, foreground, asJSON, ackPad bool
}

// hopConfigFlags are the flags that describe a hop, which --off refuses.
func hopConfigFlags() []string {
	return []string{"rate", "buffer", "burst", "ecn-threshold", "ack-padding", "foreground", "duration"}
}

// config reads the hop's config from the flags.
func (f *hopFlags) config() (hop.Config, error) {
	cfg := hop.Config{Iface: f.iface, ACKPadding: f.ackPad}
	if f.rate == "" {
		return cfg, fmt.Errorf("--rate is required: the rate of the shaper on %s, e.g. 1gbit", f.iface)
	}
	var err error
	if cfg.RateBps, err = units.ParseBandwidth(f.rate); err != nil {
		return cfg, fmt.Errorf("--rate: %w", err)
	}
	sizes := []struct {
		flag, val string
		dst       *uint32
	}{
		{"buffer", f.buffer, &cfg.BufferBytes},
		{"burst", f.burst, &cfg.BurstBytes},
		{"ecn-threshold", f.ecn, &cfg.ECNThreshold},
	}
	for _, s := range sizes {
		if s.val == "" {
			continue
		}
		n, err := units.ParseBytes(s.val)
		if err != nil {
			return cfg, fmt.Errorf("--%s: %w", s.flag, err)
		}
		if n > 1<<32-1 {
			return cfg, fmt.Errorf("--%s %s is too large: at most 4GiB", s.flag, s.val)
		}
		*s.dst = uint32(n)
	}
	return cfg, nil
}

func newINTHopCmd(a *app) *cobra.Command {
	var f hopFlags
	c := &cobra.Command{
		Use:   "hop --iface IF (--rate RATE [--buffer SIZE] [--burst SIZE] [--ecn-threshold SIZE] | --off)",
		Short: "Attach a software INT hop to a forwarding interface (it stays after ccload exits), or remove it",
		Long: `Attach the INT hop to the egress of IF (TCX on 6.6+, clsact before), pin
it under <bpffs>/ccload/hop/ and exit: the hop keeps running after ccload
exits, until 'ccload int hop --iface IF --off' removes it (or IF is
deleted). Every forward INT option that leaves through IF gets this hop's
record: the queue length, bytes sent, a timestamp and the link rate.
'ccload int status' lists the hops of this network namespace with their
counters.

An interface has one hop at most: attaching a second one fails; to change
the settings, remove the hop and attach it again.

--off removes the hop of IF: it detaches it and removes its pins, also
those left from an interface called IF that was deleted since. When IF has
no hop it says so and exits 0, so that it is safe in scripts and config
management. --off takes no other flag but --json.

--foreground keeps the hop only while the command runs, without pinning
it, and prints its counters every second (--json: one JSON object per
line); Ctrl-C, SIGTERM or --duration (which implies --foreground) end it
and detach the hop.

The queue length comes from a model of the shaper on IF: give the shaper's
rate, burst and buffer (the htb class's rate and burst, as
'tc -d class show dev IF' prints them, and its leaf's limit). A burst
smaller than the shaper's makes the model report queue that is not there.
The rate must be one of the INT rate codes: 100mbit, 1gbit, 2.5gbit, 5gbit, 10gbit, 25gbit,
40gbit, 50gbit, 100gbit, 200gbit, 400gbit, 800gbit.

--ecn-threshold also marks CE on ECT packets that find more than that
queued, DCTCP style.

--ack-padding (FastTune's ACK padding) also attaches a program to the
ingress of IF: on the receivers' ACKs coming back through IF it overwrites
this hop's record in the echoed INT option with the link's state as of that
moment. Senders then see the queue one queueing delay and one receiver
turnaround sooner. It needs the ACKs to come back through IF, as they do on
a router's port.

ccload works on the network namespace it runs in, and keeps the hops of
each namespace apart. Enter one with 'nsenter --net=/run/netns/NS ccload
...'. Not with 'ip netns exec': it gives the command a /sys of its own,
without the host's bpffs, where a pinned hop would vanish with the command
(ccload refuses to attach there; --foreground works).

Exit status: 0 on success (and for --off on an interface without a hop),
1 when attaching or removing fails, 2 on a usage error.`,
		Example: `  # attach and pin the hop, then exit; it runs until --off
  ccload int hop --iface eth1 --rate 1gbit --burst 126600 --buffer 1MiB
  ccload int hop --iface eth1 --rate 10gbit --buffer 4MiB --ecn-threshold 60KB --ack-padding

  # see it and its counters
  ccload int status

  # remove it (exits 0 when eth1 has no hop)
  ccload int hop --iface eth1 --off

  # run it in the foreground for 30 s, printing counters, then detach it
  ccload int hop --iface eth1 --rate 1gbit --duration 30s

  # in the network namespace "router"
  nsenter --net=/run/netns/router ccload int hop --iface eth1 --rate 1gbit`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			if f.iface == "" {
				return usage(c, fmt.Errorf("--iface is required: the forwarding interface"))
			}
			if f.off {
				for _, name := range hopConfigFlags() {
					if c.Flags().Changed(name) {
						return usage(c, fmt.Errorf("--off takes only --iface (and --json), not --%s", name))
					}
				}
				return a.hopOff(f.iface, f.asJSON)
			}
			cfg, err := f.config()
			if err != nil {
				return usage(c, err)
			}
			if f.foreground || f.duration > 0 {
				return a.hopForeground(c, cfg, f)
			}
			st, err := a.hops().Attach(cfg)
			if err != nil {
				return fmt.Errorf("int hop: %w", err)
			}
			if f.asJSON {
				return a.printJSON(st)
			}
			for _, n := range st.Notes {
				fmt.Fprintf(a.out, "note: %s\n", n)
			}
			ecn := ""
			if st.ECNThreshold > 0 {
				ecn = fmt.Sprintf(", CE marks above %d B", st.ECNThreshold)
			}
			if st.ACKPadding {
				ecn += ", ACK padding"
			}
			fmt.Fprintf(a.out, "INT hop attached to %s (%s), %s, buffer %d B, burst %d B%s; pinned at %s\n",
				st.Iface, st.Method, st.Rate, st.BufferBytes, st.BurstBytes, ecn, st.PinDir)
			fmt.Fprintf(a.out, "remove it with: ccload int hop --iface %s --off\n", st.Iface)
			return nil
		},
	}
	c.Flags().StringVar(&f.iface, "iface", "", "the forwarding interface: an Ethernet one (veth, NIC, bridge), not a tunnel's layer-3 device")
	c.Flags().StringVar(&f.rate, "rate", "", "the shaper's rate on the interface (an INT rate code)")
	c.Flags().StringVar(&f.buffer, "buffer", "1MiB", "the shaper's queue limit")
	c.Flags().StringVar(&f.burst, "burst", "1514", "the shaper's bucket (htb/tbf burst)")
	c.Flags().StringVar(&f.ecn, "ecn-threshold", "", "mark CE above this many queued bytes (off when empty)")
	c.Flags().BoolVar(&f.ackPad, "ack-padding", false, "also refresh this hop's record on returning ACKs (FastTune)")
	c.Flags().BoolVar(&f.off, "off", false, "remove the hop of --iface (exit 0 if it has none)")
	c.Flags().BoolVar(&f.foreground, "foreground", false, "do not pin: keep the hop while the command runs, printing counters")
	c.Flags().DurationVar(&f.duration, "duration", 0, "run in the foreground, and detach after this long")
	c.Flags().BoolVar(&f.asJSON, "json", false, "print JSON (JSON lines with --foreground)")
	return c
}

// hopOff removes the pinned hop of iface.
func (a *app) hopOff(iface string, asJSON bool) error {
	was, err := a.hops().Detach(iface)
	if err != nil {
		return fmt.Errorf("int hop --off: %w", err)
	}
	if asJSON {
		return a.printJSON(struct {
			Iface       string `json:"iface"`
			WasAttached bool   `json:"was_attached"`
		}{iface, was})
	}
	if !was {
		fmt.Fprintf(a.out, "no INT hop on %s; nothing to do\n", iface)
		return nil
	}
	fmt.Fprintf(a.out, "INT hop removed from %s\n", iface)
	return nil
}

// hopForeground runs the hop for as long as the command runs, printing
// its counters every second.
func (a *app) hopForeground(c *cobra.Command, cfg hop.Config, f hopFlags) error {
	h, err := a.hops().Foreground(cfg)
	if err != nil {
		return fmt.Errorf("int hop: %w", err)
	}
	defer h.Close()
	ctx, cancel := runContext(c, f.duration)
	defer cancel()
	if !f.asJSON {
		fmt.Fprintf(a.out, "INT hop on %s (%s), %s, buffer %d B; Ctrl-C detaches it\n", cfg.Iface, h.Method(), f.rate, cfg.BufferBytes)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		s, err := h.Stats()
		if err != nil {
			return err
		}
		if f.asJSON {
			if err := a.printJSONLine(s); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(a.out, "packets %d  records %d  full %d  malformed %d  ce %d  model backlog %d B  drops %d\n",
			s.Packets, s.Records, s.Full, s.Malformed, s.CEMarked, s.BacklogBytes, s.DroppedPackets)
	}
}
