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
	var (
		wg      sync.WaitGroup
		results [2]result
	)
	for i, pair := range [][2]*testbed.Host{{a, b}, {b, a}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[i]
			// 20 windows of 300 ms. The agent that stops last has a
			// window without its peer; its entry must outlive that
			// window (clocksync's TestPublishKeepsEntryUntilItExpires).
			r.code, r.stdout, r.stderr = e.cliIn(t, pair[0], "clock", "run", "--peers", pair[1].Addr.String(),
				"--window", "300ms", "--duration", "6s")
		}()
	}
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

	for _, pair := range [][2]*testbed.Host{{a, b}, {b, a}} {
		code, out, stderr := e.cliIn(t, pair[0], "clock", "status", "--json")
		if code != 0 {
			t.Fatalf("status in %s: exit %d: %s", pair[0].Name, code, stderr)
		}
		var st struct {
			Map   string `json:"map"`
			Peers []struct {
				Peer      string  `json:"peer"`
				OffsetNs  int64   `json:"offset_ns"`
				ErrorNs   uint32  `json:"error_ns"`
				PureShare float64 `json:"pure_share"`
				Probed    bool    `json:"probed"`
				AgeNs     int64   `json:"age_ns"`
			} `json:"peers"`
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		if !strings.HasPrefix(st.Map, e.bpffs) || len(st.Peers) != 1 || st.Peers[0].Peer != pair[1].Addr.String() ||
			!st.Peers[0].Probed || st.Peers[0].PureShare <= 0 || st.Peers[0].ErrorNs == 0 {
			t.Errorf("status in %s: %s\nagents' output:\n%s%s\n%s%s", pair[0].Name, out,
				results[0].stdout, results[0].stderr, results[1].stdout, results[1].stderr)
			continue
		}
		// Both hosts share one clock: the offset is an error. Bound it
		// wide, and by the agent's own error bound where a loaded machine
		// makes that larger (as clocksync's agent test does); the clock
		// bench measures precision.
		off, bound := st.Peers[0].OffsetNs, max(int64(100_000), 3*int64(st.Peers[0].ErrorNs)+20_000)
		t.Logf("status in %s: offset %d ns, error bound %d ns", pair[0].Name, off, st.Peers[0].ErrorNs)
		if off > bound || off < -bound {
			t.Errorf("status in %s: offset %d ns on a shared clock (error bound %d ns)", pair[0].Name, off, st.Peers[0].ErrorNs)
		}
		code, out, _ = e.cliIn(t, pair[0], "clock", "status")
		if code != 0 || !strings.Contains(out, "PEER") || !strings.Contains(out, pair[1].Addr.String()) || !strings.Contains(out, "probes") {
			t.Errorf("status table in %s: exit %d\n%s", pair[0].Name, code, out)
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

	type entry struct {
		Peer    string  `json:"peer"`
		Offset  int64   `json:"offset_ns"`
		Ref     uint64  `json:"ref_ns"`
		Drift   float64 `json:"drift"`
		ErrorNs uint32  `json:"error_ns"`
	}
	status := func(h *testbed.Host) []entry {
		code, out, stderr := e.cliIn(t, h, "clock", "status", "--json")
		if code != 0 {
			return nil
		}
		var st struct {
			Peers []entry `json:"peers"`
		}
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
		if len(peers) != 1 || peers[0].Peer != hosts[1-i].Addr.String() {
			t.Errorf("status in %s: %+v, want one entry for %s", h.Name, peers, hosts[1-i].Addr)
			continue
		}
		p := peers[0]
		want := clocksync.OffsetAt(clocks[i], clocks[1-i], int64(p.Ref))
		wantDrift := clocksync.DriftOf(clocks[i], clocks[1-i])
		t.Logf("%s: offset %d ns, injected %.0f (error bound %d ns); drift %.3f ppm, injected %.3f",
			h.Name, p.Offset, want, p.ErrorNs, p.Drift*1e6, wantDrift*1e6)
		if d := math.Abs(float64(p.Offset) - want); d > 3*float64(p.ErrorNs)+20_000 {
			t.Errorf("status in %s: offset %d ns, injected %.0f, error bound %d ns", h.Name, p.Offset, want, p.ErrorNs)
		}
		if d := math.Abs(p.Drift - wantDrift); d > 5e-6 {
			t.Errorf("status in %s: drift %.3f ppm, injected %.3f", h.Name, p.Drift*1e6, wantDrift*1e6)
		}
	}
}
