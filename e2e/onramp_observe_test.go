package e2e

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ccload/ccload/clocksync"
	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/onramp"
	"github.com/ccload/ccload/testbed"
)

// TestOnRampObserve: On-Ramp in observe mode on both ends of a veth pair,
// with a clock offset that makes every echo say 30 ms against T = 1 ms,
// so that every echo asks for a pause. It needs no fq, so it runs on this
// host too. A flow goes through intact and is not held: no pause, no
// delayed packet, no flow paused; the root qdiscs stay as they were.
// status shows the receiver's delays with every sampled echo above T, the
// metrics say that On-Ramp observes, and the trace flags the echoes as
// observed, each with the pause it would have asked for.
func TestOnRampObserve(t *testing.T) {
	host := testutil.Host(t)
	p := testnet.NewPair(t)
	ifA, err := p.A.Interface()
	if err != nil {
		t.Fatal(err)
	}
	ifB, err := p.B.Interface()
	if err != nil {
		t.Fatal(err)
	}
	rootA, rootB := testnet.RootQdisc(t, p.A, ifA), testnet.RootQdisc(t, p.B, ifB)
	err = p.B.Do(func() error {
		return clocksync.PublishFixed(host, []netip.Addr{p.A.Addr}, 30*time.Millisecond, 1000, time.Hour)
	})
	if err != nil {
		t.Fatal(err)
	}
	or := onramp.New(host)
	cfg := onramp.Config{Peers: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}, Threshold: time.Millisecond,
		MaxPause: 20 * time.Millisecond, Observe: true}
	for _, e := range []struct {
		h     *testbed.Host
		iface string
	}{{p.A, ifA}, {p.B, ifB}} {
		c := cfg
		c.Iface = e.iface
		if err := e.h.Do(func() error { _, err := or.Enable(c); return err }); err != nil {
			t.Fatalf("enable On-Ramp in observe mode in %s: %v", e.h.Name, err)
		}
		t.Cleanup(func() { e.h.Do(func() error { _, err := or.Disable(e.iface); return err }) })
	}

	// The sender's trace, while the flow runs.
	var tr *onramp.Tracer
	if err := p.A.Do(func() (err error) { tr, err = or.OpenTrace(ifA); return err }); err != nil {
		t.Fatal(err)
	}
	var events []onramp.TraceEvent
	tctx, tcancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tr.Run(tctx, func(e onramp.TraceEvent) error {
			if len(events) < 10000 {
				events = append(events, e)
			}
			return nil
		})
	}()

	sink := testnet.StartSink(t, p.B, p.B.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := testbed.SendFlow(ctx, p.A, sink.Addr, testbed.FlowConfig{CC: "cubic", Bytes: 2 << 20, Seed: 1, Timeout: 50 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the last echoes' records
	tcancel()
	wg.Wait()
	tr.Close()

	var st []onramp.Status
	if err := p.A.Do(func() (err error) { st, err = or.Status(); return err }); err != nil || len(st) != 1 {
		t.Fatalf("the sender's On-Ramp status: %v, %d interfaces", err, len(st))
	}
	s := st[0]
	t.Logf("flow of 2 MiB in %v; sender: %s; %v; peers %+v; notes %q", res.Duration.Round(time.Millisecond), s.Settings, s.Stats, s.PeerStats, s.Notes)
	if !s.Settings.Observe || !s.Attached {
		t.Errorf("status: observe %v, attached %v; want both", s.Settings.Observe, s.Attached)
	}
	if s.Stats["echoes"] == 0 || s.Stats["stamped"] == 0 {
		t.Fatalf("no stamps or echoes went through: %v", s.Stats)
	}
	for _, name := range []string{"pauses", "pause_ns", "delayed", "clamped", "start_paused"} {
		if s.Stats[name] != 0 {
			t.Errorf("%s = %d in observe mode, want 0", name, s.Stats[name])
		}
	}
	if s.FlowsPaused != 0 {
		t.Errorf("%d flows paused in observe mode", s.FlowsPaused)
	}
	for _, n := range s.Notes {
		if strings.Contains(n, "not fq") {
			t.Errorf("status in observe mode asks for fq: %q", n)
		}
	}
	i := slices.IndexFunc(s.PeerStats, func(ps onramp.PeerStatus) bool { return ps.Peer == p.B.Addr })
	if i < 0 {
		t.Fatalf("status has no one-way delays of the receiver %s: %+v", p.B.Addr, s.PeerStats)
	}
	if ps := s.PeerStats[i]; ps.Samples == 0 || ps.ShareAboveThreshold != 1 || ps.Pauses != 0 {
		t.Errorf("the receiver's delays: %d samples, share above T %v, %d pauses; want some, 1 (every echo says 30 ms), 0", ps.Samples, ps.ShareAboveThreshold, ps.Pauses)
	}
	if got := gaugeIn(t, p.A, host, "ccload_onramp_observe", ifA); got != 1 {
		t.Errorf("ccload_onramp_observe{iface=%q} = %v, want 1", ifA, got)
	}
	observed := 0
	for _, e := range events {
		if slices.Contains(e.Flags, "paused") || e.PausedFor != 0 {
			t.Fatalf("a trace record of observe mode says the flow was held: %+v", e)
		}
		if slices.Contains(e.Flags, "observed") && e.Pause > 0 {
			observed++
		}
	}
	if observed == 0 {
		t.Errorf("none of %d trace records is flagged observed with the pause it would have asked for", len(events))
	}
	if a, b := testnet.RootQdisc(t, p.A, ifA), testnet.RootQdisc(t, p.B, ifB); a != rootA || b != rootB {
		t.Errorf("root qdiscs %q and %q in observe mode, were %q and %q", a, b, rootA, rootB)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	got, err := sink.WaitResults(wctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !got[0].OK {
		t.Fatalf("the flow arrived corrupt or short: %+v", got[0])
	}
}
