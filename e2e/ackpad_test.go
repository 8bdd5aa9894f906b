package e2e

// ACK padding: the hop refreshes its record in the echoes on the ACKs that
// pass it on the way back, so the sender's view of the queue is younger.

import (
	"context"
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/telemetry"
	"github.com/ccload/ccload/telemetry/sockops"
	"github.com/ccload/ccload/testbed"
)

// echoAges captures, at the sender, the echoes of hop 1's record and
// returns how old each record was when the ACK reached the sender's wire:
// the kernel's receive timestamp minus the record's timestamp, both on
// CLOCK_MONOTONIC (the hop stamps with bpf_ktime_get_ns), modulo the
// timestamp field's 2^24 ns wrap.
func echoAges(t *testing.T, ctx context.Context, h *testbed.Host, max int) <-chan []time.Duration {
	t.Helper()
	var fd int
	if err := h.Do(func() (err error) {
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
		return err
	}); err != nil {
		t.Fatalf("AF_PACKET socket: %v", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		unix.Close(fd)
		t.Fatalf("SO_TIMESTAMPNS: %v", err)
	}
	tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	out := make(chan []time.Duration, 1)
	go func() {
		defer unix.Close(fd)
		// The receive timestamp is CLOCK_REALTIME; the hop's is
		// CLOCK_MONOTONIC. Their offset is read once, as the two clocks
		// do not drift apart over a test.
		var rt, mono unix.Timespec
		unix.ClockGettime(unix.CLOCK_REALTIME, &rt)
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono)
		offset := rt.Nano() - mono.Nano()
		var ages []time.Duration
		buf, oob := make([]byte, 70000), make([]byte, 256)
		for len(ages) < max && ctx.Err() == nil {
			n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
			if err != nil {
				continue
			}
			opts, _, err := telemetry.TCPOptionsFromPacket(buf[:n], telemetry.Ethernet)
			if err != nil {
				continue
			}
			opt, found, err := telemetry.FindOption(opts)
			if err != nil || !found || opt.Direction != telemetry.Echo || len(opt.Hops) == 0 {
				continue
			}
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil || len(msgs) == 0 || msgs[0].Header.Type != unix.SCM_TIMESTAMPNS || len(msgs[0].Data) < 16 {
				continue
			}
			d := msgs[0].Data // struct timespec
			ns := int64(binary.NativeEndian.Uint64(d[0:]))*1e9 + int64(binary.NativeEndian.Uint64(d[8:]))
			at := uint64(ns - offset)
			age := (at - uint64(opt.Hops[0].Timestamp)) & (1<<24 - 1)
			ages = append(ages, time.Duration(age))
		}
		out <- ages
	}()
	return out
}

// TestACKPaddingFreshensEchoes fills the bottleneck queue with a cubic
// flow (about 8 ms of queue at 1 Gbit/s with a 1 MiB buffer) and compares
// the age of the hop records the sender receives without and with ACK
// padding. Without it, a record is at least as old as the queueing delay
// its data packet met after being stamped; with it, the record was written
// as the ACK crossed the hop, a fraction of a millisecond earlier.
func TestACKPaddingFreshensEchoes(t *testing.T) {
	testutil.RequireKernelCC(t)
	_, n := newSys(t)
	enableINTForTest(t, n, sockops.Config{})
	d := newDumbbell(t, 1)
	sink := testnet.StartSink(t, d.Receiver, d.Receiver.Addr)

	median := map[bool]time.Duration{}
	for _, pad := range []bool{false, true} {
		hop := newHopOn(t, d, 0, pad)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		agesCh := echoAges(t, ctx, d.Senders[0], 20000)
		flow, ferr := testbed.SendFlow(ctx, d.Senders[0], sink.Addr, testbed.FlowConfig{CC: "cubic", Bytes: 64 << 20, Seed: 7, Timeout: 25 * time.Second})
		cancel()
		ages := <-agesCh
		hs, err := hop.Stats()
		if cerr := hop.Close(); cerr != nil {
			t.Fatalf("detach INT hop: %v", cerr)
		}
		if ferr != nil || err != nil {
			t.Fatalf("padding %v: flow: %v; hop stats: %v", pad, ferr, err)
		}
		if len(ages) < 100 {
			t.Fatalf("padding %v: only %d echoes captured", pad, len(ages))
		}
		// Skip the first fifth: slow start, before the queue has built.
		ages = ages[len(ages)/5:]
		slices.Sort(ages)
		median[pad] = ages[len(ages)/2]
		t.Logf("padding %v: %.0f Mbit/s; %d echoes, record age p10 %v p50 %v p90 %v; hop records %d, ACKs padded %d",
			pad, flow.Throughput/1e6, len(ages), ages[len(ages)/10], ages[len(ages)/2], ages[len(ages)*9/10], hs.Records, hs.ACKsPadded)
		if pad && hs.ACKsPadded == 0 {
			t.Fatal("the hop padded no ACK")
		}
		if !pad && hs.ACKsPadded != 0 {
			t.Fatalf("the hop padded %d ACKs with padding off", hs.ACKsPadded)
		}
	}
	waitSink(t, sink, 2, 64<<20)
	if median[true] > time.Millisecond || median[true] > median[false]/2 {
		t.Errorf("median record age with padding %v, without %v: want under 1ms and under half", median[true], median[false])
	}
}
