package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ccload/ccload/bench"
	"github.com/ccload/ccload/internal/units"
)

func newDemoCmd(a *app) *cobra.Command {
	var (
		rate, buffer, size string
		ccs                []string
		asJSON             bool
	)
	c := &cobra.Command{
		Use:   "demo",
		Short: "Run θ-PowerTCP against the kernel's CCs through an emulated bottleneck",
		Long: `Build a sender -> router -> receiver path out of network namespaces, the
router shaping to --rate with htb and a --buffer byte queue, then send one
long flow with each CC in --cc, one after the other, and report what the
kernel ran, the throughput, and the router's queue (sampled every 500us,
after the first fifth of each flow).

ccload's own CCs in --cc are attached for the demo if they are not attached
already, and detached again at the end. Everything the demo builds is torn
down when it ends, also on Ctrl-C. Traffic stays inside the namespaces
(198.18.0.0/15).`,
		Example: `  ccload demo
  ccload demo --cc cubic,bbr,reno,theta_powertcp --rate 2gbit --json`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			rateBps, err := units.ParseBandwidth(rate)
			if err != nil {
				return usage(c, fmt.Errorf("--rate: %w", err))
			}
			bufBytes, err := units.ParseBytes(buffer)
			if err != nil {
				return usage(c, fmt.Errorf("--buffer: %w", err))
			}
			bytes, err := units.ParseBytes(size)
			if err != nil {
				return usage(c, fmt.Errorf("--bytes: %w", err))
			}
			ctx, stop := runContext(c, 0)
			defer stop()
			var progress io.Writer
			if !asJSON {
				progress = a.out
			}
			rows, err := bench.Demo(ctx, a.loader(), bench.DemoConfig{CCs: ccs, RateBps: rateBps,
				BufferBytes: uint32(bufBytes), FlowBytes: int64(bytes)}, progress)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(struct {
					RateBps     uint64          `json:"bottleneck_bps"`
					BufferBytes uint64          `json:"buffer_bytes"`
					FlowBytes   uint64          `json:"flow_bytes"`
					Results     []bench.DemoRow `json:"results"`
				}{rateBps, bufBytes, bytes, rows})
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "cc\tkernel ran\tMbit/s\tqueue mean\t(delay)\tp50\tp99\tmax\tsrtt\tretrans\tdsacks\tdrops\t")
			for _, r := range rows {
				delay := time.Duration(r.QueueMeanBytes * 8 / float64(rateBps) * float64(time.Second))
				fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0fKB\t%v\t%.0fKB\t%.0fKB\t%.0fKB\t%dus\t%d\t%d\t%d\t\n", r.CC, r.KernelCC,
					r.ThroughputBps/1e6, r.QueueMeanBytes/1e3, delay.Round(time.Microsecond), r.QueueP50Bytes/1e3,
					r.QueueP99Bytes/1e3, r.QueueMaxBytes/1e3, r.SRTTMicros, r.Retransmits, r.DSACKs, r.QueueDrops)
			}
			tw.Flush()
			fmt.Fprintln(a.out, "\nqueue: the router's qdisc backlog, sampled every 500us after each flow's first fifth.")
			fmt.Fprintln(a.out, "dsacks: retransmissions the receiver already had (spurious); drops: packets the router's queue dropped.")
			return nil
		},
	}
	c.Flags().StringVar(&rate, "rate", "1gbit", "bottleneck rate")
	c.Flags().StringVar(&buffer, "buffer", "1MiB", "bottleneck buffer")
	c.Flags().StringVar(&size, "bytes", "192MiB", "bytes each flow sends")
	c.Flags().StringSliceVar(&ccs, "cc", []string{"cubic", "bbr", "theta_powertcp"}, "CCs to run, in order")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
