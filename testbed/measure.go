package testbed

import (
	"context"
	"fmt"
	"net/netip"
	"time"
)

// Measurement is one flow across a dumbbell's bottleneck, with the
// bottleneck queue sampled while it ran.
type Measurement struct {
	Flow    FlowResult
	Samples []QueueSample
}

// Window summarises the queue samples taken in [from, to) after sampling
// started (shortly before the flow's connect).
func (m Measurement) Window(from, to time.Duration) QueueStats {
	var in []QueueSample
	for _, s := range m.Samples {
		if s.At >= from && s.At < to {
			in = append(in, s)
		}
	}
	return Summarize(in)
}

// Steady summarises the queue after the first fifth of the flow, once
// the start-up transient (slow start, or a line-rate start) is over.
func (m Measurement) Steady() QueueStats {
	return m.Window(m.Flow.Duration/5, m.Flow.Duration)
}

// MeasureFlow sends one flow from sender i to dst and samples the
// bottleneck queue every interval while it runs.
func (d *Dumbbell) MeasureFlow(ctx context.Context, i int, dst netip.AddrPort, cfg FlowConfig, interval time.Duration) (Measurement, error) {
	if i < 0 || i >= len(d.Senders) {
		return Measurement{}, fmt.Errorf("measure flow: no sender %d (have %d)", i, len(d.Senders))
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	maxSamples := int(cfg.Timeout/interval) + 1
	ch, err := SampleQueue(sctx, d.Router, d.BottleneckIface, interval, maxSamples)
	if err != nil {
		return Measurement{}, fmt.Errorf("measure flow: %w", err)
	}
	flow, err := SendFlow(ctx, d.Senders[i], dst, cfg)
	stop()
	samples := <-ch
	if err != nil {
		return Measurement{}, fmt.Errorf("measure flow: %w", err)
	}
	return Measurement{Flow: flow, Samples: samples}, nil
}
