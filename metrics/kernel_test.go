package metrics

// Tests in this file attach ccload's programs to the running kernel, in a
// pin root of the test's own and a netns pair of its own, send TCP through
// them and read the metrics back: from the Collector, through promtool,
// and through a real Prometheus server. They need root and run under
// /tmp/ccload-kernel.lock.

import (
	"context"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ccload/ccload/clocksync"
	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/metrics/promtest"
	"github.com/ccload/ccload/telemetry/hop"
	"github.com/ccload/ccload/telemetry/sockops"
	"github.com/ccload/ccload/testbed"
)

// testCC is the CC the tests attach: it needs no INT and no ECN.
const testCC = "theta_powertcp"

// flowBytes is what the test flow sends: enough for hundreds of ACKs.
const flowBytes = 4 << 20

// ioTimeout bounds each step of the test flow.
const ioTimeout = 30 * time.Second

// enableProgramStats turns kernel.bpf_stats_enabled on until t ends.
func enableProgramStats(t testing.TB) {
	t.Helper()
	procSys := kernel.DefaultHost().ProcSys
	old, err := kernel.ReadSysctl(procSys, sysctlStats)
	if err != nil {
		t.Fatal(err)
	}
	if err := kernel.WriteSysctl(procSys, sysctlStats, "1"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := kernel.WriteSysctl(procSys, sysctlStats, old); err != nil {
			t.Errorf("restore %s: %v", sysctlStats, err)
		}
	})
}

// attachCC attaches name in h's pin root until t ends.
func attachCC(t testing.TB, h kernel.Host, name string) *loader.Loader {
	t.Helper()
	l := loader.New(h, loader.WithSharedMaps(sockops.New(h).Store()))
	if _, err := l.Attach(loader.AttachRequest{Name: name}); err != nil {
		t.Fatalf("attach %s: %v (fix: %s)", name, err, kernel.FixOf(err))
	}
	t.Cleanup(func() {
		if _, err := l.Detach(name); err != nil {
			t.Errorf("detach %s: %v", name, err)
		}
	})
	return l
}

// enableINT tags the connections to the test's netns until t ends.
func enableINT(t testing.TB, h kernel.Host) {
	t.Helper()
	n := sockops.New(h)
	peers := []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}
	if _, err := n.Enable(sockops.Config{Peers: peers}); err != nil {
		t.Fatalf("enable INT: %v (fix: %s)", err, kernel.FixOf(err))
	}
	t.Cleanup(func() {
		if _, err := n.Disable(); err != nil {
			t.Errorf("disable INT: %v", err)
		}
	})
}

// attachHop attaches a pinned INT hop to iface inside th until t ends.
func attachHop(t testing.TB, h kernel.Host, th *testbed.Host, iface string) {
	t.Helper()
	l := hop.NewPins(h)
	if err := th.Do(func() error {
		_, err := l.Attach(hop.Config{Iface: iface, RateBps: 1_000_000_000, BufferBytes: 1 << 20})
		return err
	}); err != nil {
		t.Fatalf("attach an INT hop to %s: %v (fix: %s)", iface, err, kernel.FixOf(err))
	}
	t.Cleanup(func() {
		if err := th.Do(func() error { _, err := l.Detach(iface); return err }); err != nil {
			t.Errorf("detach the INT hop of %s: %v", iface, err)
		}
	})
}

// openFlow sends n bytes from p.A to p.B over one connection whose both
// ends use cc, and returns once p.B has read them all, with both sockets
// still open (the sender half-closed): the CC still counts them. They
// are closed when t ends.
func openFlow(t testing.TB, p *testbed.Pair, cc string, n int64) {
	t.Helper()
	var ln net.Listener
	if err := p.B.Do(func() (err error) {
		lc := net.ListenConfig{Control: testbed.SetCC(cc)}
		ln, err = lc.Listen(context.Background(), "tcp", netip.AddrPortFrom(p.B.Addr, 0).String())
		return err
	}); err != nil {
		t.Fatalf("listen in %s: %v", p.B.Name, err)
	}
	t.Cleanup(func() { ln.Close() })
	type result struct {
		n   int64
		err error
	}
	received := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			received <- result{err: err}
			return
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(ioTimeout))
		got, err := io.Copy(io.Discard, c)
		received <- result{got, err}
	}()

	var conn net.Conn
	if err := p.A.Do(func() (err error) {
		d := net.Dialer{Timeout: ioTimeout, Control: testbed.SetCC(cc)}
		conn, err = d.Dial("tcp", ln.Addr().String())
		return err
	}); err != nil {
		t.Fatalf("connect from %s: %v", p.A.Name, err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := io.CopyN(conn, zeros{}, n); err != nil {
		t.Fatalf("send: %v", err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatalf("half-close: %v", err)
	}
	select {
	case r := <-received:
		if r.err != nil || r.n != n {
			t.Fatalf("the receiver read %d bytes (%v), want %d", r.n, r.err, n)
		}
	case <-time.After(ioTimeout):
		t.Fatalf("the receiver did not get %d bytes within %v", n, ioTimeout)
	}
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// TestKernelMetrics attaches a CC, INT, an INT hop and a clock offset,
// sends a flow through them with the program stats on, and checks each
// part's metrics, promtool's verdict on them, and that a real Prometheus
// server scrapes them.
func TestKernelMetrics(t *testing.T) {
	testutil.RequireKernelCC(t, testCC)
	p := testnet.NewPair(t)
	h := testutil.Host(t)
	l := attachCC(t, h, testCC)
	enableProgramStats(t)
	enableINT(t, h)
	iface, err := p.A.Interface()
	if err != nil {
		t.Fatal(err)
	}
	attachHop(t, h, p.A, iface)
	const offset, errNs = 1500 * time.Microsecond, 2000
	if err := p.A.Do(func() error {
		return clocksync.PublishFixed(h, []netip.Addr{p.B.Addr}, offset, errNs, time.Minute)
	}); err != nil {
		t.Fatalf("publish a clock offset: %v", err)
	}
	openFlow(t, p, testCC, flowBytes)

	// Collect inside A, whose interface has the hop and whose clock map
	// has the offset.
	c := NewCollector(h, WithErrorHandler(func(part string, err error) {
		t.Errorf("part %s: %v", part, err)
	}))
	var collected []prometheus.Metric
	if err := p.A.Do(func() error { collected = collectAll(c); return nil }); err != nil {
		t.Fatal(err)
	}
	mfs := gather(t, replay{c, collected})

	t.Run("cc", func(t *testing.T) {
		cc := map[string]string{"cc": testCC}
		if v := value(t, mfs, "ccload_cc_attached", cc); v != 1 {
			t.Errorf("ccload_cc_attached = %v, want 1", v)
		}
		acks := value(t, mfs, "ccload_cc_acks_total", cc)
		socks := value(t, mfs, "ccload_cc_sockets", cc)
		inits := value(t, mfs, "ccload_cc_sockets_initialized_total", cc)
		t.Logf("%s: %v ACKs, %v sockets now, %v sockets ever", testCC, acks, socks, inits)
		if acks <= 0 {
			t.Errorf("ccload_cc_acks_total = %v after a %d-byte flow", acks, flowBytes)
		}
		// The two ends of the open flow; nothing else on the host uses
		// the CC, which this test registered.
		if socks < 2 || socks > inits {
			t.Errorf("ccload_cc_sockets = %v with %v sockets ever, want 2 to %v", socks, inits, inits)
		}
		ccs, err := l.List()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range ccs {
			if s.Name != testCC {
				continue
			}
			var known []string
			for _, d := range ccCounters {
				known = append(known, d.key)
			}
			for key := range s.Stats {
				if !slices.Contains(known, key) {
					t.Errorf("the loader's counter %q has no family", key)
				}
			}
			if len(s.Stats) != len(known) {
				t.Errorf("the loader has %d counters, the families %d", len(s.Stats), len(known))
			}
		}
	})

	t.Run("int", func(t *testing.T) {
		if v := value(t, mfs, "ccload_int_enabled", nil); v != 1 {
			t.Errorf("ccload_int_enabled = %v, want 1", v)
		}
		if v := value(t, mfs, "ccload_int_tagged_segments_total", nil); v <= 0 {
			t.Errorf("ccload_int_tagged_segments_total = %v after a flow to a tagged peer", v)
		}
		st, err := sockops.New(h).Status()
		if err != nil {
			t.Fatal(err)
		}
		for key := range st.Stats {
			if c.fs.intCounters[key] == nil {
				t.Errorf("INT's counter %q has no family", key)
			}
		}
	})

	t.Run("hop", func(t *testing.T) {
		labels := map[string]string{"iface": iface}
		if v := value(t, mfs, "ccload_int_hop_attached", labels); v != 1 {
			t.Errorf("ccload_int_hop_attached = %v, want 1", v)
		}
		if v := value(t, mfs, "ccload_int_hop_packets_total", labels); v <= 0 {
			t.Errorf("ccload_int_hop_packets_total = %v after a flow through the hop", v)
		}
	})

	t.Run("clock", func(t *testing.T) {
		peer := map[string]string{"peer": p.B.Addr.String()}
		if v := value(t, mfs, "ccload_clock_offset_seconds", peer); math.Abs(v-offset.Seconds()) > 1e-9 {
			t.Errorf("ccload_clock_offset_seconds = %v, want %v", v, offset.Seconds())
		}
		if v := value(t, mfs, "ccload_clock_error_seconds", peer); math.Abs(v-errNs/1e9) > 1e-12 {
			t.Errorf("ccload_clock_error_seconds = %v, want %v", v, errNs/1e9)
		}
		if v := value(t, mfs, "ccload_clock_drift_ratio", peer); v != 0 {
			t.Errorf("ccload_clock_drift_ratio = %v, want 0", v)
		}
		if v := value(t, mfs, "ccload_clock_offset_valid", peer); v != 1 {
			t.Errorf("ccload_clock_offset_valid = %v, want 1", v)
		}
	})

	t.Run("programs", func(t *testing.T) {
		if v := value(t, mfs, "ccload_bpf_stats_enabled", nil); v != 1 {
			t.Errorf("ccload_bpf_stats_enabled = %v, want 1", v)
		}
		runs := map[string]float64{}
		var ccProgs []string
		for _, m := range series(mfs, "ccload_bpf_program_runs_total", nil) {
			lb := labelsOf(m)
			t.Logf("%s (id %s, %s, %s): %v runs", lb["prog"], lb["id"], lb["part"], lb["owner"], valueOf(m))
			runs[lb["part"]] += valueOf(m)
			if lb["owner"] == testCC {
				ccProgs = append(ccProgs, lb["prog"])
			}
		}
		// The callbacks that use maps, and those that are found by name.
		for _, cb := range []string{"init", "cong_control", "release", "ssthresh", "undo_cwnd"} {
			if !slices.Contains(ccProgs, testCC+"_"+cb) {
				t.Errorf("%s's %s program is not among its programs %q", testCC, cb, ccProgs)
			}
		}
		for _, part := range []string{partCC, partINT, partHop} {
			if runs[part] <= 0 {
				t.Errorf("the programs of part %s ran %v times", part, runs[part])
			}
		}
		if n := len(series(mfs, "ccload_bpf_program_run_seconds_total", nil)); n != len(series(mfs, "ccload_bpf_program_runs_total", nil)) {
			t.Errorf("%d run time series for %d run count series", n, len(runs))
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, part := range parts {
			if v := value(t, mfs, scrapeErrorsName, map[string]string{"part": part}); v != 0 {
				t.Errorf("%s{part=%q} = %v", scrapeErrorsName, part, v)
			}
		}
	})

	t.Run("promtool", func(t *testing.T) {
		promtoolCheck(t, exposition(t, mfs))
	})

	t.Run("prometheus", func(t *testing.T) {
		// Served from the test's own network namespace: the CC's and the
		// programs' series are there, the hop's and the clock's are not.
		reg := prometheus.NewRegistry()
		reg.MustRegister(NewCollector(h))
		mux := http.NewServeMux()
		mux.Handle("/metrics", Handler(reg))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		prom := promtest.Run(t, srv.Listener.Addr().String())
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		q := `ccload_cc_acks_total{cc="` + testCC + `"}`
		v, err := prom.Wait(ctx, q, func(v float64) bool { return v > 0 })
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("Prometheus: %s = %v", q, v)
		if v, ok, err := prom.Query(ctx, `up{job="ccload"}`); err != nil || !ok || v != 1 {
			t.Errorf(`up{job="ccload"} = %v, %v, %v; want 1`, v, ok, err)
		}
	})
}
