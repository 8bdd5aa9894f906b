package workload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Arrival is one flow to start: At after the start of the run, Sender
// (an index in [0, senders)) sends Bytes bytes.
type Arrival struct {
	At     time.Duration
	Bytes  int64
	Sender int
}

// ArrivalConfig describes a Poisson flow workload. All fields are
// required.
type ArrivalConfig struct {
	// Load is the target utilisation ρ of the link, in (0, 1]: the fraction
	// of LinkBps the flows offer on average.
	Load float64
	// LinkBps is the link rate in bits per second.
	LinkBps float64
	// Sizes is the flow-size distribution.
	Sizes CDF
	// Senders is how many senders share the load; each flow picks one
	// uniformly at random.
	Senders int
	// Duration is how long arrivals keep coming: every arrival has
	// At < Duration.
	Duration time.Duration
	// MaxFlows caps the number of arrivals, so a mistaken configuration
	// cannot exhaust memory.
	MaxFlows int
	// Seed makes the sequence reproducible: the same config gives the same
	// arrivals.
	Seed uint64
}

// Rate returns the flow arrival rate λ = ρ·LinkBps / (8·mean size), in
// flows per second, after checking Load, LinkBps and Sizes.
func (c ArrivalConfig) Rate() (float64, error) {
	if !(c.Load > 0 && c.Load <= 1) {
		return 0, fmt.Errorf("workload: load %v out of range: give a target utilisation in (0, 1]", c.Load)
	}
	if !(c.LinkBps > 0) || math.IsInf(c.LinkBps, 0) {
		return 0, fmt.Errorf("workload: link rate %v bit/s invalid: give a positive, finite rate in bits per second", c.LinkBps)
	}
	mean := c.Sizes.Mean()
	if !(mean > 0) {
		return 0, errors.New("workload: flow-size distribution is empty or has mean 0: build it with NewCDF or WebSearch")
	}
	return c.Load * c.LinkBps / (8 * mean), nil
}

// Arrivals returns the flows of a Poisson workload: exponentially
// distributed gaps with rate cfg.Rate(), a size drawn from cfg.Sizes and a
// sender drawn uniformly for each flow, in order of At. It stops at the
// first arrival at or after cfg.Duration, or after cfg.MaxFlows arrivals,
// whichever comes first; a result of exactly MaxFlows arrivals therefore
// means the cap cut the run short and the load over Duration is below
// target. The sequence depends only on cfg.
func Arrivals(cfg ArrivalConfig) ([]Arrival, error) {
	lambda, err := cfg.Rate()
	if err != nil {
		return nil, err
	}
	if cfg.Senders < 1 {
		return nil, fmt.Errorf("workload: %d senders: give at least 1", cfg.Senders)
	}
	if cfg.Duration <= 0 {
		return nil, fmt.Errorf("workload: duration %v: give a positive duration", cfg.Duration)
	}
	if cfg.MaxFlows < 1 {
		return nil, fmt.Errorf("workload: max flows %d: give a cap of at least 1", cfg.MaxFlows)
	}
	// The second PCG word is a fixed constant so that one uint64 seeds the
	// whole generator.
	r := rand.New(rand.NewPCG(cfg.Seed, 0x636361646c6f6164))
	limit := cfg.Duration.Seconds()
	// Preallocate for the expected count, within the cap and a sane bound;
	// append grows the slice past that if need be.
	capacity := min(cfg.MaxFlows, 1<<16)
	if expected := lambda*limit + 1; expected < float64(capacity) {
		capacity = int(expected)
	}
	out := make([]Arrival, 0, capacity)
	t := 0.0 // seconds; kept in float64 so rounding does not accumulate
	for len(out) < cfg.MaxFlows {
		t += r.ExpFloat64() / lambda
		if t >= limit {
			break
		}
		at := time.Duration(math.Round(t * 1e9))
		if at >= cfg.Duration { // rounding up onto the end
			break
		}
		out = append(out, Arrival{
			At:     at,
			Sender: r.IntN(cfg.Senders),
			Bytes:  cfg.Sizes.Sample(r),
		})
	}
	return out, nil
}

// Incast returns fanout flows of bytes bytes each, all starting at 0, one
// from each sender 0..fanout-1: the many-to-one burst of a partition
// aggregate query. A fanout below 1 gives no flows.
func Incast(fanout int, bytes int64) []Arrival {
	if fanout < 1 {
		return nil
	}
	out := make([]Arrival, fanout)
	for i := range out {
		out[i] = Arrival{At: 0, Bytes: bytes, Sender: i}
	}
	return out
}
