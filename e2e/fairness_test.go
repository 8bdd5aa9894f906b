package e2e

// Two θ-PowerTCP flows from two senders through one bottleneck: the second
// joins while the first holds its queue.

import (
	"context"
	"testing"
	"time"

	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/testbed"
)

// timedFlow is a flow of SendFlow with the wall-clock time it was started,
// so that flows started at different times can be compared on one clock.
type timedFlow struct {
	start time.Time
	res   testbed.FlowResult
	err   error
}

// bytesAckedAt is the flow's tcpi_bytes_acked at wall-clock time at, from
// the last sample taken at or before it.
func (f timedFlow) bytesAckedAt(at time.Time) uint64 {
	var acked uint64
	for _, s := range f.res.Samples {
		if f.start.Add(s.At).After(at) {
			break
		}
		acked = s.BytesAcked
	}
	return acked
}

// TestThetaLatecomerGetsItsShare starts one θ-PowerTCP flow with the
// CC's defaults (τ tracked), lets it settle, then starts a second flow
// from another sender. A flow that joins during a standing queue must not
// take a larger τ, and with it a larger β and window cap, than the flow
// before it: with τ from the least srtt the latecomer kept two to three
// times the first flow's rate (docs/measurements.md, "How the tracked base
// RTT is chosen"). After a second to converge, each must carry between 30%
// and 70% of what the two deliver; a fair split is 50%.
func TestThetaLatecomerGetsItsShare(t *testing.T) {
	testutil.RequireKernelCC(t, "theta_powertcp")
	l, _ := newSys(t)
	attachForTest(t, l, loader.AttachRequest{Name: "theta_powertcp"})
	d := newDumbbell(t, 2)
	sink := testnet.StartSink(t, d.Receiver, d.Receiver.Addr)

	const (
		join     = 1500 * time.Millisecond // the first flow alone
		together = 3 * time.Second         // both flows sending
		settle   = time.Second             // after the join, not judged
		tail     = 300 * time.Millisecond  // before the end, not judged
	)
	ctx := context.Background()
	send := func(sender int, after, dur time.Duration, out chan<- timedFlow) {
		time.Sleep(after)
		f := timedFlow{start: time.Now()}
		f.res, f.err = testbed.SendFlow(ctx, d.Senders[sender], sink.Addr, testbed.FlowConfig{
			CC: "theta_powertcp", For: dur, Seed: uint64(sender + 1),
			Timeout: dur + 30*time.Second, SampleEvery: 10 * time.Millisecond,
		})
		out <- f
	}
	first, second := make(chan timedFlow, 1), make(chan timedFlow, 1)
	go send(0, 0, join+together, first)
	go send(1, join, together, second)
	a, b := <-first, <-second
	for i, f := range []timedFlow{a, b} {
		if f.err != nil {
			t.Fatalf("flow %d: %v", i+1, f.err)
		}
		if f.res.CC != "theta_powertcp" {
			t.Fatalf("flow %d ran %q, want theta_powertcp", i+1, f.res.CC)
		}
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got, err := sink.WaitResults(waitCtx, 2)
	if err != nil {
		t.Fatalf("sink: %v", err)
	}
	for _, r := range got {
		if !r.OK || !r.Unbounded {
			t.Fatalf("sink: the flow from %s ended badly (ok=%v, unbounded=%v): %v", r.Remote, r.OK, r.Unbounded, r.Err)
		}
	}

	from, to := b.start.Add(settle), b.start.Add(together-tail)
	ba := a.bytesAckedAt(to) - a.bytesAckedAt(from)
	bb := b.bytesAckedAt(to) - b.bytesAckedAt(from)
	secs := to.Sub(from).Seconds()
	t.Logf("over %.1f s with both flows: first %.0f Mbit/s, latecomer %.0f Mbit/s",
		secs, float64(ba)*8/secs/1e6, float64(bb)*8/secs/1e6)
	if ba+bb == 0 {
		t.Fatal("neither flow delivered anything while both ran")
	}
	if share := float64(bb) / float64(ba+bb); share < 0.3 || share > 0.7 {
		t.Errorf("the latecomer carried %.0f%% of the two flows' bytes, want 30%% to 70%%", 100*share)
	}
}
