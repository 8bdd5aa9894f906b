package clocksync

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/testbed"
)

// testAgent is one agent of a test mesh and what it saw.
type testAgent struct {
	host    *testbed.Host
	clock   Skewed
	agent   *Agent
	offsets *Offsets

	mu      sync.Mutex
	reports []WindowReport
}

// startMesh starts one agent per host, each with its own skewed clock,
// every one listing every other as a peer, publishing under pins.
func startMesh(t *testing.T, ctx context.Context, pins kernel.Host, hosts []*testbed.Host, skews []Skewed, window time.Duration) []*testAgent {
	t.Helper()
	var peers PeerSet
	for _, h := range hosts {
		peers.Addrs = append(peers.Addrs, h.Addr)
	}
	agents := make([]*testAgent, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		ta := &testAgent{host: h, clock: skews[i]}
		agents[i] = ta
		err := h.Do(func() error {
			o, err := OpenForAgent(pins)
			if err != nil {
				return err
			}
			ta.offsets = o
			ta.agent, err = New(Config{
				Peers:   peers,
				Window:  window,
				Clock:   skews[i],
				Seed:    uint64(i + 1),
				Offsets: o,
				Logf:    func(f string, a ...any) { t.Logf("%s: "+f, append([]any{h}, a...)...) },
				OnWindow: func(r WindowReport) {
					ta.mu.Lock()
					ta.reports = append(ta.reports, r)
					ta.mu.Unlock()
				},
			})
			return err
		})
		if err != nil {
			t.Fatalf("start the agent on %s: %v", h, err)
		}
		t.Cleanup(func() { ta.agent.Close(); ta.offsets.Close() })
	}
	for _, ta := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ta.agent.Run(ctx); err != nil {
				t.Errorf("agent on %s: %v", ta.host, err)
			}
		}()
	}
	t.Cleanup(wg.Wait)
	return agents
}

func testSkews(n int) []Skewed {
	base, err := NewSystemClock()
	if err != nil {
		panic(err)
	}
	origin := base.Now()
	offsets := []int64{5_000_000, -3_000_000, 1_500_000, -4_200_000, 2_700_000, -800_000}
	drifts := []float64{20e-6, -15e-6, 5e-6, -10e-6, 12e-6, -18e-6}
	out := make([]Skewed, n)
	for i := range out {
		out[i] = Skewed{Base: base, Offset: offsets[i%len(offsets)], Drift: drifts[i%len(drifts)], Origin: origin}
	}
	return out
}

// TestAgentsRecoverInjectedOffsets runs four agents in netns hosts on both
// sides of a router, each with a clock shifted by milliseconds and tens of
// ppm, and checks that each one's clock map holds every other's offset and
// drift. The bounds are wide: precision is the clock bench's business.
func TestAgentsRecoverInjectedOffsets(t *testing.T) {
	testutil.RequireRoot(t)
	pins := testutil.Host(t)
	d := testnet.NewDumbbell(t, testbed.DumbbellConfig{Senders: 3})
	hosts := []*testbed.Host{d.Senders[0], d.Senders[1], d.Senders[2], d.Receiver}
	skews := testSkews(len(hosts))
	ctx, cancel := context.WithCancel(context.Background())
	agents := startMesh(t, ctx, pins, hosts, skews, 500*time.Millisecond)

	// Bounded wait for every agent to publish every peer, then for every
	// agent's drift to span driftSpan windows of probes: a drift read off
	// a shorter span carries a busy machine's scheduling noise divided by
	// little time.
	deadline := time.Now().Add(30 * time.Second)
	for !meshPublished(t, agents) && time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
	}
	for !windowsSeen(agents, driftSpan+1) && time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
	}
	cancel()

	// The drift bound is wide against what the span resolves: 10 ppm over
	// driftSpan windows of 500 ms is 40 µs of tilt, ten times the offset
	// errors seen here under a loaded CI machine. The injected drifts
	// differ by 5 to 38 ppm; precision is the clock bench's business.
	const (
		offsetSlack = 20_000 // ns, beyond three error bounds
		driftBound  = 10e-6
	)
	for i, ta := range agents {
		var entries []Entry
		if err := ta.host.Do(func() error {
			o, err := OpenReadOnly(pins)
			if err != nil {
				return err
			}
			defer o.Close()
			entries, err = o.List()
			return err
		}); err != nil {
			t.Fatalf("%s: read the clock map: %v", ta.host, err)
		}
		if len(entries) != len(agents)-1 {
			t.Errorf("%s publishes %d peers, want %d: %+v", ta.host, len(entries), len(agents)-1, entries)
		}
		for _, e := range entries {
			j := indexOf(hosts, e.Peer)
			if j < 0 || j == i {
				t.Errorf("%s publishes %s, no peer of it", ta.host, e.Peer)
				continue
			}
			want := OffsetAt(skews[i], skews[j], int64(e.RefNs))
			got := float64(e.OffsetNs)
			t.Logf("%s -> %s: offset error %+.0f ns (bound %d, residual %d), drift error %+.3f ppm, pure %.2f",
				ta.host, e.Peer, got-want, e.ErrorNs, e.ResidualNs, (e.Drift-DriftOf(skews[i], skews[j]))*1e6, e.PureShare)
			if diff := math.Abs(got - want); diff > 3*float64(e.ErrorNs)+offsetSlack {
				t.Errorf("%s -> %s: offset %.0f ns, injected %.0f (error bound %d ns)", ta.host, e.Peer, got, want, e.ErrorNs)
			}
			if diff := math.Abs(e.Drift - DriftOf(skews[i], skews[j])); diff > driftBound {
				t.Errorf("%s -> %s: drift %.3f ppm, injected %.3f", ta.host, e.Peer, e.Drift*1e6, DriftOf(skews[i], skews[j])*1e6)
			}
			if !e.Probed || e.PureShare <= 0 {
				t.Errorf("%s -> %s: probed %v, pure share %.2f: every agent probes every other here", ta.host, e.Peer, e.Probed, e.PureShare)
			}
			if e.ValidUntilNs <= e.UpdatedNs {
				t.Errorf("%s -> %s: valid until %d, not after the update at %d", ta.host, e.Peer, e.ValidUntilNs, e.UpdatedNs)
			}
		}
	}
	checkBPFReader(t, pins, agents[0])
}

func indexOf(hosts []*testbed.Host, a netip.Addr) int {
	for i, h := range hosts {
		if h.Addr == a {
			return i
		}
	}
	return -1
}

// windowsSeen reports whether every agent has closed at least n windows.
func windowsSeen(agents []*testAgent, n int) bool {
	for _, ta := range agents {
		ta.mu.Lock()
		got := len(ta.reports)
		ta.mu.Unlock()
		if got < n {
			return false
		}
	}
	return true
}

// meshPublished reports whether every agent's last window published an
// estimate of every other agent.
func meshPublished(t *testing.T, agents []*testAgent) bool {
	for _, ta := range agents {
		ta.mu.Lock()
		n := len(ta.reports)
		var last WindowReport
		if n > 0 {
			last = ta.reports[n-1]
		}
		ta.mu.Unlock()
		got := 0
		for _, p := range last.Peers {
			if p.HasDirect && p.Err > 0 {
				got++
			}
		}
		if got < len(agents)-1 {
			return false
		}
	}
	return true
}

// checkBPFReader reads an agent's map with bpf/clock.c's clock_read, which
// takes the entry's lock as a data-path program would, and checks that it
// computes what Entry.OffsetAt does, for every entry.
func checkBPFReader(t *testing.T, pins kernel.Host, ta *testAgent) {
	t.Helper()
	err := ta.host.Do(func() error {
		o, err := OpenReadOnly(pins)
		if err != nil {
			return err
		}
		defer o.Close()
		return checkReader(t, o)
	})
	if err != nil {
		t.Fatalf("read the clock map from BPF: %v", err)
	}
}

// checkReader loads clock_read against o's map and checks every entry of
// it at, before and after its reference time and past its validity, and
// an address that has no entry.
func checkReader(t *testing.T, o *Offsets) error {
	t.Helper()
	spec, err := loadClock()
	if err != nil {
		return err
	}
	var objs clockObjects
	if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{
		MapReplacements: map[string]*ebpf.Map{offsetsName: o.m},
	}); err != nil {
		return err
	}
	defer objs.Close()
	entries, err := o.List()
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		return errors.New("the map is empty")
	}
	for _, e := range entries {
		for _, at := range []uint64{e.RefNs, e.RefNs + 1_500_000_000, e.RefNs - 700_000_000, e.RefNs + 2*maxExtrapolation} {
			res, err := runClockRead(objs, e.Peer, at)
			if err != nil {
				return err
			}
			if at > e.ValidUntilNs {
				if res.Status != 2 {
					t.Errorf("clock_read(%s, ref%+d ns), past valid_until = %+v; want status CLOCK_EXPIRED (2)", e.Peer, int64(at-e.RefNs), res)
				}
				continue
			}
			if res.Status != 0 || res.OffsetNs != e.OffsetAt(at) || res.ErrorNs != e.ErrorNs {
				t.Errorf("clock_read(%s, ref%+d ns) = %+v, want offset %d, error %d", e.Peer, int64(at-e.RefNs), res, e.OffsetAt(at), e.ErrorNs)
			}
		}
		if res, err := runClockRead(objs, e.Peer, e.ValidUntilNs+1); err != nil || res.Status != 2 {
			t.Errorf("clock_read(%s) past valid_until = %+v, %v; want status CLOCK_EXPIRED (2)", e.Peer, res, err)
		}
	}
	res, err := runClockRead(objs, netip.MustParseAddr("198.18.255.254"), entries[0].RefNs)
	if err != nil || res.Status != 1 {
		t.Errorf("clock_read of an unknown peer = %+v, %v; want status CLOCK_NO_PEER (1)", res, err)
	}
	return nil
}

func runClockRead(objs clockObjects, peer netip.Addr, at uint64) (clockClockReadResult, error) {
	pkt := make([]byte, 14, 14+24)
	a := peer.As16()
	pkt = append(pkt, a[:]...)
	pkt = binary.NativeEndian.AppendUint64(pkt, at)
	var res clockClockReadResult
	if _, err := objs.ClockRead.Run(&ebpf.RunOptions{Data: pkt}); err != nil {
		return res, err
	}
	err := objs.ClockReadOut.Lookup(uint32(0), &res)
	return res, err
}
