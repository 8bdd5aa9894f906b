package e2e

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/clocksync"
	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/onramp"
	"github.com/ccload/ccload/telemetry"
	"github.com/ccload/ccload/testbed"
)

// roomCounts counts a flow's segments on the receiver's wire by the
// On-Ramp option they carry.
type roomCounts struct {
	data, dataStamp, dataPad int // data segments from the sender
	acks, ackEcho, ackPad    int // the receiver's pure ACKs
}

// captureRoom counts, with a packet socket in h (the receiver), the
// segments of the connections to port: the data as it arrives, before
// h's tc programs, and the pure ACKs as they leave, after them. It stops
// when ctx ends and sends the counts.
func captureRoom(t *testing.T, ctx context.Context, h *testbed.Host, port uint16) <-chan roomCounts {
	t.Helper()
	var fd int
	if err := h.Do(func() (err error) {
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
		return err
	}); err != nil {
		t.Fatalf("AF_PACKET socket: %v", err)
	}
	// Room for the whole flow's GSO packets, which arrive faster than
	// this goroutine reads them.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20); err != nil {
		unix.Close(fd)
		t.Fatalf("SO_RCVBUFFORCE: %v", err)
	}
	tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		t.Fatalf("SO_RCVTIMEO: %v", err)
	}
	out := make(chan roomCounts, 1)
	go func() {
		defer unix.Close(fd)
		var c roomCounts
		buf := make([]byte, 70000)
		for ctx.Err() == nil {
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				continue
			}
			opts, info, err := telemetry.TCPOptionsFromPacket(buf[:n], telemetry.Ethernet)
			if err != nil || info.Flags&(telemetry.FlagSYN|telemetry.FlagFIN|telemetry.FlagRST) != 0 {
				continue
			}
			opt, found, _ := onramp.FindOption(opts)
			switch {
			case info.DstPort == port && info.PayloadLen > 0:
				c.data++
				c.dataStamp += b2i(found && opt.ExID == onramp.ExIDStamp)
				c.dataPad += b2i(found && opt.ExID == onramp.ExIDPad)
			case info.SrcPort == port && info.PayloadLen == 0:
				c.acks++
				c.ackEcho += b2i(found && opt.ExID == onramp.ExIDEcho)
				c.ackPad += b2i(found && opt.ExID == onramp.ExIDPad)
			}
		}
		out <- c
	}()
	return out
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestOnRampRoomOnlyWhenDue: On-Ramp observing on both ends of a veth
// pair, with T = 1 s and a zero clock offset, so that the flow's one-way
// delay stays far below T/2 and it is stamped at most once per T/4 after
// its first echo. The segments on the receiver's wire must then carry
// On-Ramp's options only where they are used: stamps and their echoes go
// through, but most data segments and most pure ACKs carry no option at
// all, not even an unfilled PAD (every one of them carried room before
// the sockops program was told when a stamp is due). Observe mode needs
// no fq, so this runs on this host too; the data arrives intact.
func TestOnRampRoomOnlyWhenDue(t *testing.T) {
	host := testutil.Host(t)
	p := testnet.NewPair(t)
	ifA, err := p.A.Interface()
	if err != nil {
		t.Fatal(err)
	}
	ifB, err := p.B.Interface()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []struct {
		h    *testbed.Host
		peer netip.Addr
	}{{p.A, p.B.Addr}, {p.B, p.A.Addr}} {
		if err := e.h.Do(func() error {
			return clocksync.PublishFixed(host, []netip.Addr{e.peer}, 0, 1000, time.Hour)
		}); err != nil {
			t.Fatal(err)
		}
	}
	or := onramp.New(host)
	cfg := onramp.Config{Peers: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}, Threshold: time.Second,
		MaxPause: 20 * time.Millisecond, Observe: true}
	for _, e := range []struct {
		h     *testbed.Host
		iface string
	}{{p.A, ifA}, {p.B, ifB}} {
		c := cfg
		c.Iface = e.iface
		if err := e.h.Do(func() error { _, err := or.Enable(c); return err }); err != nil {
			t.Fatalf("enable On-Ramp in observe mode in %s: %v", e.h.Name, err)
		}
		t.Cleanup(func() { e.h.Do(func() error { _, err := or.Disable(e.iface); return err }) })
	}

	sink := testnet.StartSink(t, p.B, p.B.Addr)
	cctx, stopCapture := context.WithCancel(context.Background())
	defer stopCapture()
	counts := captureRoom(t, cctx, p.B, sink.Addr.Port())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const size = 8 << 20
	if _, err := testbed.SendFlow(ctx, p.A, sink.Addr, testbed.FlowConfig{CC: "cubic", Bytes: size, Seed: 1, Timeout: 50 * time.Second}); err != nil {
		t.Fatal(err)
	}
	got, err := sink.WaitResults(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !got[0].OK || got[0].Bytes != size {
		t.Errorf("the flow arrived damaged or short: %+v", got[0])
	}
	time.Sleep(100 * time.Millisecond) // the last ACKs
	stopCapture()
	c := <-counts
	var st []onramp.Status
	if err := p.A.Do(func() (err error) { st, err = or.Status(); return err }); err != nil || len(st) != 1 {
		t.Fatalf("the sender's On-Ramp status: %v, %d interfaces", err, len(st))
	}
	t.Logf("on the receiver's wire: %d data segments, %d with a STAMP, %d with a PAD; %d pure ACKs, %d with an ECHO, %d with a PAD; sender's counters %v",
		c.data, c.dataStamp, c.dataPad, c.acks, c.ackEcho, c.ackPad, st[0].Stats)
	if c.data < 20 || c.acks < 10 {
		t.Fatalf("captured %d data segments and %d pure ACKs of an 8 MiB flow", c.data, c.acks)
	}
	if c.dataStamp == 0 || c.ackEcho == 0 {
		t.Errorf("no stamp or no echo went through: %d stamps, %d echoes", c.dataStamp, c.ackEcho)
	}
	if with := c.dataStamp + c.dataPad; 2*with > c.data {
		t.Errorf("%d of %d data segments carried On-Ramp's room, want at most half: a quiet flow's data needs it only once per T/4", with, c.data)
	}
	if with := c.ackEcho + c.ackPad; 2*with > c.acks {
		t.Errorf("%d of %d pure ACKs carried On-Ramp's room, want at most half: an ACK needs it only after a STAMP", with, c.acks)
	}
}
