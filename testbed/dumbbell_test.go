package testbed

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/ccload/ccload/internal/testutil"
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
	checkReachability(t, hosts)
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
		{"ecn without rate", DumbbellConfig{Senders: 1, ECNThreshold: time.Millisecond}, "ecn"},
		{"negative ecn threshold", DumbbellConfig{Senders: 1, BottleneckRate: 1e8, ECNThreshold: -time.Millisecond}, "ecn"},
		{"tiny ecn threshold", DumbbellConfig{Senders: 1, BottleneckRate: 1e8, ECNThreshold: time.Nanosecond}, "ecn"},
		{"huge ecn threshold", DumbbellConfig{Senders: 1, BottleneckRate: 1e8, ECNThreshold: 2 * time.Second}, "ecn"},
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
	// Every shim attached is closed again, whenever construction fails.
	shims := &countingShim{}

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
			d, err := NewDumbbell(ctx, DumbbellConfig{Senders: 2, BottleneckRate: 1e8, Prefix: prefix, SenderEgress: shims.attach})
			if err != nil {
				return nil, err
			}
			return d.Close, nil
		}},
		{"chain", func(ctx context.Context, prefix string) (func() error, error) {
			c, err := NewChain(ctx, ChainConfig{Senders: 2, CrossSenders: 1, Hop1: BottleneckConfig{Rate: 1e8},
				Hop2: BottleneckConfig{Rate: 5e7}, Prefix: prefix, SenderEgress: shims.attach, CrossEgress: shims.attach})
			if err != nil {
				return nil, err
			}
			return c.Close, nil
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
				if open, closed := shims.counts(); open != closed {
					t.Fatalf("failure after %d steps: %d egress shims attached, %d closed", steps, open, closed)
				}
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

func TestECNThresholdBytes(t *testing.T) {
	tests := []struct {
		name string
		cfg  DumbbellConfig
		want uint64
	}{
		{"off", DumbbellConfig{BottleneckRate: 1e8}, 0},
		{"no rate", DumbbellConfig{ECNThreshold: time.Millisecond}, 0},
		{"1ms at 100Mbit", DumbbellConfig{BottleneckRate: 1e8, ECNThreshold: time.Millisecond}, 12_500},
		{"30us at 10Gbit", DumbbellConfig{BottleneckRate: 1e10, ECNThreshold: 30 * time.Microsecond}, 37_500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.cfg.ECNThresholdBytes(); got != tt.want {
				t.Errorf("ECNThresholdBytes() = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestStepMarkerOptions(t *testing.T) {
	tests := []struct {
		threshold time.Duration
		wantCE    uint32 // µs
	}{
		{time.Microsecond, 1},
		{1500 * time.Nanosecond, 2},
		{2 * time.Millisecond, 2000},
		{time.Second, 1_000_000},
	}
	for _, tt := range tests {
		o := stepMarker(tt.threshold, 1<<20)
		if *o.CEThreshold != tt.wantCE {
			t.Errorf("stepMarker(%v): ce_threshold %dus, want %dus", tt.threshold, *o.CEThreshold, tt.wantCE)
		}
		if *o.Flows != 1 || *o.ECN != 1 || *o.MemoryLimit != 1<<20 {
			t.Errorf("stepMarker(%v): flows %d, ecn %d, memory_limit %d; want 1, 1, %d",
				tt.threshold, *o.Flows, *o.ECN, *o.MemoryLimit, 1<<20)
		}
		if time.Duration(*o.Target)*time.Microsecond <= maxECNThreshold {
			t.Errorf("stepMarker(%v): CoDel target %dus is not above the largest threshold", tt.threshold, *o.Target)
		}
	}
}

// TestDumbbellECNMarking builds a bottleneck with ECNThreshold and checks
// that the leaf is the fq_codel step marker asked for, that an ECN-capable
// flow through it gets CE marks, and that the htb root's backlog still
// aggregates the leaf's, so that SampleQueue reads the marking queue.
//
// The host's kernel may lack fq_codel; the test then checks that the error
// is detectable and that nothing was left behind, and skips.
func TestDumbbellECNMarking(t *testing.T) {
	requireRoot(t)
	baseline := initVeths(t)
	const threshold = time.Millisecond
	cfg := DumbbellConfig{
		Senders:        1,
		BottleneckRate: 100e6,
		BufferBytes:    1 << 20,
		ECNThreshold:   threshold,
		Prefix:         testPrefix("ecn"),
	}
	d, err := NewDumbbell(testContext(t), cfg)
	if errors.Is(err, ErrQdiscNotSupported) {
		if left := netnsWithPrefix(t, cfg.Prefix); len(left) > 0 {
			t.Errorf("failed construction left netns %v", left)
		}
		assertNoLinksInInitNetns(t, baseline)
		t.Logf("NewDumbbell: %v", err)
		testutil.SkipKernelLacks(t, "fq_codel (CONFIG_NET_SCH_FQ_CODEL)")
	}
	if err != nil {
		t.Fatalf("NewDumbbell(%+v): %v", cfg, err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("close dumbbell: %v", err)
		}
	})

	// The leaf is the fq_codel asked for.
	nl, err := d.Router.handle()
	if err != nil {
		t.Fatal(err)
	}
	link, err := nl.LinkByName(d.BottleneckIface)
	if err != nil {
		t.Fatal(err)
	}
	qdiscs, err := nl.QdiscList(link)
	if err != nil {
		t.Fatal(err)
	}
	var leaf *netlink.FqCodel
	for _, q := range qdiscs {
		if q.Attrs().Handle == leafHandle {
			leaf, _ = q.(*netlink.FqCodel)
			if leaf == nil {
				t.Fatalf("leaf qdisc is %s, want fq_codel", q.Type())
			}
		}
	}
	if leaf == nil {
		t.Fatalf("no leaf qdisc %#x among %v", leafHandle, qdiscs)
	}
	t.Logf("leaf: target %dus, interval %dus, limit %d p, memory_limit %d B, ecn %d, flows %d, ce_threshold %dus",
		leaf.Target, leaf.Interval, leaf.Limit, leaf.MemoryLimit, leaf.ECN, leaf.Flows, leaf.CEThreshold)
	// CoDel keeps times in units of 1024 ns and reports them rounded down
	// to microseconds, so 1000us reads back as 999us.
	ceErr := int64(leaf.CEThreshold) - int64(threshold/time.Microsecond)
	if ceErr < -1 || ceErr > 1 || leaf.Flows != 1 || leaf.ECN != 1 || leaf.MemoryLimit != cfg.BufferBytes {
		t.Errorf("leaf %+v, ce_threshold %dus, memory_limit %d B: want ce_threshold %dus (±1), one flow queue, ecn, memory_limit %d B",
			leaf, leaf.CEThreshold, leaf.MemoryLimit, threshold/time.Microsecond, cfg.BufferBytes)
	}

	// An ECN-capable reno flow: the sender asks for ECN, the receiver's
	// default (tcp_ecn=2) grants it.
	if err := d.Senders[0].setSysctls(sysctl{"net/ipv4/tcp_ecn", "1"}); err != nil {
		t.Fatal(err)
	}
	sink := startTestSink(t, d.Receiver, netip.AddrPortFrom(d.Receiver.Addr, 0))
	r, err := newQdiscReader(d.Router, d.BottleneckIface)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.close)

	ctx := testContext(t)
	type flowDone struct {
		res FlowResult
		err error
	}
	done := make(chan flowDone, 1)
	go func() {
		res, err := SendFlow(ctx, d.Senders[0], sink.Addr, FlowConfig{CC: "reno", Bytes: 16 << 20, Seed: 3, Timeout: 25 * time.Second})
		done <- flowDone{res, err}
	}()

	// Read root and leaf from one dump each millisecond while the flow
	// runs (bounded by the flow's timeout).
	var (
		flow               flowDone
		reads, busy, worst int
	)
	for running := true; running; {
		select {
		case flow = <-done:
			running = false
		case <-time.After(time.Millisecond):
		}
		stats, err := r.list()
		if err != nil {
			t.Fatal(err)
		}
		root, l, err := rootAndLeaf(stats, leafHandle)
		if err != nil {
			t.Fatal(err)
		}
		reads++
		if l.Backlog > 0 {
			busy++
		}
		// Root and leaf come from one dump but are not read atomically; a
		// packet may move in between.
		diff := int(root.Backlog) - int(l.Backlog)
		worst = max(worst, diff, -diff)
		if diff < -maxGSOPacket || diff > maxGSOPacket {
			t.Errorf("root backlog %d B differs from the fq_codel leaf's %d B by more than a GSO packet", root.Backlog, l.Backlog)
		}
	}
	if flow.err != nil {
		t.Fatalf("SendFlow: %v", flow.err)
	}
	res := flow.res
	t.Logf("reno with ECN, 16 MiB through %d Mbit/s, marking at %v (%d B): %.1f Mbit/s, rtt %dus, cwnd %d, delivered %d, delivered_ce %d, retrans %d",
		cfg.BottleneckRate/1e6, threshold, cfg.ECNThresholdBytes(), res.Throughput/1e6, res.Info.Rtt, res.Info.Snd_cwnd,
		res.Info.Delivered, res.Info.Delivered_ce, res.Info.Total_retrans)
	t.Logf("%d reads of root and leaf, %d with a queue; largest root-leaf difference %d B", reads, busy, worst)
	if res.Info.Options&tcpiOptECN == 0 {
		t.Fatalf("ECN was not negotiated (tcpi_options %#x)", res.Info.Options)
	}
	if res.Info.Delivered_ce == 0 {
		t.Errorf("no packet of the flow was CE-marked")
	}
	if busy == 0 {
		t.Errorf("the leaf never held a queue in %d reads", reads)
	}

	// At rest the root's counters equal the leaf's.
	stats, err := r.list()
	if err != nil {
		t.Fatal(err)
	}
	root, l, err := rootAndLeaf(stats, leafHandle)
	if err != nil {
		t.Fatal(err)
	}
	if root.Backlog != l.Backlog || root.Qlen != l.Qlen || root.Drops != l.Drops {
		t.Errorf("at rest the root's queue stats %+v do not aggregate the leaf's %+v", root, l)
	}
}

// tcpiOptECN is TCPI_OPT_ECN from linux/tcp.h: ECN was negotiated.
const tcpiOptECN = 0x08

// countingShim is an egress shim that only counts attachments and closes.
type countingShim struct {
	mu           sync.Mutex
	open, closed int
}

func (s *countingShim) attach(context.Context, *Host, string) (io.Closer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open++
	return closerFunc(func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.closed++
		return nil
	}), nil
}

func (s *countingShim) counts() (open, closed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open, s.closed
}
