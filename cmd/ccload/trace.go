package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/ccload/ccload/loader"
)

func newTraceCmd(a *app) *cobra.Command {
	var (
		asCSV, asJSON bool
		duration      time.Duration
		limit         int
		iface         string
	)
	c := &cobra.Command{
		Use:   "trace NAME|onramp [--csv|--json] [--duration 5s]",
		Short: "Stream what a CC, or On-Ramp, sees and does on every ACK",
		Long: `Stream one record per ACK from an attached theta_powertcp, powertcp or hpcc:
time, flow, window (packets and bytes), the control signal (normalised power
Γ for PowerTCP, inflight U for HPCC), the largest hop queue in the INT echo,
the ACK's RTT sample, the pacing rate, and whether the CC used INT or the
RTT. Tracing costs the CC a ring-buffer write per ACK only while this runs.
One tracer at a time sees the records.

'ccload trace onramp [--iface IF]' streams On-Ramp's sender control instead:
one record per echo, with the one-way delay O, the pause P asserted since
the echoed packet left, β, the threshold T, the pause this echo added, how
long the flow is held from now (t_next), the packet's RTT, and flags
(paused, clamped, beta: β measured, stale, no_clock, observed, and
coarse_clock: ignored, because the clock agent's error for the peer is more
than half of T).`,
		Example: `  ccload trace powertcp --duration 5s
  ccload trace hpcc --csv > hpcc.csv
  ccload trace onramp --iface eth0 --count 100`,
		Args: exactArgs(1, "one CC name, or onramp"),
		RunE: func(c *cobra.Command, args []string) error {
			if asCSV && asJSON {
				return usage(c, fmt.Errorf("--csv and --json exclude each other"))
			}
			ctx, stopRun := runContext(c, duration)
			defer stopRun()
			ctx, cancel := context.WithCancel(ctx) // --count stops early
			defer cancel()
			if args[0] == "onramp" {
				return a.traceOnRamp(ctx, cancel, iface, asCSV, asJSON, limit)
			}
			if iface != "" {
				return usage(c, fmt.Errorf("--iface is for 'trace onramp' only"))
			}
			// Open first: a CC that is not attached is an error before
			// anything is printed.
			tr, err := a.loader().OpenTrace(args[0])
			if err != nil {
				return fmt.Errorf("trace %s: %w", args[0], err)
			}
			defer tr.Close()
			w := csv.NewWriter(a.out)
			if asCSV {
				w.Write([]string{"time", "flow", "snd_cwnd", "cwnd_bytes", "signal", "qlen_bytes", "rtt_us", "pacing_mbps", "mode"})
			} else if !asJSON {
				fmt.Fprintf(a.out, "%-15s %-44s %8s %10s %8s %9s %8s %8s %4s\n", "time", "flow", "cwnd", "cwnd B", "signal", "qlen B", "rtt us", "Mbit/s", "mode")
			}
			n := 0
			err = tr.Run(ctx, func(e loader.TraceEvent) error {
				if limit > 0 && n >= limit {
					return nil // draining what was read before the stop
				}
				switch {
				case asJSON:
					if err := a.printJSONLine(e); err != nil {
						return err
					}
				case asCSV:
					w.Write([]string{e.Time.Format(time.RFC3339Nano), e.Flow, strconv.Itoa(int(e.SndCwnd)),
						strconv.FormatUint(e.CwndBytes, 10), strconv.FormatFloat(e.Signal, 'f', 4, 64),
						strconv.Itoa(int(e.QlenBytes)), strconv.FormatInt(e.RTT.Microseconds(), 10),
						strconv.Itoa(int(e.PacingMbps)), e.Mode})
				default:
					fmt.Fprintf(a.out, "%-15s %-44s %8d %10d %8.3f %9d %8d %8d %4s\n", e.Time.Format("15:04:05.000000"),
						e.Flow, e.SndCwnd, e.CwndBytes, e.Signal, e.QlenBytes, e.RTT.Microseconds(), e.PacingMbps, e.Mode)
				}
				if n++; limit > 0 && n >= limit {
					cancel()
				}
				return nil
			})
			w.Flush()
			if err != nil {
				return fmt.Errorf("trace %s: %w", args[0], err)
			}
			return w.Error()
		},
	}
	c.Flags().BoolVar(&asCSV, "csv", false, "print CSV")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON lines")
	c.Flags().DurationVar(&duration, "duration", 0, "stop after this long (0: until interrupted)")
	c.Flags().IntVar(&limit, "count", 0, "stop after this many records (0: no limit)")
	c.Flags().StringVar(&iface, "iface", "", "with onramp: the interface (default: the only one with On-Ramp)")
	return c
}
