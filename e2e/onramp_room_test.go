package e2e

import (
	"context"
	"net/netip"
	"testing"
	"time"

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

// countRoom counts the captured segments of the connections to port: the
// data as it arrived at the receiver, before its tc programs, and the
// pure ACKs as they left it, after them.
func countRoom(frames []captured, port uint16) roomCounts {
	var c roomCounts
	for _, f := range frames {
		if f.info.Flags&(telemetry.FlagSYN|telemetry.FlagFIN|telemetry.FlagRST) != 0 {
			continue
		}
		opt, found, _ := onramp.FindOption(f.raw)
		switch {
		case f.info.DstPort == port && f.info.PayloadLen > 0:
			c.data++
			c.dataStamp += b2i(found && opt.ExID == onramp.ExIDStamp)
			c.dataPad += b2i(found && opt.ExID == onramp.ExIDPad)
		case f.info.SrcPort == port && f.info.PayloadLen == 0:
			c.acks++
			c.ackEcho += b2i(found && opt.ExID == onramp.ExIDEcho)
			c.ackPad += b2i(found && opt.ExID == onramp.ExIDPad)
		}
	}
	return c
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
	enableOnRampEnds(t, p, or, or, onramp.Config{Peers: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")},
		Threshold: time.Second, MaxPause: 20 * time.Millisecond, Observe: true})

	sink := testnet.StartSink(t, p.B, p.B.Addr)
	cctx, stopCapture := context.WithCancel(context.Background())
	defer stopCapture()
	frames := capture(t, cctx, p.B, 1<<20)
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
	c := countRoom(<-frames, sink.Addr.Port())
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
