package testbed

import (
	"context"
	"fmt"
	"io"
	"time"
)

// BottleneckConfig configures one bottleneck queue: the shaper and the
// queue on a router's egress interface. DumbbellConfig carries the same
// settings as flat fields; see there for their full meaning.
type BottleneckConfig struct {
	// Rate is the shaped rate in bits/s. 0 means no shaping: the interface
	// then gets a plain bfifo root qdisc with limit BufferBytes.
	Rate uint64
	// BufferBytes is the byte limit of the queue. 0 means
	// DefaultBufferBytes.
	BufferBytes uint32
	// ECNThreshold, when positive, makes the queue a DCTCP-style step
	// marker (see DumbbellConfig.ECNThreshold). It needs a non-zero Rate.
	ECNThreshold time.Duration
}

func (c BottleneckConfig) withDefaults() BottleneckConfig {
	if c.BufferBytes == 0 {
		c.BufferBytes = DefaultBufferBytes
	}
	return c
}

// validate checks a configuration with defaults filled in.
func (c BottleneckConfig) validate() error {
	if c.Rate != 0 && c.Rate < minBottleneckRate {
		return fmt.Errorf("bottleneck rate must be 0 or at least %d bit/s, got %d", minBottleneckRate, c.Rate)
	}
	if c.BufferBytes < minBufferBytes {
		return fmt.Errorf("buffer must be at least %d bytes, got %d", minBufferBytes, c.BufferBytes)
	}
	if c.ECNThreshold != 0 {
		if c.Rate == 0 {
			return fmt.Errorf("ecn threshold %v needs a bottleneck rate", c.ECNThreshold)
		}
		if c.ECNThreshold < minECNThreshold || c.ECNThreshold > maxECNThreshold {
			return fmt.Errorf("ecn threshold must be 0 or between %v and %v, got %v", minECNThreshold, maxECNThreshold, c.ECNThreshold)
		}
	}
	return nil
}

// BurstBytes is the size of the shaper's htb bucket: what it sends at once
// after an idle spell (see newHTBClassParams). A model of the bottleneck,
// such as the INT hop's, needs it to match the real queue. It is 0 when
// Rate is 0.
func (c BottleneckConfig) BurstBytes() uint32 {
	if c.Rate == 0 {
		return 0
	}
	return uint32(c.Rate/8*burstTimeNs/1e9 + burstMTU)
}

// ECNThresholdBytes is the marking threshold K in bytes that ECNThreshold
// amounts to at Rate: ECNThreshold·Rate/8. It is 0 when either is 0.
func (c BottleneckConfig) ECNThresholdBytes() uint64 {
	if c.ECNThreshold <= 0 || c.Rate == 0 {
		return 0
	}
	return uint64(c.ECNThreshold.Seconds() * float64(c.Rate) / 8)
}

// Bottleneck is one installed bottleneck queue: where it is and how it is
// configured. SampleQueue reads it; an INT hop attaches to Iface inside
// Host's netns with Rate, BufferBytes and BurstBytes.
type Bottleneck struct {
	// Host is the router whose egress this is.
	Host *Host
	// Iface is the egress interface inside Host's netns.
	Iface string
	// Rate is the shaped rate in bits/s; 0 means unshaped (bfifo only).
	Rate uint64
	// BufferBytes is the queue's byte limit.
	BufferBytes uint32
	// BurstBytes is the htb bucket size (BottleneckConfig.BurstBytes).
	BurstBytes uint32
	// ECNThreshold is the step marker's threshold; 0 means no marking.
	ECNThreshold time.Duration
}

// SampleQueue samples this bottleneck's queue; see the package function
// SampleQueue.
func (b Bottleneck) SampleQueue(ctx context.Context, interval time.Duration, maxSamples int) (<-chan []QueueSample, error) {
	return SampleQueue(ctx, b.Host, b.Iface, interval, maxSamples)
}

// installBottleneckOn installs the qdiscs of cfg (defaults filled in) on
// interface iface of router h and describes the result.
func installBottleneckOn(ctx context.Context, h *Host, iface string, cfg BottleneckConfig) (Bottleneck, error) {
	if err := ctx.Err(); err != nil {
		return Bottleneck{}, fmt.Errorf("install bottleneck qdisc on %s in netns %s: %w", iface, h.Name, err)
	}
	spec := bottleneckSpec{rateBits: cfg.Rate, limit: cfg.BufferBytes, ecnThreshold: cfg.ECNThreshold}
	if err := installBottleneck(h, iface, spec); err != nil {
		return Bottleneck{}, err
	}
	return Bottleneck{
		Host:         h,
		Iface:        iface,
		Rate:         cfg.Rate,
		BufferBytes:  cfg.BufferBytes,
		BurstBytes:   cfg.BurstBytes(),
		ECNThreshold: cfg.ECNThreshold,
	}, nil
}

// EgressFunc attaches a per-host egress shim (for example a pacer or an
// admission controller) to interface iface of host h, a sender's uplink.
// The topology constructors call it once per sender, after the whole
// topology, bottlenecks included, is built and all interfaces are up and
// routed. Set up whatever is needed from inside h's netns with h.Do.
//
// The returned io.Closer, if not nil, is closed by the topology's Close
// (and by a constructor that fails later on) before any link or namespace
// is deleted, in reverse order of attachment. An error fails the
// constructor, which then tears the whole topology down; the shim must
// undo its own partial work before returning an error, since its closer is
// not used then.
type EgressFunc func(ctx context.Context, h *Host, iface string) (io.Closer, error)
