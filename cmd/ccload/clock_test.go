package main

import (
	"context"
	"encoding/json"
	"math"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ccload/ccload/clocksync"
	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/testbed"
)

func TestClockUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args   []string
		stderr []string
	}{
		{[]string{"clock", "run"}, []string{"--peers is required", "Run 'ccload clock run --help'"}},
		{[]string{"clock", "run", "--peers", ""}, []string{"names no peer", "198.18.0.0/16"}},
		{[]string{"clock", "run", "--peers", " , "}, []string{"names no peer"}},
		{[]string{"clock", "run", "--peers", "/nonexistent/peers"}, []string{"not an address, a prefix or a readable file"}},
		{[]string{"clock", "run", "--peers", "198.18.0.1", "--probe-rate", "0"}, []string{"--probe-rate 0"}},
		{[]string{"clock", "run", "--peers", "198.18.0.1", "--probe-rate", "5000"}, []string{"at most 1000"}},
		{[]string{"clock", "run", "--peers", "198.18.0.1", "--window", "1ms"}, []string{"--window 1ms", "between"}},
		{[]string{"clock", "run", "--peers", "198.18.0.1", "--max-peers", "0"}, []string{"--max-peers 0"}},
		{[]string{"clock", "run", "--peers", "198.18.0.1", "--port", "0"}, []string{"--port 0"}},
		{[]string{"clock", "run", "--peers", "198.18.0.1", "--listen", "nowhere"}, []string{"--listen"}},
		{[]string{"clock", "run", "--peers", "198.18.0.1", "--hw-timestamps"}, []string{"--hw-timestamps needs --iface"}},
		{[]string{"clock", "status", "extra"}, []string{"Run 'ccload clock status --help'"}},
		{[]string{"bench", "--scenario", "clock", "--clock-loads", "1.5"}, []string{"in [0, 1)"}},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, _, stderr := cli(tt.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
			}
			for _, want := range tt.stderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
		})
	}
}

// TestClockCLI runs `ccload clock run` on both hosts of a netns pair, as
// an SRE would, and reads `clock status` in each; it checks that a second
// agent in the same namespace is refused, that a port in use is named,
// that a silent peer is reported, and that status without an agent says
// how to start one.
func TestClockCLI(t *testing.T) {
	e := newHopCLIEnv(t)
	a, b := e.pair.A, e.pair.B

	code, _, stderr := e.cliIn(t, a, "clock", "status")
	if code != 1 || !strings.Contains(stderr, "no clock agent has published") || !strings.Contains(stderr, "ccload clock run --peers") {
		t.Errorf("status before any agent: exit %d, stderr:\n%s", code, stderr)
	}

	type result struct {
		code           int
		stdout, stderr string
	}
	pairs := [][2]*testbed.Host{{a, b}, {b, a}}
	var (
		wg, agents sync.WaitGroup
		results    [2]result
		// What each namespace's status said while the agents ran: the
		// newest --json that named the peer with an estimate (empty if
		// none did), the table read right after it, and the last --json.
		estimated, tables, last [2]string
	)
	for i, pair := range pairs {
		wg.Add(1)
		agents.Add(1)
		go func() {
			defer wg.Done()
			defer agents.Done()
			r := &results[i]
			// 20 windows of 300 ms.
			r.code, r.stdout, r.stderr = e.cliIn(t, pair[0], "clock", "run", "--peers", pair[1].Addr.String(),
				"--window", "300ms", "--duration", "6s")
		}()
	}
	agentsDone := make(chan struct{})
	go func() {
		agents.Wait()
		close(agentsDone)
	}()
	// While they run: each namespace's status names its peer with an
	// estimate. Read then, every 200 ms, and judge the newest such
	// reading, not one taken after the agents stop: an agent whose last
	// windows estimate nothing (a loaded machine) lets its entry expire,
	// which clocksync's TestPublishKeepsEntryUntilItExpires covers.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 50 { // the agents' 6 s, and 4 s more
			select {
			case <-agentsDone:
				return
			case <-time.After(200 * time.Millisecond):
			}
			for i, pair := range pairs {
				_, out, _ := e.cliIn(t, pair[0], "clock", "status", "--json")
				last[i] = out
				if peerEstimated(out, pair[1].Addr) {
					estimated[i] = out
					_, tables[i], _ = e.cliIn(t, pair[0], "clock", "status")
				}
			}
		}
	}()
	// While they run: a second agent in a's namespace is refused.
	wg.Add(1)
	go func() {
		defer wg.Done()
		waitFor(t, func() bool {
			code, _, _ := e.cliIn(t, a, "clock", "status")
			return code == 0
		})
		code, _, stderr := e.cliIn(t, a, "clock", "run", "--peers", b.Addr.String(), "--port", "3191", "--duration", "1s")
		if code != 1 || !strings.Contains(stderr, "a clock agent already runs in this network namespace") || !strings.Contains(stderr, "fix:") {
			t.Errorf("second agent: exit %d, stderr:\n%s", code, stderr)
		}
	}()
	wg.Wait()
	for i, r := range results {
		if r.code != 0 || !strings.Contains(r.stdout, "publishing to") || !strings.Contains(r.stdout, "window ") {
			t.Errorf("agent %d: exit %d\nstdout:\n%s\nstderr:\n%s", i, r.code, r.stdout, r.stderr)
		}
	}

	for i, pair := range pairs {
		if estimated[i] == "" {
			t.Errorf("status in %s never named %s with an estimate while the agents ran; its last:\n%s\nagents' output:\n%s%s\n%s%s",
				pair[0].Name, pair[1].Addr, last[i], results[0].stdout, results[0].stderr, results[1].stdout, results[1].stderr)
			continue
		}
		var st clockStatus
		if err := json.Unmarshal([]byte(estimated[i]), &st); err != nil {
			t.Fatalf("status --json: %v\n%s", err, estimated[i])
		}
		if !strings.HasPrefix(st.Map, e.bpffs) {
			t.Errorf("status in %s: map %s outside the test's bpffs %s", pair[0].Name, st.Map, e.bpffs)
		}
		// Both hosts share one clock: the offset is an error. Bound it
		// wide, and by the agent's own error bound where a loaded machine
		// makes that larger (as clocksync's agent test does); the clock
		// bench measures precision.
		p := st.Peers[0]
		off, bound := p.OffsetNs, max(int64(100_000), 3*int64(p.ErrorNs)+20_000)
		t.Logf("status in %s: offset %d ns, error bound %d ns", pair[0].Name, off, p.ErrorNs)
		if off > bound || off < -bound {
			t.Errorf("status in %s: offset %d ns on a shared clock (error bound %d ns)", pair[0].Name, off, p.ErrorNs)
		}
		if !strings.Contains(tables[i], "PEER") || !strings.Contains(tables[i], pair[1].Addr.String()) || !strings.Contains(tables[i], "probes") {
			t.Errorf("status table in %s:\n%s", pair[0].Name, tables[i])
		}
	}

	// A peer with no agent is named; so is a port in use.
	code, _, stderr = e.cliIn(t, a, "clock", "run", "--peers", b.Addr.String(), "--window", "200ms", "--duration", "1500ms")
	if code != 0 || !strings.Contains(stderr, "no answer from "+b.Addr.String()) {
		t.Errorf("silent peer: exit %d, stderr:\n%s", code, stderr)
	}
	err := b.Do(func() error {
		ln, err := net.ListenPacket("udp", ":3190")
		if err != nil {
			return err
		}
		defer ln.Close()
		code, _, stderr = cli("--bpffs", e.bpffs, "clock", "run", "--peers", a.Addr.String(), "--duration", "1s")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if code != 1 || !strings.Contains(stderr, "uses the port") || !strings.Contains(stderr, "--port") {
		t.Errorf("port in use: exit %d, stderr:\n%s", code, stderr)
	}
}

// peerEstimated reports whether out, a `clock status --json`, names peer
// alone, probed, with pure probe pairs and an error bound.
func peerEstimated(out string, peer netip.Addr) bool {
	var st clockStatus
	if json.Unmarshal([]byte(out), &st) != nil || len(st.Peers) != 1 {
		return false
	}
	p := st.Peers[0]
	return p.Peer == peer && p.Probed && p.PureShare > 0 && p.ErrorNs > 0
}

// waitFor polls cond a bounded number of times.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 100 {
		if cond() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("condition not met in time")
}

// TestClockStatusShowsInjectedOffsets runs an agent in each host of a
// netns pair, each with a clock shifted by a known offset and drift
// (clocksync.Skewed, the agent's test seam), and checks that `ccload clock
// status --json` in each netns reports the other's offset within three
// error bounds (and 20 µs) and its drift within 5 ppm. The bounds are
// wide: accuracy is the clock bench's to measure.
func TestClockStatusShowsInjectedOffsets(t *testing.T) {
	e := newHopCLIEnv(t)
	pins := kernel.DefaultHost()
	pins.BPFFS = e.bpffs
	base, err := clocksync.NewSystemClock()
	if err != nil {
		t.Fatal(err)
	}
	origin := base.Now()
	hosts := []*testbed.Host{e.pair.A, e.pair.B}
	clocks := []clocksync.Skewed{
		{Base: base, Offset: 5_000_000, Drift: 20e-6, Origin: origin},
		{Base: base, Offset: -3_000_000, Drift: -15e-6, Origin: origin},
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i, h := range hosts {
		var (
			a *clocksync.Agent
			o *clocksync.Offsets
		)
		err := h.Do(func() error {
			var err error
			if o, err = clocksync.OpenForAgent(pins); err != nil {
				return err
			}
			a, err = clocksync.New(clocksync.Config{
				Peers:   clocksync.PeerSet{Addrs: []netip.Addr{hosts[1-i].Addr}},
				Window:  time.Second,
				Clock:   clocks[i],
				Offsets: o,
				Seed:    uint64(i + 1),
			})
			return err
		})
		if err != nil {
			t.Fatalf("start the agent in %s: %v", h.Name, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer o.Close()
			defer a.Close()
			if err := a.Run(ctx); err != nil {
				t.Errorf("agent in %s: %v", h.Name, err)
			}
		}()
	}

	status := func(h *testbed.Host) []clockStatusEntry {
		code, out, stderr := e.cliIn(t, h, "clock", "status", "--json")
		if code != 0 {
			return nil
		}
		var st clockStatus
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status --json in %s: %v\n%s%s", h.Name, err, out, stderr)
		}
		return st.Peers
	}
	waitFor(t, func() bool { return len(status(hosts[0])) == 1 && len(status(hosts[1])) == 1 })
	// Four windows more: the drift comes from the envelope of the probes
	// of up to eight windows, and one or two seconds of them on a busy
	// machine can be off by more than the bound below.
	time.Sleep(4 * time.Second)

	for i, h := range hosts {
		peers := status(h)
		if len(peers) != 1 || peers[0].Peer != hosts[1-i].Addr {
			t.Errorf("status in %s: %+v, want one entry for %s", h.Name, peers, hosts[1-i].Addr)
			continue
		}
		p := peers[0]
		want := clocksync.OffsetAt(clocks[i], clocks[1-i], int64(p.RefNs))
		wantDrift := clocksync.DriftOf(clocks[i], clocks[1-i])
		t.Logf("%s: offset %d ns, injected %.0f (error bound %d ns); drift %.3f ppm, injected %.3f",
			h.Name, p.OffsetNs, want, p.ErrorNs, p.Drift*1e6, wantDrift*1e6)
		if d := math.Abs(float64(p.OffsetNs) - want); d > 3*float64(p.ErrorNs)+20_000 {
			t.Errorf("status in %s: offset %d ns, injected %.0f, error bound %d ns", h.Name, p.OffsetNs, want, p.ErrorNs)
		}
		if d := math.Abs(p.Drift - wantDrift); d > 5e-6 {
			t.Errorf("status in %s: drift %.3f ppm, injected %.3f", h.Name, p.Drift*1e6, wantDrift*1e6)
		}
	}
}
