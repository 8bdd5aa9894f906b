package stats

import (
	"math"
	"time"
)

// QueueReading is one reading of a bottleneck queue: its backlog and the
// bytes it has sent so far, at time T.
type QueueReading struct {
	T       time.Duration
	Backlog float64 // bytes queued
	Sent    float64 // cumulative bytes sent
}

// DrainConfig says how Drain judges an incast's drain.
type DrainConfig struct {
	// RateBps is the bottleneck's rate.
	RateBps float64
	// NearZero is the backlog that counts as drained: one GSO packet,
	// the least a hop that forwards GSO packets holds while busy.
	NearZero float64
	// Hold is how long the backlog must stay at or below NearZero.
	Hold time.Duration
	// PeakWindow is how long after the incast's start its peak is sought.
	PeakWindow time.Duration
	// UtilWindow is how long after the drain the utilisation is measured.
	UtilWindow time.Duration
	// Within bounds the drain: a spell that begins Within or more after
	// the incast's start does not count (the next incast may have come).
	// 0 leaves it unbounded.
	Within time.Duration
}

// DrainResult is how one incast's queue rose and drained.
type DrainResult struct {
	// Peak is the largest backlog within PeakWindow of the start, at
	// PeakAt.
	Peak   float64
	PeakAt time.Duration
	// From is when the drain is timed from: the peak, or the last incast
	// flow's start if that is later (a flow that starts after the peak
	// can hold the queue up).
	From time.Duration
	// Drained reports whether the backlog fell to NearZero for Hold after
	// From; DrainedAt is when that spell began.
	Drained   bool
	DrainedAt time.Duration
	// PeakRTT is the RTT at the peak: one NearZero packet's time at the
	// rate plus the peak's queueing delay, which is also the least time
	// any CC needs to drain the peak.
	PeakRTT time.Duration
	// RTTs is DrainedAt − From in units of PeakRTT; NaN if not Drained.
	RTTs float64
	// UtilAfter is the bottleneck's utilisation over UtilWindow after
	// DrainedAt, from the sent-bytes counter; NaN if not Drained or the
	// readings do not cover the window.
	UtilAfter float64
}

// LineTime is how long a link of rateBps takes to send bytes.
func LineTime(bytes, rateBps float64) time.Duration {
	return time.Duration(bytes * 8 / rateBps * float64(time.Second))
}

// Drain analyses the readings around one incast that began at start and
// whose last flow started at lastStart. Readings must be sorted by T.
func Drain(readings []QueueReading, start, lastStart time.Duration, cfg DrainConfig) DrainResult {
	r := DrainResult{PeakAt: start, RTTs: math.NaN(), UtilAfter: math.NaN()}
	for _, x := range readings {
		if x.T >= start && x.T < start+cfg.PeakWindow && x.Backlog > r.Peak {
			r.Peak, r.PeakAt = x.Backlog, x.T
		}
	}
	r.From = max(r.PeakAt, lastStart, start)
	r.PeakRTT = LineTime(cfg.NearZero, cfg.RateBps) + LineTime(r.Peak, cfg.RateBps)

	spell := time.Duration(-1) // start of the current spell at or below NearZero
	for _, x := range readings {
		if x.T < r.From {
			continue
		}
		if cfg.Within > 0 && spell < 0 && x.T >= start+cfg.Within {
			break
		}
		if x.Backlog > cfg.NearZero {
			spell = -1
			continue
		}
		if spell < 0 {
			spell = x.T
		}
		if x.T-spell >= cfg.Hold {
			r.Drained, r.DrainedAt = true, spell
			break
		}
	}
	if !r.Drained {
		return r
	}
	if r.PeakRTT > 0 {
		r.RTTs = float64(max(0, r.DrainedAt-r.From)) / float64(r.PeakRTT)
	}
	r.UtilAfter = Utilisation(readings, r.DrainedAt, cfg.UtilWindow, cfg.RateBps)
	return r
}

// Utilisation is the bytes sent over [from, from+d), from the first and
// last readings inside it, against rateBps; NaN when fewer than two
// readings, or readings spanning less than half of d, fall inside.
func Utilisation(readings []QueueReading, from, d time.Duration, rateBps float64) float64 {
	var first, last *QueueReading
	for i := range readings {
		x := &readings[i]
		if x.T < from || x.T >= from+d {
			continue
		}
		if first == nil {
			first = x
		}
		last = x
	}
	if first == nil || last == first || last.T-first.T < d/2 {
		return math.NaN()
	}
	return (last.Sent - first.Sent) * 8 / (rateBps * (last.T - first.T).Seconds())
}
