package bench

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/ccload/ccload/internal/units"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/testbed"
)

// DemoRow is one CC's result in `ccload demo`.
type DemoRow struct {
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

// DemoConfig is what `ccload demo` runs.
type DemoConfig struct {
	// CCs get one long flow each, in order.
	CCs []string
	// RateBps and BufferBytes are the router's shaper.
	RateBps     uint64
	BufferBytes uint32
	// FlowBytes is what each flow sends.
	FlowBytes int64
}

// DemoSampleEvery is how often the demo samples the router's queue.
const DemoSampleEvery = 500 * time.Microsecond

// Demo builds sender -> router -> receiver, the router shaping to
// cfg.RateBps, and sends one long flow with each CC in cfg.CCs, one after
// the other. ccload's CCs are attached for the demo if they are not
// attached already, and detached again at the end; the topology is torn
// down, also when ctx ends. progress, if not nil, hears of each step.
func Demo(ctx context.Context, l *loader.Loader, cfg DemoConfig, progress io.Writer) (_ []DemoRow, err error) {
	say := func(format string, args ...any) {
		if progress != nil {
			fmt.Fprintf(progress, format+"\n", args...)
		}
	}
	restore, err := AttachForRun(l, cfg.CCs, "the demo", nil, func(a Attached) {
		if !a.AlreadyAttached {
			say("attached %s for the demo (%s)", a.Name, loader.ParamsString(a.Params))
		}
	})
	defer func() {
		if rerr := restore(); rerr != nil && err == nil {
			err = rerr
		}
	}()
	if err != nil {
		return nil, err
	}
	rate, buffer, bytes := cfg.RateBps, cfg.BufferBytes, cfg.FlowBytes
	ccs := cfg.CCs

	say("building sender -> router -> receiver: %s bottleneck, %d KiB buffer", units.FormatBandwidth(rate), buffer>>10)
	d, err := testbed.NewDumbbell(ctx, testbed.DumbbellConfig{Senders: 1, BottleneckRate: rate, BufferBytes: buffer, SteerFlows: true})
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
	var rows []DemoRow
	for i, name := range ccs {
		say("flow %d/%d: %s, %d MiB", i+1, len(ccs), name, bytes>>20)
		m, err := d.MeasureFlow(ctx, 0, sink.Addr, testbed.FlowConfig{
			CC: name, Bytes: bytes, Seed: uint64(i + 1), Timeout: timeout,
		}, DemoSampleEvery)
		if err != nil {
			return nil, fmt.Errorf("flow with %s: %w", name, err)
		}
		q := m.Steady()
		var drops uint32
		if n := len(m.Samples); n > 0 {
			drops = m.Samples[n-1].Drops - m.Samples[0].Drops
		}
		rows = append(rows, DemoRow{
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
