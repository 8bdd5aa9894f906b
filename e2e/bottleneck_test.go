package e2e

// Behaviour on a bottleneck: sender -> router -> receiver, the router
// shaping to 1 Gbit/s with htb, its queue read from the qdisc backlog.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/testbed"
)

// queueRun is one flow across the bottleneck with the queue it built.
type queueRun struct {
	cc string
	testbed.Measurement
}

// runFlow sends bytes from the first sender with cc while sampling the
// bottleneck queue every 500µs. during, if not nil, runs concurrently.
func runFlow(t testing.TB, d *testbed.Dumbbell, sink *testbed.Sink, cc string, bytes int64, during func()) queueRun {
	t.Helper()
	if during != nil {
		go during()
	}
	m, err := d.MeasureFlow(context.Background(), 0, sink.Addr, testbed.FlowConfig{
		CC: cc, Bytes: bytes, Seed: uint64(time.Now().UnixNano()), Timeout: 60 * time.Second,
	}, 500*time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	if m.Flow.CC != cc {
		t.Fatalf("flow ran %q, want %q", m.Flow.CC, cc)
	}
	return queueRun{cc: cc, Measurement: m}
}

func formatRuns(runs []queueRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-16s %10s %12s %12s %12s %12s %8s\n", "cc", "Mbit/s", "queue mean", "queue p50", "queue p99", "queue max", "samples")
	for _, r := range runs {
		q := r.Steady()
		fmt.Fprintf(&b, "%-16s %10.0f %10.0fKB %10.0fKB %10.0fKB %10.0fKB %8d\n", r.cc, r.Flow.Throughput/1e6,
			q.Mean/1e3, q.P50/1e3, q.P99/1e3, q.Max/1e3, q.N)
	}
	return b.String()
}

// TestBottleneckQueueThetaVsCubic runs one long flow of each CC through a
// 1 Gbit/s bottleneck with a 1 MiB buffer: θ-PowerTCP must keep the queue
// far below cubic's without giving up most of the throughput.
func TestBottleneckQueueThetaVsCubic(t *testing.T) {
	testutil.RequireKernelCC(t, "theta_powertcp")
	l, _ := newSys(t)
	attachForTest(t, l, loader.AttachRequest{Name: "theta_powertcp"})
	d := newDumbbell(t, 1)
	sink := testnet.StartSink(t, d.Receiver, d.Receiver.Addr)

	const bytes = 192 << 20 // about 1.6 s at 1 Gbit/s
	var runs []queueRun
	for _, cc := range []string{"cubic", "theta_powertcp"} {
		runs = append(runs, runFlow(t, d, sink, cc, bytes, nil))
	}
	waitSink(t, sink, len(runs), bytes)
	t.Logf("one flow through %d Mbit/s, %d KiB buffer (steady state: after the first 20%% of each flow):\n%s",
		bottleneckRate/1_000_000, bottleneckBuffer>>10, formatRuns(runs))

	cubic, theta := runs[0], runs[1]
	cq, tq := cubic.Steady(), theta.Steady()
	// The comparison needs cubic to have filled the bottleneck's buffer,
	// which it does whenever the shaper, not the CPU, limits it; its
	// throughput alone says less (797 Mbit/s with a full buffer once, on
	// a busy host).
	if cq.P50 < bottleneckBuffer/4 {
		t.Fatalf("cubic (%.0f Mbit/s) kept a median queue of %.0f KB, under a quarter of the buffer: the bottleneck is not the shaper (CPU-bound?)",
			cubic.Flow.Throughput/1e6, cq.P50/1e3)
	}
	// A wide margin: on this 2-vCPU host θ has come out at 89 % of
	// cubic's rate in a healthy run; the bench, not this test, ranks them.
	if theta.Flow.Throughput < 0.6*cubic.Flow.Throughput {
		t.Errorf("theta_powertcp throughput %.0f Mbit/s is below 60%% of cubic's %.0f Mbit/s",
			theta.Flow.Throughput/1e6, cubic.Flow.Throughput/1e6)
	}
	if tq.Mean > cq.Mean/4 || tq.P99 > cq.P99/2 {
		t.Errorf("theta_powertcp queue (mean %.0f KB, p99 %.0f KB) is not clearly below cubic's (mean %.0f KB, p99 %.0f KB)",
			tq.Mean/1e3, tq.P99/1e3, cq.Mean/1e3, cq.P99/1e3)
	}
}

// TestBetaMovesQueue changes β while a θ-PowerTCP flow runs through the
// bottleneck. The equilibrium queue grows with β, so the flow's own queue
// must follow it. The window is capped at host_bw·τ, so τ is set to
// 500 µs to leave room for the new β.
func TestBetaMovesQueue(t *testing.T) {
	testutil.RequireKernelCC(t, "theta_powertcp")
	l, _ := newSys(t)
	attachForTest(t, l, loader.AttachRequest{Name: "theta_powertcp",
		Params: map[string]string{"host_bw": "10gbit", "base_rtt": "500us"}})
	d := newDumbbell(t, 1)
	sink := testnet.StartSink(t, d.Receiver, d.Receiver.Addr)

	const change = 800 * time.Millisecond
	setErr := make(chan error, 1)
	run := runFlow(t, d, sink, "theta_powertcp", 256<<20, func() {
		time.Sleep(change)
		_, err := l.Set("theta_powertcp", map[string]string{"beta": "400KB"})
		setErr <- err
	})
	if err := <-setErr; err != nil {
		t.Fatal(err)
	}
	waitSink(t, sink, 1, 256<<20)

	before := run.Window(300*time.Millisecond, change)
	after := run.Window(change+300*time.Millisecond, run.Flow.Duration)
	t.Logf("queue with default β: mean %.0f KB (%d samples); after set beta=400KB: mean %.0f KB (%d samples); %.0f Mbit/s",
		before.Mean/1e3, before.N, after.Mean/1e3, after.N, run.Flow.Throughput/1e6)
	if before.N == 0 || after.N == 0 {
		t.Fatalf("flow too short to compare (%v)", run.Flow.Duration)
	}
	if after.Mean < 2*before.Mean || after.Mean-before.Mean < 100e3 {
		t.Errorf("queue did not follow the new β: mean %.0f KB before, %.0f KB after", before.Mean/1e3, after.Mean/1e3)
	}
}
