package qdisc

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	tc "github.com/florianl/go-tc"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/testbed"
)

// installFQ installs fq on iface inside h's netns and removes it at the
// end of the test. It skips the test (or fails it inside a vmtests guest)
// when the kernel has no sch_fq.
func installFQ(t testing.TB, h *testbed.Host, iface string, cfg FQConfig) *FQ {
	t.Helper()
	var q *FQ
	err := h.Do(func() error {
		var err error
		q, err = InstallFQ(iface, cfg)
		return err
	})
	if errors.Is(err, ErrNoFQ) {
		t.Logf("InstallFQ: %v", err)
		testutil.SkipKernelLacks(t, "sch_fq")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := q.Close(); err != nil {
			t.Error(err)
		}
	})
	return q
}

// sendIntact sends a flow of size bytes from p.A to a sink on p.B and
// checks that it arrived intact.
func sendIntact(t *testing.T, p *testbed.Pair, size int64, seed uint64) testbed.FlowResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sink, err := testbed.StartSink(p.B, netip.AddrPortFrom(p.B.Addr, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	res, err := testbed.SendFlow(ctx, p.A, sink.Addr, testbed.FlowConfig{Bytes: size, Seed: seed, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	results, err := sink.WaitResults(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r := results[0]; !r.OK || r.Bytes != size {
		t.Errorf("sink received %d of %d bytes, ok %v: %v", r.Bytes, size, r.OK, r.Err)
	}
	return res
}

// TestFQEDTDelay checks that a departure time set by the EDT program is
// enforced by fq: with fq on A's side of the veth and the program on A's
// egress, every packet A sends waits the delay, so the RTT of A's TCP
// connections to B grows by it. Data must arrive intact.
func TestFQEDTDelay(t *testing.T) {
	testutil.RequireRoot(t)
	const (
		delay     = 5 * time.Millisecond
		exchanges = 20
		// Bounds on the RTT increase. The lower bound allows for the
		// baseline's own noise; the upper one for a slow, noisy guest
		// under TCG, where fq's timer fires late.
		lowFactor = 0.8
		slack     = 15 * time.Millisecond
	)
	p := testnet.NewPair(t)
	iface := peerIface(t, p.A)
	q := installFQ(t, p.A, iface, FQConfig{})
	e := loadEDT(t)
	a := attach(t, p.A, iface, e.Program(), AttachOptions{Direction: Egress})
	t.Logf("fq root qdisc on %s; EDT program attached to its egress with %s", iface, a.Method())

	base := measureRTT(t, p.A, p.B, exchanges, time.Minute)
	t.Logf("RTT without delay: %v", base)
	if err := e.SetDelay(delay); err != nil {
		t.Fatal(err)
	}
	delayed := measureRTT(t, p.A, p.B, exchanges, time.Minute)
	t.Logf("RTT with a %v EDT delay: %v", delay, delayed)

	// Minimums only: a median moves with the guest's scheduling noise.
	t.Logf("median user-space RTT rose by %v", (delayed.Median - base.Median).Round(time.Microsecond))
	lo, hi := time.Duration(lowFactor*float64(delay)), delay+slack
	rises := []struct {
		what string
		rise time.Duration
	}{
		{"minimum user-space RTT", delayed.Min - base.Min},
		{"tcpi_min_rtt", delayed.KernelMin - base.KernelMin},
	}
	for _, r := range rises {
		t.Logf("%s rose by %v (want %v to %v)", r.what, r.rise.Round(time.Microsecond), lo, hi)
		if r.rise < lo || r.rise > hi {
			t.Errorf("%s rose by %v, want %v to %v", r.what, r.rise, lo, hi)
		}
	}

	// A bulk transfer through the delay arrives intact.
	res := sendIntact(t, p, 4<<20, 7)
	t.Logf("bulk flow: %d bytes in %v (%.0f Mbit/s), rtt %dus, retransmits %d, reordering seen %d",
		res.Bytes, res.Duration.Round(time.Millisecond), res.Throughput/1e6,
		res.Info.Rtt, res.Info.Total_retrans, res.Info.Reord_seen)

	es, err := e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	qs, err := q.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("EDT program: %+v; fq: %+v", es, qs)
	if es.Delayed == 0 {
		t.Error("the EDT program delayed no packet")
	}
	if qs.Throttled == 0 {
		t.Error("fq never held a flow back for its departure time")
	}
	if qs.HorizonDrops != 0 {
		t.Errorf("fq dropped %d packets beyond its horizon", qs.HorizonDrops)
	}
}

// TestFQFlowMaxRate installs fq with a per-flow cap of 10 Mbit/s and sends
// a 1 MiB flow through it: the flow cannot finish in under 0.84 s (a
// little less for fq's initial quantum), where a veth uncapped takes
// milliseconds. It asserts half that, a bound the cap alone explains:
// a slow or busy machine only makes the flow slower.
func TestFQFlowMaxRate(t *testing.T) {
	testutil.RequireRoot(t)
	const (
		rate = 10_000_000 // bits/s
		size = 1 << 20
	)
	p := testnet.NewPair(t)
	iface := peerIface(t, p.A)
	q := installFQ(t, p.A, iface, FQConfig{FlowMaxRateBps: rate})
	res := sendIntact(t, p, size, 9)
	atRate := time.Duration(float64(size) * 8 / rate * float64(time.Second))
	qs, err := q.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d bytes in %v (%.1f Mbit/s) through fq capped at %d Mbit/s, %v at that rate; fq: %+v",
		res.Bytes, res.Duration.Round(time.Millisecond), res.Throughput/1e6, rate/1_000_000, atRate.Round(time.Millisecond), qs)
	if res.Duration < atRate/2 {
		t.Errorf("a %d-byte flow took %v through fq capped at %d bit/s per flow, under half the %v the cap allows: the cap is not applied",
			size, res.Duration, rate, atRate)
	}
}

// TestFQCloseRemovesEverything installs fq and the EDT program and checks
// that closing them puts the interface back as it was.
func TestFQCloseRemovesEverything(t *testing.T) {
	testutil.RequireRoot(t)
	p := testnet.NewPair(t)
	iface := peerIface(t, p.A)
	before := readTCState(t, p.A, iface)

	q := installFQ(t, p.A, iface, FQConfig{FlowLimit: 1000, Horizon: time.Second})
	if q.Interface() != iface {
		t.Errorf("Interface() = %q, want %q", q.Interface(), iface)
	}
	e := loadEDT(t)
	a := attach(t, p.A, iface, e.Program(), AttachOptions{})
	during := readTCState(t, p.A, iface)
	t.Logf("with fq and the EDT program (%s): %v", a.Method(), during)
	if !slices.Contains(during.Qdiscs, "fq cc0f: parent root") {
		t.Errorf("qdiscs %q lack the fq root qdisc", during.Qdiscs)
	}
	if _, err := q.Stats(); err != nil {
		t.Error(err)
	}

	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := q.Stats(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Stats after Close: %v, want os.ErrClosed", err)
	}
	if after := readTCState(t, p.A, iface); !after.equal(before) {
		t.Errorf("after Close: %v, want %v", after, before)
	}
}

// TestFQRefusesForeignRoot checks that InstallFQ does not replace a root
// qdisc somebody else installed, and that FQ.Close does not remove one
// that took the place of its own.
func TestFQRefusesForeignRoot(t *testing.T) {
	testutil.RequireRoot(t)
	p := testnet.NewPair(t)
	iface := peerIface(t, p.A)

	// One's own fq first, so that the test skips where sch_fq is missing.
	q := installFQ(t, p.A, iface, FQConfig{})
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}

	// Somebody else's root qdisc: an htb, as `tc qdisc add dev IF root
	// handle 1: htb` would add.
	var foreign tc.Object
	err := p.A.Do(func() error {
		d, err := openNetdev(iface)
		if err != nil {
			return err
		}
		defer d.close()
		foreign = tc.Object{
			Msg:       d.msg(1<<16, tc.HandleRoot, 0),
			Attribute: tc.Attribute{Kind: "htb", Htb: &tc.Htb{Init: &tc.HtbGlob{Version: 3, Rate2Quantum: 10}}},
		}
		return d.tc.Qdisc().Add(&foreign)
	})
	if err != nil {
		t.Fatalf("add an htb root qdisc: %v", err)
	}
	withHTB := readTCState(t, p.A, iface)
	t.Logf("somebody else's root: %v", withHTB)

	err = p.A.Do(func() error {
		q, err := InstallFQ(iface, FQConfig{})
		if err == nil {
			q.Close()
		}
		return err
	})
	if !errors.Is(err, unix.EEXIST) || !strings.Contains(err.Error(), "htb 1:") {
		t.Errorf("InstallFQ over an htb root: %v, want EEXIST naming htb 1:", err)
	}
	t.Logf("InstallFQ: %v", err)
	if now := readTCState(t, p.A, iface); !now.equal(withHTB) {
		t.Errorf("the refused InstallFQ changed %v into %v", withHTB, now)
	}
}
