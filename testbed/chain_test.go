package testbed

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// sampleDuring samples every bottleneck in bs every interval while run
// runs, and returns the samples per bottleneck.
func sampleDuring(t *testing.T, bs []Bottleneck, interval time.Duration, run func()) [][]QueueSample {
	t.Helper()
	ctx, stop := context.WithCancel(testContext(t))
	defer stop()
	chans := make([]<-chan []QueueSample, len(bs))
	for i, b := range bs {
		ch, err := b.SampleQueue(ctx, interval, int(testTimeout/interval)+1)
		if err != nil {
			t.Fatalf("SampleQueue on hop %d: %v", i+1, err)
		}
		chans[i] = ch
	}
	run()
	stop()
	out := make([][]QueueSample, len(bs))
	for i, ch := range chans {
		out[i] = <-ch
	}
	return out
}

// sentDelta is the number of bytes a bottleneck sent between the first and
// the last sample.
func sentDelta(samples []QueueSample) uint64 {
	if len(samples) < 2 {
		return 0
	}
	return samples[len(samples)-1].SentBytes - samples[0].SentBytes
}

// steady drops the first fifth of the samples: slow start.
func steady(samples []QueueSample) []QueueSample {
	return samples[len(samples)/5:]
}

// TestChainTwoBottlenecks sends a cubic flow from a sender across both
// hops, with either hop the slower one, over IPv4 and IPv6: the slower
// hop's queue fills, the faster one's stays near empty, both carry the
// flow, and the sink verifies every byte.
func TestChainTwoBottlenecks(t *testing.T) {
	const (
		slow = 300e6
		fast = 1e9
		size = 24 << 20
	)
	tests := []struct {
		name       string
		hop1, hop2 uint64
		ipv6       bool
		congested  int // index into Bottlenecks
	}{
		{"hop 1 slower ipv4", slow, fast, false, 0},
		{"hop 1 slower ipv6", slow, fast, true, 0},
		{"hop 2 slower ipv4", fast, slow, false, 1},
		{"hop 2 slower ipv6", fast, slow, true, 1},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestChain(t, ChainConfig{
				Senders: 1,
				Hop1:    BottleneckConfig{Rate: tt.hop1, BufferBytes: 512 << 10},
				Hop2:    BottleneckConfig{Rate: tt.hop2, BufferBytes: 512 << 10},
			})
			dst := c.Receiver.Addr
			if tt.ipv6 {
				dst = c.Receiver.Addr6
			}
			warmUpPath(t, c.Senders[0], c.Receiver, dst)
			sink := startTestSink(t, c.Receiver, netip.AddrPortFrom(dst, 0))

			var res FlowResult
			var err error
			samples := sampleDuring(t, c.Bottlenecks, time.Millisecond, func() {
				res, err = SendFlow(testContext(t), c.Senders[0], sink.Addr,
					FlowConfig{CC: "cubic", Bytes: size, Seed: uint64(i + 1), Timeout: 20 * time.Second})
			})
			if err != nil {
				t.Fatalf("SendFlow: %v", err)
			}
			if r := sink.Results(); len(r) != 1 || !r[0].OK || r[0].Bytes != size {
				t.Errorf("sink results %+v, want one OK result of %d bytes", r, size)
			}

			hot, cold := steady(samples[tt.congested]), steady(samples[1-tt.congested])
			hs, cs := Summarize(hot), Summarize(cold)
			t.Logf("%.0f Mbit/s in %v; congested hop %d: mean %.0f B p99 %.0f B; other hop: mean %.0f B p99 %.0f B max %.0f B",
				res.Throughput/1e6, res.Duration.Round(time.Millisecond), tt.congested+1, hs.Mean, hs.P99, cs.Mean, cs.P99, cs.Max)

			// The slower hop's rate after slow start: a loss recovery in
			// slow start can cost a short flow much of its average, so the
			// flow's own throughput is only bounded from above.
			var rate float64
			if n := len(hot); n > 1 && hot[n-1].At > hot[0].At {
				rate = float64(sentDelta(hot)) * 8 / (hot[n-1].At - hot[0].At).Seconds()
			}
			if rate < 0.7*slow || rate > 1.05*slow || res.Throughput > 1.05*slow {
				t.Errorf("the slower hop sent at %.0f Mbit/s after slow start and the flow averaged %.0f Mbit/s; want about the slower hop's %.0f",
					rate/1e6, res.Throughput/1e6, slow/1e6)
			}
			if hs.Mean < 100<<10 {
				t.Errorf("the slower hop's queue averaged only %.0f B", hs.Mean)
			}
			if cs.P99 > 2*maxGSOPacket || cs.Mean > hs.Mean/8 {
				t.Errorf("the faster hop's queue (mean %.0f B, p99 %.0f B) is not near empty next to the slower's mean %.0f B",
					cs.Mean, cs.P99, hs.Mean)
			}
			// Both hops carried the whole flow (plus headers).
			for hop, s := range samples {
				if got := sentDelta(s); got < size {
					t.Errorf("hop %d sent %d bytes during the flow, want at least %d", hop+1, got, size)
				}
			}
		})
	}
}

// TestChainCrossTraffic loads hop 2 with a flow from a cross sender: it
// queues at hop 2 while hop 1 carries nothing; a sender's flow that runs
// at the same time crosses both hops and shares hop 2.
func TestChainCrossTraffic(t *testing.T) {
	c := newTestChain(t, ChainConfig{
		Senders:      1,
		CrossSenders: 2,
		Hop1:         BottleneckConfig{Rate: 1e9, BufferBytes: 512 << 10},
		Hop2:         BottleneckConfig{Rate: 500e6, BufferBytes: 512 << 10},
	})
	sink := startTestSink(t, c.Receiver, netip.AddrPortFrom(netip.IPv6Unspecified(), 0))
	ctx := testContext(t)
	port := sink.Addr.Port()

	// Cross traffic alone, over IPv4 from one cross sender and IPv6 from
	// the other.
	const d = 700 * time.Millisecond
	var errs [2]error
	var res [2]FlowResult
	samples := sampleDuring(t, c.Bottlenecks, time.Millisecond, func() {
		done := make(chan int, 2)
		for j, dst := range []netip.Addr{c.Receiver.Addr, c.Receiver.Addr6} {
			go func() {
				res[j], errs[j] = SendFlow(ctx, c.CrossSenders[j], netip.AddrPortFrom(dst, port),
					FlowConfig{CC: "cubic", For: d, Seed: uint64(10 + j), Timeout: 10 * time.Second})
				done <- j
			}()
		}
		for range 2 {
			<-done
		}
	})
	var total int64
	for j := range errs {
		if errs[j] != nil {
			t.Fatalf("cross flow %d: %v", j, errs[j])
		}
		total += res[j].Bytes
	}
	hop1, hop2 := sentDelta(samples[0]), sentDelta(samples[1])
	q2 := Summarize(steady(samples[1]))
	t.Logf("cross traffic: %d payload bytes; hop 1 sent %d B, hop 2 sent %d B; hop 2 queue mean %.0f B, p99 %.0f B",
		total, hop1, hop2, q2.Mean, q2.P99)
	// IPv6 neighbour discovery or MLD may cross the router link; no data does.
	if hop1 > 16<<10 {
		t.Errorf("hop 1 sent %d bytes while only cross traffic ran", hop1)
	}
	if hop2 < uint64(total) {
		t.Errorf("hop 2 sent %d bytes, less than the cross flows' %d", hop2, total)
	}
	if q2.Mean < 100<<10 {
		t.Errorf("hop 2's queue averaged only %.0f B under two cross flows", q2.Mean)
	}

	// A sender's flow together with cross traffic: both cross hop 2.
	samples = sampleDuring(t, c.Bottlenecks, time.Millisecond, func() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			res[1], errs[1] = SendFlow(ctx, c.CrossSenders[0], netip.AddrPortFrom(c.Receiver.Addr, port),
				FlowConfig{CC: "cubic", For: d, Seed: 20, Timeout: 10 * time.Second})
		}()
		res[0], errs[0] = SendFlow(ctx, c.Senders[0], netip.AddrPortFrom(c.Receiver.Addr, port),
			FlowConfig{CC: "cubic", For: d, Seed: 21, Timeout: 10 * time.Second})
		<-done
	})
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("sender flow: %v; cross flow: %v", errs[0], errs[1])
	}
	hop1, hop2 = sentDelta(samples[0]), sentDelta(samples[1])
	t.Logf("sender %.0f Mbit/s and cross %.0f Mbit/s; hop 1 sent %d B, hop 2 sent %d B",
		res[0].Throughput/1e6, res[1].Throughput/1e6, hop1, hop2)
	if hop1 < uint64(res[0].Bytes) {
		t.Errorf("hop 1 sent %d bytes, less than the sender's %d", hop1, res[0].Bytes)
	}
	if hop2 < uint64(res[0].Bytes+res[1].Bytes) {
		t.Errorf("hop 2 sent %d bytes, less than both flows' %d", hop2, res[0].Bytes+res[1].Bytes)
	}

	results, err := sink.WaitResults(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if !r.OK || !r.Unbounded {
			t.Errorf("sink result %+v, want OK and unbounded", r)
		}
	}
}

// TestChainReachability checks that every host of a Chain reaches every
// other over IPv4 and IPv6.
func TestChainReachability(t *testing.T) {
	c := newTestChain(t, ChainConfig{Senders: 2, CrossSenders: 1})

	hosts := append([]*Host{c.Router1, c.Router2, c.Receiver}, c.Senders...)
	hosts = append(hosts, c.CrossSenders...)
	checkReachability(t, hosts)
}

// TestChainLayout checks the addresses and the qdiscs of both hops.
func TestChainLayout(t *testing.T) {
	c := newTestChain(t, ChainConfig{
		Senders:      2,
		CrossSenders: 2,
		Hop1:         BottleneckConfig{Rate: 2e9, BufferBytes: 256 << 10},
		Hop2:         BottleneckConfig{Rate: 300e6},
	})

	addrs := []struct {
		host   *Host
		v4, v6 string
	}{
		{c.Senders[0], "198.18.0.2", "fd00:18::2"},
		{c.Senders[1], "198.18.1.2", "fd00:18:1::2"},
		{c.Router1, "198.19.1.1", "fd00:19:1::1"},
		{c.Router2, "198.19.0.1", "fd00:19::1"},
		{c.Receiver, "198.19.0.2", "fd00:19::2"},
		{c.CrossSenders[0], "198.19.16.2", "fd00:19:10::2"},
		{c.CrossSenders[1], "198.19.17.2", "fd00:19:11::2"},
	}
	for _, a := range addrs {
		if a.host.Addr.String() != a.v4 || a.host.Addr6.String() != a.v6 {
			t.Errorf("%s has %s, %s; want %s, %s", a.host.Name, a.host.Addr, a.host.Addr6, a.v4, a.v6)
		}
	}
	if len(c.SenderIfaces) != 2 || len(c.CrossIfaces) != 2 {
		t.Errorf("SenderIfaces %v, CrossIfaces %v: want two each", c.SenderIfaces, c.CrossIfaces)
	}

	want := []struct {
		host  *Host
		rate  uint64
		buf   uint32
		class string
	}{
		{c.Router1, 2e9, 256 << 10, "rate 2Gbit ceil 2Gbit"},
		{c.Router2, 300e6, DefaultBufferBytes, "rate 300Mbit ceil 300Mbit"},
	}
	if len(c.Bottlenecks) != len(want) {
		t.Fatalf("%d bottlenecks, want %d", len(c.Bottlenecks), len(want))
	}
	ctx := testContext(t)
	for i, w := range want {
		b := c.Bottlenecks[i]
		if b.Host != w.host || b.Rate != w.rate || b.BufferBytes != w.buf || b.BurstBytes != (BottleneckConfig{Rate: w.rate}).BurstBytes() {
			t.Errorf("hop %d = %+v, want host %s, rate %d, buffer %d", i+1, b, w.host.Name, w.rate, w.buf)
		}
		qs, err := tcQdiscs(ctx, b.Host, b.Iface)
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]string{}
		for _, q := range qs {
			kinds[q.Handle] = q.Kind
		}
		if kinds["1:"] != "htb" || kinds["10:"] != "bfifo" {
			t.Errorf("hop %d qdiscs %+v, want htb 1: and bfifo 10:", i+1, qs)
		}
		out, err := b.Host.Command(ctx, "tc", "class", "show", "dev", b.Iface).CombinedOutput()
		if err != nil {
			t.Fatalf("tc class show: %v: %s", err, out)
		}
		if !strings.Contains(string(out), w.class) {
			t.Errorf("hop %d: tc class show = %q, want %q", i+1, out, w.class)
		}
	}
}

func TestChainInvalidConfig(t *testing.T) {
	requireRoot(t)

	tests := []struct {
		name string
		cfg  ChainConfig
		want string
	}{
		{"no senders", ChainConfig{}, "senders"},
		{"too many senders", ChainConfig{Senders: maxSenders + 1}, "senders"},
		{"negative cross senders", ChainConfig{Senders: 1, CrossSenders: -1}, "cross senders"},
		{"too many cross senders", ChainConfig{Senders: 1, CrossSenders: maxCrossSenders + 1}, "cross senders"},
		{"tiny rate hop 1", ChainConfig{Senders: 1, Hop1: BottleneckConfig{Rate: 10}}, "hop 1: bottleneck rate"},
		{"tiny buffer hop 2", ChainConfig{Senders: 1, Hop2: BottleneckConfig{BufferBytes: 100}}, "hop 2: buffer"},
		{"ecn without rate hop 2", ChainConfig{Senders: 1, Hop2: BottleneckConfig{ECNThreshold: time.Millisecond}}, "hop 2: ecn"},
		{"bad prefix", ChainConfig{Senders: 1, Prefix: "ccl x-"}, "prefix"},
	}
	baseline := initVeths(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			if cfg.Prefix == "" {
				cfg.Prefix = testPrefix("invalid")
			}
			c, err := NewChain(testContext(t), cfg)
			if err == nil {
				c.Close()
				t.Fatalf("NewChain(%+v) succeeded", cfg)
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
