package testbed

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestDumbbellCubic(t *testing.T) {
	requireRoot(t)
	baseline := initVeths(t)
	d := newTestDumbbell(t, DumbbellConfig{
		Senders:        2,
		BottleneckRate: 1e9,
		BufferBytes:    512 << 10,
	})
	names := netnsNames(append(d.Senders, d.Router, d.Receiver)...)
	sink := startTestSink(t, d.Receiver, netip.AddrPortFrom(d.Receiver.Addr, 0))

	ctx := testContext(t)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	samplesc, err := SampleQueue(sampleCtx, d.Router, d.BottleneckIface, time.Millisecond, 100_000)
	if err != nil {
		t.Fatalf("SampleQueue: %v", err)
	}

	const size = 32 << 20
	res, err := SendFlow(ctx, d.Senders[0], sink.Addr, FlowConfig{CC: "cubic", Bytes: size, Seed: 7, Timeout: 10 * time.Second})
	stopSampling()
	samples := <-samplesc
	if err != nil {
		t.Fatalf("SendFlow: %v", err)
	}

	stats := Summarize(samples)
	var drops uint32
	if len(samples) > 0 {
		drops = samples[len(samples)-1].Drops - samples[0].Drops
	}
	t.Logf("cubic 32 MiB over 1 Gbit/s, 512 KiB bfifo: %.3f Gbit/s in %v, cc %s, retrans %d, rtt %dus",
		res.Throughput/1e9, res.Duration, res.CC, res.Info.Total_retrans, res.Info.Rtt)
	t.Logf("queue: n=%d mean=%.0f B p50=%.0f B p99=%.0f B max=%.0f B, drops %d",
		stats.N, stats.Mean, stats.P50, stats.P99, stats.Max, drops)

	if res.CC != "cubic" {
		t.Errorf("FlowResult.CC = %q, want cubic", res.CC)
	}
	if res.Throughput < 0.5e9 || res.Throughput > 1.1e9 {
		t.Errorf("throughput %.3f Gbit/s, want between 0.5 and 1.1", res.Throughput/1e9)
	}
	if stats.Max <= 0 {
		t.Errorf("queue never built up: %+v", stats)
	}
	if r := sink.Results(); len(r) != 1 || !r[0].OK {
		t.Errorf("sink results = %+v, want one OK result", r)
	}

	// Tear down explicitly to check the cleanup; t.Cleanup's Close is then
	// a no-op.
	if err := sink.Close(); err != nil {
		t.Errorf("close sink: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	assertTornDown(t, names, baseline)
}

func TestDumbbellReachability(t *testing.T) {
	d := newTestDumbbell(t, DumbbellConfig{Senders: 2})

	// Every host reaches every other over both families, through the
	// router where needed.
	hosts := append([]*Host{d.Router, d.Receiver}, d.Senders...)
	for _, dst := range hosts {
		for _, family := range []struct {
			name string
			addr netip.Addr
		}{{"ipv4", dst.Addr}, {"ipv6", dst.Addr6}} {
			sink := startTestSink(t, dst, netip.AddrPortFrom(family.addr, 0))
			for _, src := range hosts {
				if src == dst {
					continue
				}
				_, err := SendFlow(testContext(t), src, sink.Addr, FlowConfig{Bytes: 4 << 10, Timeout: 5 * time.Second})
				if err != nil {
					t.Errorf("%s %s -> %s: %v", family.name, src.Name, dst.Name, err)
				}
			}
			if err := sink.Close(); err != nil {
				t.Errorf("close sink: %v", err)
			}
			for _, r := range sink.Results() {
				if !r.OK {
					t.Errorf("%s flow to %s from %s: %v", family.name, dst.Name, r.Remote, r.Err)
				}
			}
		}
	}
}

func TestDumbbellInvalidConfig(t *testing.T) {
	requireRoot(t)

	tests := []struct {
		name string
		cfg  DumbbellConfig
		want string
	}{
		{"no senders", DumbbellConfig{Senders: 0}, "senders"},
		{"too many senders", DumbbellConfig{Senders: maxSenders + 1}, "senders"},
		{"tiny rate", DumbbellConfig{Senders: 1, BottleneckRate: 10}, "rate"},
		{"tiny buffer", DumbbellConfig{Senders: 1, BufferBytes: 100}, "buffer"},
		{"bad prefix", DumbbellConfig{Senders: 1, Prefix: "ccl/x-"}, "prefix"},
	}
	baseline := initVeths(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			if cfg.Prefix == "" {
				cfg.Prefix = testPrefix("invalid")
			}
			d, err := NewDumbbell(testContext(t), cfg)
			if err == nil {
				d.Close()
				t.Fatalf("NewDumbbell(%+v) succeeded", cfg)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
			if left := netnsWithPrefix(t, cfg.Prefix); len(left) > 0 {
				t.Errorf("netns left behind: %v", left)
			}
			assertNoLinksInInitNetns(t, baseline)
		})
	}
}

// TestPartialConstructionCleanup makes construction fail after each step in
// turn and checks that nothing is left behind each time.
func TestPartialConstructionCleanup(t *testing.T) {
	requireRoot(t)

	tests := []struct {
		name  string
		build func(ctx context.Context, prefix string) (func() error, error)
	}{
		{"pair", func(ctx context.Context, prefix string) (func() error, error) {
			p, err := NewPair(ctx, prefix)
			if err != nil {
				return nil, err
			}
			return p.Close, nil
		}},
		{"dumbbell", func(ctx context.Context, prefix string) (func() error, error) {
			d, err := NewDumbbell(ctx, DumbbellConfig{Senders: 2, BottleneckRate: 1e8, Prefix: prefix})
			if err != nil {
				return nil, err
			}
			return d.Close, nil
		}},
	}
	baseline := initVeths(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := testPrefix(tt.name)
			const maxSteps = 100
			failures := 0
			for steps := 0; steps < maxSteps; steps++ {
				ctx := &countdownCtx{Context: testContext(t), left: steps}
				closeFn, err := tt.build(ctx, prefix)
				if err == nil {
					if err := closeFn(); err != nil {
						t.Fatalf("Close after %d steps: %v", steps, err)
					}
					t.Logf("construction takes %d steps; all %d partial failures cleaned up", steps, failures)
					break
				}
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("failure after %d steps: %v, want context.Canceled", steps, err)
				}
				failures++
				if left := netnsWithPrefix(t, prefix); len(left) > 0 {
					t.Fatalf("failure after %d steps (%v) left netns %v", steps, err, left)
				}
				assertNoLinksInInitNetns(t, baseline)
			}
			if failures < 5 {
				t.Errorf("only %d partial failures exercised", failures)
			}
		})
	}
}
