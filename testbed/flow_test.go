package testbed

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestFlowSamples polls TCP_INFO during a flow through a 1 Gbit/s
// bottleneck and checks the series.
func TestFlowSamples(t *testing.T) {
	d := newTestDumbbell(t, DumbbellConfig{Senders: 1, BottleneckRate: 1e9, BufferBytes: 512 << 10})
	const size = 32 << 20

	tests := []struct {
		name  string
		dst   netip.Addr
		every time.Duration
	}{
		{"ipv4 every 1ms", d.Receiver.Addr, time.Millisecond},
		{"ipv6 every 200us", d.Receiver.Addr6, 200 * time.Microsecond},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := startTestSink(t, d.Receiver, netip.AddrPortFrom(tt.dst, 0))
			res, err := SendFlow(testContext(t), d.Senders[0], sink.Addr,
				FlowConfig{CC: "cubic", Bytes: size, Seed: uint64(i), Timeout: 10 * time.Second, SampleEvery: tt.every})
			if err != nil {
				t.Fatalf("SendFlow: %v", err)
			}
			s := res.Samples
			// The grid has Duration/every slots; allow for missed ones.
			if wantMin := int(res.Duration / tt.every / 3); len(s) < wantMin {
				t.Fatalf("%d samples over %v at %v, want at least %d", len(s), res.Duration, tt.every, wantMin)
			}
			var maxCwnd uint32
			var sawRTT, sawRate bool
			for k := 1; k < len(s); k++ {
				if s[k].At < s[k-1].At {
					t.Errorf("sample %d at %v before sample %d at %v", k, s[k].At, k-1, s[k-1].At)
				}
				if s[k].BytesAcked < s[k-1].BytesAcked {
					t.Errorf("BytesAcked went down from %d to %d at sample %d", s[k-1].BytesAcked, s[k].BytesAcked, k)
				}
			}
			for _, x := range s {
				maxCwnd = max(maxCwnd, x.Cwnd)
				sawRTT = sawRTT || x.RTT > 0
				sawRate = sawRate || x.DeliveryRate > 0
			}
			last := s[len(s)-1]
			t.Logf("%d samples over %v; last: %+v; max cwnd %d", len(s), res.Duration.Round(time.Millisecond), last, maxCwnd)
			if last.BytesAcked < size {
				t.Errorf("last sample acknowledges %d bytes, want at least %d", last.BytesAcked, size)
			}
			if last.At > res.Duration+time.Second || last.At < res.Duration {
				t.Errorf("last sample at %v, want just after the flow's %v", last.At, res.Duration)
			}
			if maxCwnd < 10 || !sawRTT || !sawRate {
				t.Errorf("max cwnd %d, an RTT seen %v, a delivery rate seen %v: want a cwnd of at least 10 and both seen", maxCwnd, sawRTT, sawRate)
			}
		})
	}
}

// TestFlowSamplerBounds checks that the TCP_INFO poller stops at its
// sample cap and when its context ends.
func TestFlowSamplerBounds(t *testing.T) {
	p := newTestPair(t)
	sink := startTestSink(t, p.B, netip.AddrPortFrom(p.B.Addr, 0))
	ctx := testContext(t)
	conn, err := dialCC(ctx, p.A, sink.Addr, "")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	stop := startFlowSampler(ctx, raw, start, time.Millisecond, 5)
	time.Sleep(50 * time.Millisecond)
	if got := stop(); len(got) != 5 {
		t.Errorf("capped poller took %d samples, want 5", len(got))
	}
	if got := stop(); got != nil {
		t.Errorf("second stop returned %d samples, want none", len(got))
	}

	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	stop = startFlowSampler(cctx, raw, time.Now(), time.Millisecond, 1_000_000)
	<-cctx.Done()
	time.Sleep(2 * maxSleepChunk)
	if got := stop(); len(got) < 5 || len(got) > 40 {
		t.Errorf("poller for 20ms at 1ms took %d samples", len(got))
	}
}

// TestTimedFlow sends flows bounded by time and checks that they end
// then and that the sink verifies them.
func TestTimedFlow(t *testing.T) {
	tests := []struct {
		name    string
		rate    uint64
		ipv6    bool
		d       time.Duration
		minRate float64 // bits/s over For, 0 for no check
		maxLate time.Duration
	}{
		{"1Gbit ipv4", 1e9, false, 500 * time.Millisecond, 0.5e9, 300 * time.Millisecond},
		{"1Gbit ipv6", 1e9, true, 500 * time.Millisecond, 0.5e9, 300 * time.Millisecond},
		// Writes block on a full socket buffer here; the deadline must end
		// one. What is buffered then still drains at 20 Mbit/s.
		{"20Mbit blocked writes", 20e6, false, 300 * time.Millisecond, 5e6, 5 * time.Second},
		// The end passes during connect: a complete header and no payload.
		{"ends before connect", 1e9, false, time.Nanosecond, 0, 300 * time.Millisecond},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newTestDumbbell(t, DumbbellConfig{Senders: 1, BottleneckRate: tt.rate, BufferBytes: 256 << 10})
			dst := d.Receiver.Addr
			if tt.ipv6 {
				dst = d.Receiver.Addr6
			}
			warmUpPath(t, d.Senders[0], d.Receiver, dst)
			sink := startTestSink(t, d.Receiver, netip.AddrPortFrom(dst, 0))
			cfg := FlowConfig{CC: "cubic", For: tt.d, Seed: uint64(100 + i), Timeout: 15 * time.Second}
			res, err := SendFlow(testContext(t), d.Senders[0], sink.Addr, cfg)
			if err != nil {
				t.Fatalf("SendFlow: %v", err)
			}
			results, err := sink.WaitResults(testContext(t), 1)
			if err != nil {
				t.Fatal(err)
			}
			r := results[0]
			t.Logf("for %v: sent %d bytes in %v (%.1f Mbit/s); sink %+v", tt.d, res.Bytes, res.Duration, res.Throughput/1e6, r)
			if !r.OK || !r.Unbounded || r.Declared != unknownLength || r.Bytes != res.Bytes || r.Seed != cfg.Seed {
				t.Errorf("sink result %+v, want OK, unbounded, %d bytes of seed %d", r, res.Bytes, cfg.Seed)
			}
			if res.Duration < tt.d || res.Duration > tt.d+tt.maxLate {
				t.Errorf("flow took %v, want %v to %v", res.Duration, tt.d, tt.d+tt.maxLate)
			}
			if tt.minRate > 0 && float64(res.Bytes)*8/tt.d.Seconds() < tt.minRate {
				t.Errorf("sent %d bytes in %v, below %.0f Mbit/s", res.Bytes, tt.d, tt.minRate/1e6)
			}
			if tt.minRate == 0 && res.Bytes != 0 {
				t.Errorf("sent %d bytes after the end had passed", res.Bytes)
			}
		})
	}
}

// TestVerifyStream feeds the sink's verifier hand-made streams.
func TestVerifyStream(t *testing.T) {
	stream := func(seed uint64, declared int64, n int, corruptAt int) []byte {
		b := make([]byte, headerLen+n)
		putHeader(b, seed, declared)
		Pattern(seed, 0, b[headerLen:])
		if corruptAt >= 0 {
			b[headerLen+corruptAt] ^= 0xff
		}
		return b
	}
	tests := []struct {
		name      string
		in        []byte
		wantErr   string // "" for success
		bytes     int64
		unbounded bool
	}{
		{"exact", stream(1, 1000, 1000, -1), "", 1000, false},
		{"empty bounded", stream(1, 0, 0, -1), "", 0, false},
		{"short", stream(1, 1000, 999, -1), "short stream", 999, false},
		{"long", stream(1, 10, 11, -1), "more than the declared", 11, false},
		{"corrupt", stream(1, 100, 100, 5), "differs from pattern at offset 5", 100, false},
		{"bounded, below the smallest buffer, long", stream(1, 100, 9000, -1), "more than the declared", 4096, false},
		{"bounded, a buffer of its own size, corrupt at the end", stream(1, 5000, 5000, 4999), "offset 4999", 5000, false},
		{"bounded, beyond one chunk, corrupt at the end", stream(4, 300_000, 300_000, 299_999), "offset 299999", 300_000, false},
		{"bounded, beyond one chunk, short", stream(4, 300_000, 299_999, -1), "short stream", 299_999, false},
		{"unbounded", stream(2, unknownLength, 300_000, -1), "", 300_000, true},
		{"unbounded empty", stream(2, unknownLength, 0, -1), "", 0, true},
		{"unbounded corrupt", stream(2, unknownLength, 300_000, 299_999), "offset 299999", 300_000, true},
		{"negative length", stream(3, -2, 0, -1), "negative length", 0, false},
		{"incomplete header", stream(3, 5, 0, -1)[:10], "read header", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer b.Close()
			go func() {
				defer a.Close()
				// Several writes, so the verifier sees several reads.
				for in := bytes.NewReader(tt.in); in.Len() > 0; {
					chunk := make([]byte, min(in.Len(), 70_000))
					in.Read(chunk)
					if _, err := a.Write(chunk); err != nil {
						return
					}
				}
			}()
			res := SinkResult{Declared: -1}
			err := verifyStream(b, &res)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("verifyStream: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("verifyStream error %v, want one containing %q", err, tt.wantErr)
			}
			if res.Bytes != tt.bytes || res.Unbounded != tt.unbounded {
				t.Errorf("result %+v, want %d bytes, unbounded %v", res, tt.bytes, tt.unbounded)
			}
		})
	}
}

// TestAckedIn checks the kernel's timestamp of the last byte's ACK: it
// comes for flows of one chunk and of many, over IPv4 and IPv6, lies
// within the flow's user-space duration, and is no earlier than the
// bottleneck could have carried every byte, so it is the last byte's
// ACK and not an earlier one.
func TestAckedIn(t *testing.T) {
	const rate = 1e9
	d := newTestDumbbell(t, DumbbellConfig{Senders: 1, BottleneckRate: rate, BufferBytes: 512 << 10})
	tests := []struct {
		name  string
		dst   netip.Addr
		bytes int64
	}{
		{"ipv4 one segment", d.Receiver.Addr, 100},
		{"ipv4 one chunk", d.Receiver.Addr, 5000},
		{"ipv4 many chunks", d.Receiver.Addr, 4 << 20},
		{"ipv6 many chunks", d.Receiver.Addr6, 4 << 20},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := startTestSink(t, d.Receiver, netip.AddrPortFrom(tt.dst, 0))
			res, err := SendFlow(testContext(t), d.Senders[0], sink.Addr,
				FlowConfig{CC: "cubic", Bytes: tt.bytes, Seed: uint64(i), Timeout: 10 * time.Second})
			if err != nil {
				t.Fatalf("SendFlow: %v", err)
			}
			t.Logf("%d bytes: acked in %v, done in %v", tt.bytes, res.AckedIn, res.Duration)
			if res.AckStampErr != nil {
				t.Fatalf("no ACK timestamp: %v", res.AckStampErr)
			}
			wire := time.Duration(float64(tt.bytes) * 8 / rate * float64(time.Second))
			if res.AckedIn < wire || res.AckedIn > res.Duration {
				t.Errorf("acked in %v, want between the bytes' time on the link, %v, and the flow's duration, %v", res.AckedIn, wire, res.Duration)
			}
		})
	}
	t.Run("time-bounded flow", func(t *testing.T) {
		sink := startTestSink(t, d.Receiver, netip.AddrPortFrom(d.Receiver.Addr, 0))
		res, err := SendFlow(testContext(t), d.Senders[0], sink.Addr,
			FlowConfig{CC: "cubic", For: 100 * time.Millisecond, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatalf("SendFlow: %v", err)
		}
		if res.AckedIn != 0 || res.AckStampErr != nil {
			t.Errorf("a time-bounded flow got AckedIn %v, AckStampErr %v; want neither", res.AckedIn, res.AckStampErr)
		}
	})
}

// TestAckedInConcurrentFlows sends many flows at once through a slow
// bottleneck from senders with small send buffers, so that their last
// writes wait for buffer space: each must complete intact and get its ACK
// timestamp.
func TestAckedInConcurrentFlows(t *testing.T) {
	d := newTestDumbbell(t, DumbbellConfig{Senders: 2, BottleneckRate: 100e6, BufferBytes: 256 << 10})
	// Small send buffers, as a CC with a small window gets, keep the
	// senders' sockets unwritable for most of each flow.
	for _, s := range d.Senders {
		if err := s.setSysctls(sysctl{"net/ipv4/tcp_wmem", "4096 16384 65536"}); err != nil {
			t.Fatal(err)
		}
	}
	sink := startTestSink(t, d.Receiver, netip.AddrPortFrom(d.Receiver.Addr, 0))
	const flows = 16
	type result struct {
		res FlowResult
		err error
	}
	out := make(chan result, flows)
	for i := range flows {
		go func() {
			res, err := SendFlow(testContext(t), d.Senders[i%2], sink.Addr,
				FlowConfig{CC: "cubic", Bytes: 1 << 20, Seed: uint64(i), Timeout: 20 * time.Second})
			out <- result{res, err}
		}()
	}
	for range flows {
		r := <-out
		if r.err != nil {
			t.Errorf("SendFlow: %v", r.err)
			continue
		}
		if r.res.AckStampErr != nil || r.res.AckedIn <= 0 || r.res.AckedIn > r.res.Duration {
			t.Errorf("acked in %v (error %v), done in %v", r.res.AckedIn, r.res.AckStampErr, r.res.Duration)
		}
	}
}

func TestBufferFor(t *testing.T) {
	for _, tt := range []struct {
		n    int64
		want int
	}{
		{unknownLength, chunkSize},
		{0, minChunkSize},
		{headerLen + 2048, minChunkSize},
		{headerLen + 16<<10, headerLen + 16<<10},
		{chunkSize - 1, chunkSize - 1},
		{chunkSize, chunkSize},
		{30 << 20, chunkSize},
	} {
		if got := bufferFor(tt.n); got != tt.want {
			t.Errorf("bufferFor(%d) = %d, want %d", tt.n, got, tt.want)
		}
	}
}
