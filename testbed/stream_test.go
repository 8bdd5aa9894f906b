package testbed

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestStream sends a series of messages on one connection, over IPv4 and
// IPv6: each message's ACK timestamp comes, for the large message no
// earlier than the bottleneck could have carried nine tenths of its bytes
// (its bucket lets a small message through faster than the rate), and the
// sink verifies every byte of all of them as one unbounded flow.
func TestStream(t *testing.T) {
	const rate = 1e9
	d := newTestDumbbell(t, DumbbellConfig{Senders: 1, BottleneckRate: rate, BufferBytes: 512 << 10})
	sizes := []int64{1, 100, 5000, 4 << 20, 16 << 10, 1}
	for i, dst := range []netip.Addr{d.Receiver.Addr, d.Receiver.Addr6} {
		t.Run(dst.String(), func(t *testing.T) {
			sink := startTestSink(t, d.Receiver, netip.AddrPortFrom(dst, 0))
			ctx := testContext(t)
			s, err := OpenStream(ctx, d.Senders[0], sink.Addr, "cubic", uint64(i+7))
			if err != nil {
				t.Fatalf("OpenStream: %v", err)
			}
			var total int64
			for _, n := range sizes {
				m, err := s.Send(ctx, n)
				if err != nil {
					s.Close(ctx)
					t.Fatalf("Send(%d): %v", n, err)
				}
				total += n
				wire := time.Duration(0.9 * float64(n) * 8 / rate * float64(time.Second))
				if n < 1<<20 {
					wire = time.Nanosecond
				}
				t.Logf("%d bytes: acked in %v, %d retransmissions", n, m.AckedIn, m.Retrans)
				if m.Bytes != n || m.AckedIn < wire || m.AckedIn > 10*time.Second {
					t.Errorf("message of %d bytes: got %d bytes acked in %v; want them acked in %v or more", n, m.Bytes, m.AckedIn, wire)
				}
			}
			res, err := s.Close(ctx)
			if err != nil {
				t.Fatalf("Close: %v", err)
			}
			if res.Bytes != total || res.CC != "cubic" || res.Info == nil {
				t.Errorf("Close: %d bytes, CC %q, TCP_INFO %v; want %d bytes, cubic and a TCP_INFO", res.Bytes, res.CC, res.Info != nil, total)
			}
			got, err := sink.WaitResults(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if r := got[0]; !r.OK || !r.Unbounded || r.Bytes != total || r.Seed != uint64(i+7) {
				t.Errorf("sink: %+v; want one verified unbounded flow of %d bytes with seed %d", r, total, i+7)
			}
			if _, err := s.Send(ctx, 1); err == nil || !strings.Contains(err.Error(), "closed") {
				t.Errorf("Send after Close: %v, want an error that says the stream is closed", err)
			}
			if _, err := s.Close(ctx); err != nil {
				t.Errorf("second Close: %v, want nil", err)
			}
		})
	}
}

// TestStreamErrors checks that a Stream refuses an empty message, that a
// Send whose context ends returns, and that Close after it frees the
// connection.
func TestStreamErrors(t *testing.T) {
	d := newTestDumbbell(t, DumbbellConfig{Senders: 1, BottleneckRate: 10e6, BufferBytes: 64 << 10})
	sink := startTestSink(t, d.Receiver, netip.AddrPortFrom(d.Receiver.Addr, 0))
	ctx := testContext(t)
	s, err := OpenStream(ctx, d.Senders[0], sink.Addr, "", 1)
	if err != nil {
		t.Fatalf("OpenStream: %v", err)
	}
	defer s.Close(ctx)
	if _, err := s.Send(ctx, 0); err == nil {
		t.Error("Send(0) succeeded, want an error")
	}
	// 8 MiB at 10 Mbit/s takes about 7 s: the context ends long before.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := s.Send(short, 8<<20); err == nil {
		t.Error("Send of 8 MiB at 10 Mbit/s within 200ms succeeded, want the context's error")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Send returned %v after its context ended, want at once", took)
	}
	if _, err := s.Close(short); err == nil {
		t.Log("Close after a failed Send succeeded")
	}
	if _, err := OpenStream(ctx, d.Senders[0], netip.AddrPort{}, "", 1); err == nil {
		t.Error("OpenStream to an invalid address succeeded")
	}
}
