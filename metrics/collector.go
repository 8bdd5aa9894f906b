package metrics

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/clocksync"
	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/onramp"
	"github.com/ccload/ccload/telemetry/hop"
	"github.com/ccload/ccload/telemetry/sockops"
)

// Collector is a prometheus.Collector of ccload's state under one pin
// root. Each Collect reads the kernel afresh; a Collector may be
// collected by several scrapes at once.
type Collector struct {
	host    kernel.Host
	fs      *families
	errs    *prometheus.CounterVec
	onError func(part string, err error)
}

// Option changes how a Collector works.
type Option func(*Collector)

// WithErrorHandler has the Collector call f with every error that it
// counts in ccload_scrape_errors_total, so that the daemon can log it. f
// may be called from several scrapes at once.
func WithErrorHandler(f func(part string, err error)) Option {
	return func(c *Collector) { c.onError = f }
}

// NewCollector returns a Collector of the state pinned under host's pin
// root, in the calling thread's network namespace (the interfaces of the
// INT hops and On-Ramp, the clock agent's map, the default CC).
func NewCollector(host kernel.Host, opts ...Option) *Collector {
	c := &Collector{host: host, fs: newFamilies(), errs: newScrapeErrors()}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range c.fs.all {
		ch <- f.desc
	}
	c.errs.Describe(ch)
}

// Collect implements prometheus.Collector. It reads every part, each on
// its own: a part that fails is counted and the others are still sent.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := &scrape{ch: ch, seen: map[string]bool{}}
	for _, p := range []struct {
		name string
		read func(*scrape) error
	}{
		{partCC, c.collectCCs},
		{partINT, c.collectINT},
		{partHop, c.collectHops},
		{partOnRamp, c.collectOnRamp},
		{partClock, c.collectClock},
		{partPrograms, c.collectPrograms},
	} {
		s.errs = nil
		if err := p.read(s); err != nil {
			s.errs = append(s.errs, err)
		}
		if err := errors.Join(s.errs...); err != nil {
			c.errs.WithLabelValues(p.name).Inc()
			if c.onError != nil {
				c.onError(p.name, err)
			}
		}
	}
	c.errs.Collect(ch)
}

// scrape is one Collect: it sends metrics, once per family and label
// values (a second would fail the whole scrape in the registry), and
// gathers the errors of the part being read.
type scrape struct {
	ch   chan<- prometheus.Metric
	seen map[string]bool
	errs []error
}

func (s *scrape) emit(f *family, v float64, labels ...string) {
	key := f.name + "\xff" + strings.Join(labels, "\xff")
	if s.seen[key] {
		s.errs = append(s.errs, fmt.Errorf("%s%v: a second series with the same labels, dropped", f.name, labels))
		return
	}
	s.seen[key] = true
	m, err := prometheus.NewConstMetric(f.desc, f.kind, v, labels...)
	if err != nil {
		s.errs = append(s.errs, fmt.Errorf("%s: %w", f.name, err))
		return
	}
	s.ch <- m
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// collectCCs exports every built-in CC: whether it is attached and the
// default, and, when attached, its sockets and counters.
func (c *Collector) collectCCs(s *scrape) error {
	ccs, err := loader.New(c.host, loader.WithSharedMaps(sockops.New(c.host).Store())).List()
	if err != nil {
		return fmt.Errorf("list the CCs: %w", err)
	}
	for _, cc := range ccs {
		s.emit(c.fs.ccAttached, boolValue(cc.Attached), cc.Name)
		s.emit(c.fs.ccDefault, boolValue(cc.Default), cc.Name)
		if !cc.Attached {
			continue
		}
		if cc.Stats == nil {
			s.errs = append(s.errs, fmt.Errorf("%s is attached but its counters cannot be read", cc.Name))
			continue
		}
		s.emit(c.fs.ccSockets, float64(cc.SocketsInUse), cc.Name)
		if cc.Generation > 0 {
			s.emit(c.fs.ccGeneration, float64(cc.Generation), cc.Name)
		}
		for _, g := range cc.Generations {
			s.emit(c.fs.ccGenSockets, float64(g.SocketsInUse), cc.Name, strconv.FormatUint(uint64(g.Generation), 10))
		}
		for key, v := range cc.Stats {
			if f, ok := c.fs.ccCounters[key]; ok {
				s.emit(f, float64(v), cc.Name)
			}
		}
	}
	return nil
}

// collectINT exports whether INT is enabled and the sockops program's
// counters.
func (c *Collector) collectINT(s *scrape) error {
	st, err := sockops.New(c.host).Status()
	if err != nil {
		return fmt.Errorf("read INT's state: %w", err)
	}
	s.emit(c.fs.intEnabled, boolValue(st.Enabled))
	if !st.Enabled {
		return nil
	}
	if st.Stats == nil {
		return errors.New("INT is enabled but its counters cannot be read")
	}
	for key, v := range st.Stats {
		if f, ok := c.fs.intCounters[key]; ok {
			s.emit(f, float64(v))
		}
	}
	return nil
}

// collectHops exports the pinned INT hops of this network namespace.
func (c *Collector) collectHops(s *scrape) error {
	hops, err := hop.NewPins(c.host).List()
	if err != nil {
		return err
	}
	for _, h := range hops {
		labels := []string{h.Iface, strconv.Itoa(h.Ifindex)}
		s.emit(c.fs.hopAttached, boolValue(h.Attached), labels...)
		s.emit(c.fs.hopBacklog, float64(h.Stats.BacklogBytes), labels...)
		for i, d := range hopCounters {
			s.emit(c.fs.hopCounters[i], float64(d.get(h.Stats)), labels...)
		}
	}
	return nil
}

// collectOnRamp exports On-Ramp on each interface of this network
// namespace.
func (c *Collector) collectOnRamp(s *scrape) error {
	sts, err := onramp.New(c.host).Status()
	if err != nil {
		return err
	}
	for _, st := range sts {
		labels := []string{st.Iface, strconv.Itoa(st.Ifindex)}
		fs := c.fs
		s.emit(fs.onrampAttached, boolValue(st.Attached), labels...)
		s.emit(fs.onrampFlows, float64(st.Flows), labels...)
		s.emit(fs.onrampFlowsPaused, float64(st.FlowsPaused), labels...)
		s.emit(fs.onrampPauses, float64(st.Pauses), labels...)
		s.emit(fs.onrampPauseSeconds, st.PauseSeconds, labels...)
		s.emit(fs.onrampClamped, float64(st.Stats["clamped"]), labels...)
		s.emit(fs.onrampDelayed, float64(st.Stats["delayed"]), labels...)
		s.emit(fs.onrampStampsNoClock, float64(st.Stats["rx_no_clock"]), labels...)
		s.emit(fs.onrampEchoesNoClock, float64(st.Stats["no_clock"]), labels...)
		s.emit(fs.onrampPeersAboveThreshold, float64(st.PeersAboveThreshold), labels...)
		s.emit(fs.onrampObserve, boolValue(st.Settings.Observe), labels...)
		for option, v := range map[string]uint64{
			"stamp":    st.NoSpace.Stamp,
			"echo":     st.NoSpace.Echo,
			"unfilled": st.NoSpace.Unfilled,
		} {
			s.emit(fs.onrampNoSpace, float64(v), append(labels, option)...)
		}
	}
	return nil
}

// collectClock exports the clock agent's offsets, as the data path sees
// them now. No agent has published in this network namespace when the
// map is missing: that is no error.
func (c *Collector) collectClock(s *scrape) error {
	offs, err := clocksync.OpenReadOnly(c.host)
	if kernel.IsKind(err, kernel.KindNotAttached) {
		return nil
	}
	if err != nil {
		return err
	}
	defer offs.Close()
	entries, err := offs.List()
	if err != nil {
		return err
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_TAI, &ts); err != nil {
		return fmt.Errorf("read CLOCK_TAI: %w", err)
	}
	now := uint64(ts.Nano())
	for _, e := range entries {
		peer := e.Peer.String()
		s.emit(c.fs.clockOffset, float64(e.OffsetAt(now))/1e9, peer)
		s.emit(c.fs.clockDrift, e.Drift, peer)
		s.emit(c.fs.clockError, float64(e.ErrorNs)/1e9, peer)
		s.emit(c.fs.clockResidual, float64(e.ResidualNs)/1e9, peer)
		s.emit(c.fs.clockAge, time.Duration(int64(now-e.UpdatedNs)).Seconds(), peer)
		s.emit(c.fs.clockValid, boolValue(now < e.ValidUntilNs), peer)
	}
	return nil
}
