package e2e

import (
	"context"
	"fmt"
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

// roomConfig is the On-Ramp of the room tests: observing (no fq, so they
// run on this host too), T = 1 s and a max pause of 20 ms.
func roomConfig() onramp.Config {
	return onramp.Config{Peers: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")},
		Threshold: time.Second, MaxPause: 20 * time.Millisecond, Observe: true}
}

// roomFlow publishes a zero clock offset between the pair's ends, sends
// an 8 MiB cubic flow from A to B while capturing on B, checks that the
// data arrived intact, and counts the flow's segments on B's wire by the
// On-Ramp option they carry. The caller has enabled On-Ramp, or, where
// it wants it; roomFlow logs or's counters on A's end, if A has it.
func roomFlow(t *testing.T, p *testbed.Pair, or *onramp.OnRamp) roomCounts {
	t.Helper()
	host := testutil.Host(t)
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
	if err := p.A.Do(func() (err error) { st, err = or.Status(); return err }); err != nil {
		t.Fatalf("the sender's On-Ramp status: %v", err)
	}
	senderStats := "none: no On-Ramp on the sender's end"
	if len(st) > 0 {
		senderStats = fmt.Sprint(st[0].Stats)
	}
	t.Logf("on the receiver's wire: %d data segments, %d with a STAMP, %d with a PAD; %d pure ACKs, %d with an ECHO, %d with a PAD; sender's counters %s",
		c.data, c.dataStamp, c.dataPad, c.acks, c.ackEcho, c.ackPad, senderStats)
	if c.data < 20 || c.acks < 10 {
		t.Fatalf("captured %d data segments and %d pure ACKs of an 8 MiB flow", c.data, c.acks)
	}
	return c
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
	p := testnet.NewPair(t)
	or := onramp.New(testutil.Host(t))
	enableOnRampEnds(t, p, or, or, roomConfig())
	c := roomFlow(t, p, or)
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

// TestOnRampRoomWithoutEgress: On-Ramp observing on the receiver's end
// only. Its sockops program serves every network namespace of the cgroup,
// so the sender's connection to a scoped peer is sized for On-Ramp too,
// but no egress program of On-Ramp sees the flow: nothing tells sockops
// when the flow is quiet, and nothing fills the room. This is the
// fallback for a socket with no entry in onramp_room (docs/onramp.md,
// "Room only where it is used"): room, and so an unfilled PAD, on every
// data segment, and no STAMP; the receiver, which gets no STAMP, makes no
// room on its ACKs and echoes nothing. The data arrives intact.
func TestOnRampRoomWithoutEgress(t *testing.T) {
	p := testnet.NewPair(t)
	or := onramp.New(testutil.Host(t))
	cfg := roomConfig()
	cfg.Iface = ifaceOf(t, p.B)
	if err := p.B.Do(func() error { _, err := or.Enable(cfg); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.B.Do(func() error { _, err := or.Disable(cfg.Iface); return err }); err != nil {
			t.Errorf("disable On-Ramp on %s: %v", cfg.Iface, err)
		}
	})
	c := roomFlow(t, p, or)
	if c.dataStamp != 0 || c.ackEcho != 0 {
		t.Errorf("%d stamps and %d echoes with no On-Ramp on the sender's egress, want none", c.dataStamp, c.ackEcho)
	}
	if 10*c.dataPad < 9*c.data {
		t.Errorf("%d of %d data segments carried a PAD, want at least nine in ten: with no egress program to say the flow is quiet, sockops makes room on every data segment", c.dataPad, c.data)
	}
	if 10*c.ackPad > c.acks {
		t.Errorf("%d of %d pure ACKs carried a PAD, want at most one in ten: the receiver makes room on an ACK only after a STAMP", c.ackPad, c.acks)
	}
}
