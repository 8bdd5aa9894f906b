package main

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ccload/ccload/internal/units"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/testbed"
)

// demoRow is one CC's result in `ccload demo`.
type demoRow struct {
	CC             string  `json:"cc"`
	KernelCC       string  `json:"kernel_cc"`
	ThroughputBps  float64 `json:"throughput_bps"`
	QueueMeanBytes float64 `json:"queue_mean_bytes"`
	QueueP50Bytes  float64 `json:"queue_p50_bytes"`
	QueueP99Bytes  float64 `json:"queue_p99_bytes"`
	QueueMaxBytes  float64 `json:"queue_max_bytes"`
	SRTTMicros     uint32  `json:"srtt_us"`
	Retransmits    uint32  `json:"retransmits"`
	DSACKs         uint32  `json:"dsack_dups"` // retransmissions the receiver reported as duplicates
	Reordering     uint32  `json:"reordering"` // TCP's reordering estimate, in segments
	QueueDrops     uint32  `json:"queue_drops"`
}

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
			rows, err := a.runDemo(ctx, ccs, rateBps, uint32(bufBytes), int64(bytes), !asJSON)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(struct {
					RateBps     uint64    `json:"bottleneck_bps"`
					BufferBytes uint64    `json:"buffer_bytes"`
					FlowBytes   uint64    `json:"flow_bytes"`
					Results     []demoRow `json:"results"`
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

func (a *app) runDemo(ctx context.Context, ccs []string, rate uint64, buffer uint32, bytes int64, progress bool) (_ []demoRow, err error) {
	say := func(format string, args ...any) {
		if progress {
			fmt.Fprintf(a.out, format+"\n", args...)
		}
	}
	l := a.loader()
	builtin := map[string]bool{}
	for _, cc := range loader.Builtin() {
		builtin[cc.Name] = true
	}
	kernel, err := l.KernelCCs()
	if err != nil {
		return nil, err
	}
	for _, name := range ccs {
		if builtin[name] {
			res, err := l.Attach(loader.AttachRequest{Name: name})
			if err != nil {
				return nil, fmt.Errorf("attach %s: %w", name, err)
			}
			if !res.AlreadyAttached {
				say("attached %s for the demo (%s)", name, loader.ParamsString(res.Params))
				defer func() {
					if _, derr := l.Detach(name); derr != nil && err == nil {
						err = fmt.Errorf("detach %s after the demo: %w", name, derr)
					}
				}()
			}
		} else if !strings.Contains(" "+strings.Join(kernel, " ")+" ", " "+name+" ") {
			return nil, fmt.Errorf("the kernel has no congestion control %q (it has: %s)", name, strings.Join(kernel, " "))
		}
	}

	say("building sender -> router -> receiver: %s bottleneck, %d KiB buffer", units.FormatBandwidth(rate), buffer>>10)
	d, err := testbed.NewDumbbell(ctx, testbed.DumbbellConfig{Senders: 1, BottleneckRate: rate, BufferBytes: buffer})
	if err != nil {
		return nil, fmt.Errorf("build the demo topology: %w", err)
	}
	defer func() {
		if cerr := d.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("tear down the demo topology: %w", cerr)
		}
	}()
	sink, err := testbed.StartSink(d.Receiver, netip.AddrPortFrom(d.Receiver.Addr, 0))
	if err != nil {
		return nil, err
	}
	defer sink.Close()

	// Give each flow room to run at a tenth of the bottleneck rate.
	timeout := time.Duration(float64(bytes*8*10)/float64(rate)*float64(time.Second)) + 10*time.Second
	var rows []demoRow
	for i, name := range ccs {
		say("flow %d/%d: %s, %d MiB", i+1, len(ccs), name, bytes>>20)
		m, err := d.MeasureFlow(ctx, 0, sink.Addr, testbed.FlowConfig{
			CC: name, Bytes: bytes, Seed: uint64(i + 1), Timeout: timeout,
		}, 500*time.Microsecond)
		if err != nil {
			return nil, fmt.Errorf("flow with %s: %w", name, err)
		}
		q := m.Steady()
		var drops uint32
		if n := len(m.Samples); n > 0 {
			drops = m.Samples[n-1].Drops - m.Samples[0].Drops
		}
		rows = append(rows, demoRow{
			CC: name, KernelCC: m.Flow.CC, ThroughputBps: m.Flow.Throughput,
			QueueMeanBytes: q.Mean, QueueP50Bytes: q.P50, QueueP99Bytes: q.P99, QueueMaxBytes: q.Max,
			SRTTMicros: m.Flow.Info.Rtt, Retransmits: m.Flow.Info.Total_retrans,
			DSACKs: m.Flow.Info.Dsack_dups, Reordering: m.Flow.Info.Reordering, QueueDrops: drops,
		})
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	results, err := sink.WaitResults(wctx, len(ccs))
	if err != nil {
		return nil, fmt.Errorf("receiver: %w", err)
	}
	for _, r := range results {
		if !r.OK {
			return nil, fmt.Errorf("receiver got a corrupt or short stream from %s: %v", r.Remote, r.Err)
		}
	}
	say("all %d flows arrived intact\n", len(results))
	return rows, nil
}
