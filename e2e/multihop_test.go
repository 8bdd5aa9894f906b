package e2e

// Multi-hop INT: a flow crosses two bottlenecks in series, each with its
// own INT hop, and the sender receives both hops' records in path order.

import (
	"context"
	"testing"
	"time"

	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/telemetry"
	"github.com/ccload/ccload/telemetry/hop"
	"github.com/ccload/ccload/telemetry/sockops"
	"github.com/ccload/ccload/testbed"
)

// TestINTTwoHops sends a powertcp flow across a testbed.Chain whose first
// hop runs at 1 Gbit/s and whose second, the bottleneck, at 100 Mbit/s.
// Each router's egress has an INT hop. The receiver must see forward
// options with two records, hop 1's first, and the sender echoes of both;
// the second hop's records must show its queue, the first's stay small;
// and the data must arrive intact.
func TestINTTwoHops(t *testing.T) {
	testutil.RequireKernelCC(t, "powertcp")
	l, n := newSys(t)
	enableINTForTest(t, n, sockops.Config{})
	attachForTest(t, l, loader.AttachRequest{Name: "powertcp"})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := testbed.NewChain(ctx, testbed.ChainConfig{
		Senders: 1,
		Hop1:    testbed.BottleneckConfig{Rate: 1_000_000_000, BufferBytes: 1 << 20},
		Hop2:    testbed.BottleneckConfig{Rate: 100_000_000, BufferBytes: 1 << 20},
	})
	if err != nil {
		t.Fatalf("build chain: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close chain: %v", err)
		}
	})
	for i, b := range c.Bottlenecks {
		var h *hop.Hop
		if err := b.Host.Do(func() (err error) {
			h, err = hop.New(hop.Config{Iface: b.Iface, RateBps: b.Rate, BufferBytes: b.BufferBytes, BurstBytes: b.BurstBytes})
			return err
		}); err != nil {
			t.Fatalf("attach INT hop %d: %v", i+1, err)
		}
		t.Cleanup(func() { h.Close() })
	}
	sink := testnet.StartSink(t, c.Receiver, c.Receiver.Addr)
	atReceiver := capture(t, ctx, c.Receiver, 600)
	atSender := capture(t, ctx, c.Senders[0], 600)
	flow := sendFlow(t, c.Senders[0], sink.Addr, "powertcp", 8<<20)
	waitSink(t, sink, 1, 8<<20)
	cancel()
	rx, tx := <-atReceiver, <-atSender

	var forward, echo int
	var maxQ [2]uint64
	for _, p := range rx {
		if !p.found || p.opt.Direction != telemetry.Forward || p.info.PayloadLen == 0 {
			continue
		}
		forward++
		if len(p.opt.Hops) != 2 || p.opt.Hops[0].RateBps != 1_000_000_000 || p.opt.Hops[1].RateBps != 100_000_000 {
			t.Fatalf("forward option at the receiver: %v, want hop 1 at 1 Gbit/s then hop 2 at 100 Mbit/s", p.opt)
		}
	}
	for _, p := range tx {
		if !p.found || p.opt.Direction != telemetry.Echo {
			continue
		}
		echo++
		if len(p.opt.Hops) != 2 {
			t.Fatalf("echo at the sender: %v, want two hop records", p.opt)
		}
		for i, h := range p.opt.Hops {
			maxQ[i] = max(maxQ[i], h.QueueBytes())
		}
	}
	t.Logf("%.0f Mbit/s; %d forward options with two records at the receiver, %d echoes at the sender; largest queue echoed: hop 1 %d B, hop 2 %d B",
		flow.Throughput/1e6, forward, echo, maxQ[0], maxQ[1])
	if forward == 0 || echo == 0 {
		t.Fatalf("no two-hop INT on the wire: %d forward, %d echoes", forward, echo)
	}
	if maxQ[1] == 0 || maxQ[1] < maxQ[0] {
		t.Errorf("the 100 Mbit/s hop echoed a largest queue of %d B, the 1 Gbit/s hop %d B: want the slower hop's larger", maxQ[1], maxQ[0])
	}
	if flow.Throughput < 70e6 {
		t.Errorf("powertcp reached %.0f Mbit/s through a 100 Mbit/s bottleneck", flow.Throughput/1e6)
	}
}
