package onramp

// On-Ramp's tc programs on crafted packets, run in the kernel with
// BPF_PROG_TEST_RUN: stamps and echoes (IPv4 and IPv6, with valid
// checksums), the receiver's one-way delay from the clock map, the
// sender's pause arithmetic (strawman against lag compensation), β's EWMA
// and clamps, the --max-pause clamp, an unknown peer, malformed and
// truncated options, and departure times that never go backwards.

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/qdisc"
)

// rig is one loaded On-Ramp object, as on one interface.
type rig struct {
	t    testing.TB
	objs onrampObjects
}

func newRig(t testing.TB) *rig {
	t.Helper()
	testutil.RequireRoot(t)
	spec, err := loadOnramp()
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t}
	if err := spec.LoadAndAssign(&r.objs, nil); err != nil {
		t.Fatalf("load On-Ramp: %v", err)
	}
	t.Cleanup(func() { r.objs.Close() })
	for _, p := range []*ebpf.Program{r.objs.OnrampEgress, r.objs.OnrampIngress} {
		if info, err := p.Info(); err == nil {
			if n, ok := info.VerifiedInstructions(); ok {
				t.Logf("%s: the verifier went through %d instructions", info.Name, n)
			}
		}
	}
	return r
}

// use hands the rig to test t with parameters cfg and empty maps: loading
// the object is what costs (seconds in a TCG guest), so one rig serves
// every case.
func (r *rig) use(t testing.TB, cfg Config) *rig {
	t.Helper()
	r.t = t
	cfg.Iface = "test"
	cfg, err := cfg.check()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.objs.OnrampParams.Put(uint32(0), cfg.params()); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*ebpf.Map{r.objs.OnrampFlows, r.objs.OnrampPeers, r.objs.ClockOffsets} {
		var keys [][]byte
		for k, err := m.NextKeyBytes(nil); err == nil && k != nil; k, err = m.NextKeyBytes(k) {
			keys = append(keys, k)
		}
		for _, k := range keys {
			_ = m.Delete(k)
		}
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	zero := make([]uint64, ncpu)
	for i := range statNames {
		if err := r.objs.OnrampStats.Put(uint32(i), zero); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// run runs prog on frame and returns the frame after it, and its
// skb->tstamp.
func (r *rig) run(prog *ebpf.Program, frame []byte) ([]byte, uint64) {
	r.t.Helper()
	ctx := make([]byte, testutil.SkbCtxSize)
	ctxOut := make([]byte, testutil.SkbCtxSize)
	out := make([]byte, len(frame)+64)
	ret, err := prog.Run(&ebpf.RunOptions{Data: frame, DataOut: out, Context: ctx, ContextOut: ctxOut})
	if err != nil {
		r.t.Fatalf("run %v: %v", prog, err)
	}
	if ret != 0 {
		r.t.Fatalf("verdict %d, want TC_ACT_OK: On-Ramp never drops", ret)
	}
	return out[:len(frame)], binary.LittleEndian.Uint64(ctxOut[testutil.SkbTstampOff:])
}

func (r *rig) stat(name string) uint64 {
	r.t.Helper()
	sums, err := sumStats(r.objs.OnrampStats)
	if err != nil {
		r.t.Fatal(err)
	}
	for i, n := range statNames {
		if n == name {
			return sums[i]
		}
	}
	r.t.Fatalf("no counter %q", name)
	return 0
}

func (r *rig) flow(k onrampOnrampFlowKey) onrampOnrampFlow {
	r.t.Helper()
	var f onrampOnrampFlow
	if err := r.objs.OnrampFlows.Lookup(k, &f); err != nil {
		r.t.Fatalf("flow %s: %v", flowString(k), err)
	}
	return f
}

func (r *rig) setFlow(k onrampOnrampFlowKey, f onrampOnrampFlow) {
	r.t.Helper()
	if err := r.objs.OnrampFlows.Put(k, f); err != nil {
		r.t.Fatal(err)
	}
}

// peer returns the statistics the rig keeps of peer.
func (r *rig) peer(peer netip.Addr) onrampOnrampPeer {
	r.t.Helper()
	var p onrampOnrampPeer
	if err := r.objs.OnrampPeers.Lookup(onrampClockPeer{Addr: peer.As16()}, &p); err != nil {
		r.t.Fatalf("peer %v: %v", peer, err)
	}
	return p
}

func (r *rig) setPeer(peer netip.Addr, p onrampOnrampPeer) {
	r.t.Helper()
	if err := r.objs.OnrampPeers.Put(onrampClockPeer{Addr: peer.As16()}, p); err != nil {
		r.t.Fatal(err)
	}
}

// trace turns the sender's trace on for test t and returns a function
// that reads its next record; the trace is off again when t ends.
func (r *rig) trace(t testing.TB) func() TraceEvent {
	t.Helper()
	rd, err := ringbuf.NewReader(r.objs.OnrampTrace)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	if err := r.objs.OnrampTraceOn.Put(uint32(0), uint32(1)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.objs.OnrampTraceOn.Put(uint32(0), uint32(0)) })
	return func() TraceEvent {
		t.Helper()
		rd.SetDeadline(time.Now().Add(5 * time.Second))
		rec, err := rd.Read()
		if err != nil {
			t.Fatalf("no trace record of the echo: %v", err)
		}
		ev, err := decodeTrace(rec.RawSample, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
}

// putClock publishes peer's offset (peer's clock minus ours) in the rig's
// clock map, valid for a minute.
func (r *rig) putClock(peer netip.Addr, offset int64, errNs uint32) {
	r.t.Helper()
	now := taiNow(r.t)
	r.putClockEntry(peer, onrampClockOffset{OffsetNs: offset, RefNs: now, ErrorNs: errNs, UpdatedNs: now,
		ValidUntilNs: now + uint64(time.Minute)})
}

// putClockEntry writes peer's clock entry as given, version included.
func (r *rig) putClockEntry(peer netip.Addr, v onrampClockOffset) {
	r.t.Helper()
	if err := r.objs.ClockOffsets.Put(onrampClockPeer{Addr: peer.As16()}, v); err != nil {
		r.t.Fatal(err)
	}
}

func taiNow(t testing.TB) uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_TAI, &ts); err != nil {
		t.Fatal(err)
	}
	return uint64(ts.Nano())
}

// A connection between two hosts, in both address families.
type conn struct {
	name       string
	sender     netip.Addr
	receiver   netip.Addr
	sport, rpt uint16
}

var conns = []conn{
	{"IPv4", netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.19.0.2"), 40000, 5201},
	{"IPv6", netip.MustParseAddr("fd00::2"), netip.MustParseAddr("fd00:1::2"), 40001, 5201},
}

// segment builds an ACK-flagged frame from a to b with TCP timestamps and
// one option.
func segment(a, b netip.Addr, sport, dport uint16, opt []byte, payload int) []byte {
	return segmentFlags(a, b, sport, dport, 0x10, opt, payload)
}

// tsOpts is the NOP, NOP, timestamps that Linux puts first in a segment's
// options.
var tsOpts = []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2}

// segmentFlags is segment with the given TCP flags.
func segmentFlags(a, b netip.Addr, sport, dport uint16, flags uint8, opt []byte, payload int) []byte {
	return segmentOpts(a, b, sport, dport, flags, append(append([]byte{}, tsOpts...), opt...), payload)
}

// segmentOpts builds a frame from a to b with exactly opts as its TCP
// options.
func segmentOpts(a, b netip.Addr, sport, dport uint16, flags uint8, opts []byte, payload int) []byte {
	s := testutil.TCPSegment{Sport: sport, Dport: dport, Seq: 1000, Ack: 2000, Flags: flags, Window: 512,
		Options: opts, Payload: payload}
	if a.Is4() {
		s.Src, s.Dst = a.As4(), b.As4()
		return s.Ethernet()
	}
	return s.EthernetIPv6(a.As16(), b.As16())
}

// data is a data segment of c from the sender; ack a pure ACK of c from
// the receiver.
func (c conn) data(opt []byte) []byte {
	return segment(c.sender, c.receiver, c.sport, c.rpt, opt, 1000)
}
func (c conn) ack(opt []byte) []byte { return segment(c.receiver, c.sender, c.rpt, c.sport, opt, 0) }

// segment is a segment of c from the sender with the given flags.
func (c conn) segment(flags uint8, opt []byte, payload int) []byte {
	return segmentFlags(c.sender, c.receiver, c.sport, c.rpt, flags, opt, payload)
}

// key is c's flow as a host of it sees it.
func (c conn) key(atSender bool) onrampOnrampFlowKey {
	local, remote, lp, rp := c.sender, c.receiver, c.sport, c.rpt
	if !atSender {
		local, remote, lp, rp = c.receiver, c.sender, c.rpt, c.sport
	}
	var k onrampOnrampFlowKey
	words := func(a netip.Addr) (w [4]uint32) {
		b := a.As16()
		if a.Is4() {
			b4 := a.As4()
			w[0] = binary.NativeEndian.Uint32(b4[:])
			return w
		}
		for i := range w {
			w[i] = binary.NativeEndian.Uint32(b[4*i:])
		}
		return w
	}
	k.Local, k.Remote = words(local), words(remote)
	swap := func(p uint16) uint16 { return p>>8 | p<<8 }
	k.Lport, k.Rport = swap(lp), swap(rp)
	if local.Is6() {
		k.V6 = 1
	}
	return k
}

func pad(n int) []byte {
	b, err := Option{ExID: ExIDPad, PadLen: n}.Marshal()
	if err != nil {
		panic(err)
	}
	return b
}

func echoOpt(owd int32, tx, pause uint32) []byte {
	b, err := Option{ExID: ExIDEcho, Echo: Echo{OWDNs: owd, TxNs: tx, PauseNs: pause}}.Marshal()
	if err != nil {
		panic(err)
	}
	return b
}

func stampOpt(tx, pause uint32) []byte {
	b, err := Option{ExID: ExIDStamp, Stamp: Stamp{TxNs: tx, PauseNs: pause}}.Marshal()
	if err != nil {
		panic(err)
	}
	return b
}

// optionOf finds On-Ramp's option in a frame, and checks its TCP checksum.
func optionOf(t *testing.T, frame []byte) Option {
	t.Helper()
	l4 := 14 + 20
	if binary.BigEndian.Uint16(frame[12:]) == 0x86dd {
		l4 = 14 + 40
	}
	doff := int(frame[l4+12]>>4) * 4
	opt, ok, err := FindOption(frame[l4+20 : l4+doff])
	if err != nil || !ok {
		t.Fatalf("no On-Ramp option in the frame: %v", err)
	}
	if !tcpChecksumOK(frame, l4) {
		t.Errorf("the TCP checksum is wrong after the rewrite")
	}
	return opt
}

// tcpChecksumOK verifies the TCP checksum of a frame from testutil.
func tcpChecksumOK(frame []byte, l4 int) bool {
	seg := frame[l4:]
	var sum uint32
	if l4 == 14+20 {
		sum = uint32(binary.BigEndian.Uint16(frame[14+12:])) + uint32(binary.BigEndian.Uint16(frame[14+14:])) +
			uint32(binary.BigEndian.Uint16(frame[14+16:])) + uint32(binary.BigEndian.Uint16(frame[14+18:]))
	} else {
		for i := 14 + 8; i < 14+40; i += 2 {
			sum += uint32(binary.BigEndian.Uint16(frame[i:]))
		}
	}
	sum += 6 + uint32(len(seg))
	return testutil.Checksum(seg, sum) == 0
}

// TestDataPath runs every case on one loaded object.
func TestDataPath(t *testing.T) {
	rg := newRig(t)
	for _, c := range []struct {
		name string
		fn   func(*testing.T, *rig)
	}{
		{"StampAndEcho", testStampAndEcho}, {"UnknownPeer", testUnknownPeer},
		{"PauseArithmetic", testPauseArithmetic}, {"MaxPauseClamp", testMaxPauseClamp},
		{"BetaEWMA", testBetaEWMA}, {"StaleAndRepeatedEchoes", testStaleAndRepeatedEchoes},
		{"MalformedOptions", testMalformedOptions}, {"DepartureNeverGoesBackwards", testDepartureNeverGoesBackwards},
		{"AutoThreshold", testAutoThreshold}, {"NewFlowStartsFromPeer", testNewFlowStartsFromPeer},
		{"SplitHeaders", testSplitHeaders}, {"OptionLayouts", testOptionLayouts},
		{"ClockCopy", testClockCopy}, {"PeerSampling", testPeerSampling},
		{"Observe", testObserve}, {"SparseStamps", testSparseStamps},
		{"HistogramWeighsTime", testHistogramWeighsTime}, {"CoarseClock", testCoarseClock},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, rg) })
	}
}

// testStampAndEcho follows one connection through the data path: the
// sender's egress stamps the data segment's PAD, the receiver's ingress
// computes the one-way delay with the clock map's offset, and its egress
// echoes it once on a pure ACK.
func testStampAndEcho(t *testing.T, rg *rig) {
	for _, c := range conns {
		t.Run(c.name, func(t *testing.T) {
			snd := rg.use(t, Config{})
			rcv := snd
			const offset = 1_500_000 // the sender's clock is 1.5 ms ahead
			rcv.putClock(c.sender, offset, 200)

			before := taiNow(t)
			out, _ := snd.run(snd.objs.OnrampEgress, c.data(pad(StampLen)))
			after := taiNow(t)
			st := optionOf(t, out)
			if st.ExID != ExIDStamp {
				t.Fatalf("egress wrote %v on a data segment, want a stamp", st)
			}
			if d := TxDelta(st.Stamp.TxNs, uint32(before)); d > uint32(after-before) {
				t.Errorf("stamp tx %d is not between %d and %d (mod 2^32)", st.Stamp.TxNs, uint32(before), uint32(after))
			}
			if snd.stat("stamped") != 1 {
				t.Errorf("stamped = %d, want 1", snd.stat("stamped"))
			}

			// The receiver sees the stamp as if the path took 30 µs and
			// the sender's clock read offset more.
			tx := uint32(taiNow(t) - 30_000 + offset)
			rcv.run(rcv.objs.OnrampIngress, c.data(stampOpt(tx, 777)))
			f := rcv.flow(c.key(false))
			if f.RxFresh != 1 || f.RxTx != tx || f.RxPause != 777 {
				t.Fatalf("receiver state %+v: want the stamp kept, fresh", f)
			}
			if f.RxOwd < 30_000 || f.RxOwd > 30_000+int32(time.Second) {
				t.Errorf("one-way delay %d ns, want 30 µs plus the test's own delay", f.RxOwd)
			}

			out, _ = rcv.run(rcv.objs.OnrampEgress, c.ack(pad(EchoLen)))
			e := optionOf(t, out)
			if e.ExID != ExIDEcho || e.Echo.OWDNs != f.RxOwd || e.Echo.TxNs != tx || e.Echo.PauseNs != 777 {
				t.Fatalf("egress wrote %v on the ACK, want an echo of owd %d tx %d pause 777", e, f.RxOwd, tx)
			}
			// Echoed once: the next ACK keeps its PAD.
			out, _ = rcv.run(rcv.objs.OnrampEgress, c.ack(pad(EchoLen)))
			if o := optionOf(t, out); o.ExID != ExIDPad {
				t.Errorf("second ACK carries %v, want the PAD left alone", o)
			}
			if rcv.stat("echoed") != 1 || rcv.stat("echo_empty") != 1 {
				t.Errorf("echoed %d, echo_empty %d; want 1 and 1", rcv.stat("echoed"), rcv.stat("echo_empty"))
			}
		})
	}
}

// testUnknownPeer: a receiver without a clock offset for the sender echoes
// "no clock", and the sender counts it and never pauses for it.
func testUnknownPeer(t *testing.T, rg *rig) {
	c := conns[0]
	snd := rg.use(t, Config{Threshold: time.Microsecond})
	rcv := snd
	rcv.run(rcv.objs.OnrampIngress, c.data(stampOpt(uint32(taiNow(t)-50_000_000), 0)))
	out, _ := rcv.run(rcv.objs.OnrampEgress, c.ack(pad(EchoLen)))
	if e := optionOf(t, out); e.ExID != ExIDEcho || !e.Echo.NoClock() {
		t.Fatalf("echo %v, want one that says no clock", e)
	}
	if rcv.stat("rx_no_clock") != 1 {
		t.Errorf("rx_no_clock = %d, want 1", rcv.stat("rx_no_clock"))
	}
	snd.run(snd.objs.OnrampEgress, c.data(pad(StampLen)))
	snd.run(snd.objs.OnrampIngress, out)
	f := snd.flow(c.key(true))
	if f.T_next != 0 || f.Pauses != 0 {
		t.Errorf("flow paused (t_next %d, pauses %d) on an echo without a clock", f.T_next, f.Pauses)
	}
	if snd.stat("no_clock") != 1 {
		t.Errorf("no_clock = %d, want 1", snd.stat("no_clock"))
	}
}

// echoAt builds the ACK that echoes a packet sent rtt ago with one-way
// delay owd and cumulative pause pause at its departure.
func echoAt(t testing.TB, c conn, owd time.Duration, rtt time.Duration, pause uint32) []byte {
	tx := uint32(taiNow(t) - uint64(rtt))
	return c.ack(echoOpt(int32(owd), tx, pause))
}

// pauseOf runs one echo on a flow in state f and returns the bounds of the
// pause it asserted: t_next is the program's now plus the pause, and its
// now lies between two readings taken around the run (the lower bound is
// negative when the run took longer than the pause, as in a slow guest).
// paused is false when t_next did not move.
func pauseOf(t *testing.T, r *rig, c conn, f onrampOnrampFlow, owd time.Duration, pause uint32) (lo, hi time.Duration, paused bool, _ onrampOnrampFlow) {
	t.Helper()
	r.setFlow(c.key(true), f)
	ack := echoAt(t, c, owd, owd+20*time.Microsecond, pause)
	before := monoNow()
	r.run(r.objs.OnrampIngress, ack)
	after := monoNow()
	got := r.flow(c.key(true))
	if got.T_next == f.T_next {
		return 0, 0, false, got
	}
	return time.Duration(int64(got.T_next) - int64(after)), time.Duration(int64(got.T_next) - int64(before)), true, got
}

// testPauseArithmetic checks §3.2's rule against §3.1's strawman: with P
// pause asserted since the echoed packet left, lag compensation pauses
// O - T - β·P, the strawman O - T.
func testPauseArithmetic(t *testing.T, rg *rig) {
	const T = 100 * time.Microsecond
	c := conns[0]
	half := onrampOnrampFlow{Beta: fpOne / 2, PauseTotal: 600_000} // P = 600 µs since the echoed packet (pause 0)
	tests := []struct {
		name     string
		strawman bool
		flow     onrampOnrampFlow
		owd      time.Duration
		want     time.Duration // 0: no pause
	}{
		{"below the threshold", false, onrampOnrampFlow{Beta: fpOne}, 90 * time.Microsecond, 0},
		{"above, nothing paused since", false, onrampOnrampFlow{Beta: fpOne}, 700 * time.Microsecond, 600 * time.Microsecond},
		{"lag compensation, beta 1/2", false, half, 700 * time.Microsecond, 300 * time.Microsecond},
		{"strawman ignores the earlier pause", true, half, 700 * time.Microsecond, 600 * time.Microsecond},
		{"compensation covers the excess", false, onrampOnrampFlow{Beta: fpOne, PauseTotal: 600_000}, 700 * time.Microsecond, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rg.use(t, Config{Threshold: T, Strawman: tt.strawman})
			lo, hi, paused, _ := pauseOf(t, r, c, tt.flow, tt.owd, 0)
			if tt.want == 0 && paused {
				t.Errorf("paused %v to %v, want no pause", lo, hi)
			}
			if tt.want > 0 && (!paused || tt.want < lo || tt.want > hi) {
				t.Errorf("paused between %v and %v, want %v", lo, hi, tt.want)
			}
		})
	}
}

// testMaxPauseClamp: a huge one-way delay (a broken clock, a forged
// option) pauses the flow for --max-pause at most.
func testMaxPauseClamp(t *testing.T, rg *rig) {
	c := conns[0]
	r := rg.use(t, Config{Threshold: 50 * time.Microsecond, MaxPause: 300 * time.Microsecond})
	lo, hi, paused, f := pauseOf(t, r, c, onrampOnrampFlow{Beta: fpOne}, 900*time.Millisecond, 0)
	if want := 300 * time.Microsecond; !paused || want < lo || want > hi {
		t.Errorf("paused between %v and %v for a 900 ms delay, want the 300µs maximum", lo, hi)
	}
	if r.stat("clamped") != 1 || f.Pauses != 1 {
		t.Errorf("clamped = %d, pauses = %d; want 1 and 1", r.stat("clamped"), f.Pauses)
	}
}

// testBetaEWMA: β moves by the gain toward each measurement β_m =
// (O_B - O_G)/P_BG, clamped to [0, 1], and only when P_BG > 0.
func testBetaEWMA(t *testing.T, rg *rig) {
	c := conns[0]
	const gain = 1.0 / 4
	tests := []struct {
		name      string
		prevOWD   time.Duration
		owd       time.Duration
		pBG       uint32 // pause between the two packets' departures
		wantBeta  float64
		wantCount uint64
	}{
		{"measured 1/2", 500 * time.Microsecond, 400 * time.Microsecond, 200_000, 0.5 + gain*(0.5-0.5), 1},
		{"measured 1", 500 * time.Microsecond, 300 * time.Microsecond, 200_000, 0.5 + gain*(1-0.5), 1},
		{"clamped to 1", 900 * time.Microsecond, 100 * time.Microsecond, 200_000, 0.5 + gain*(1-0.5), 1},
		{"clamped to 0: the delay grew", 100 * time.Microsecond, 300 * time.Microsecond, 200_000, 0.5 + gain*(0-0.5), 1},
		{"no pause between: no measurement", 500 * time.Microsecond, 100 * time.Microsecond, 0, 0.5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rg.use(t, Config{Threshold: time.Second, Gain: gain})
			f := onrampOnrampFlow{Beta: fpOne / 2, HavePrev: 1, PrevOwd: int32(tt.prevOWD), PrevPause: 1000, PrevTx: 1}
			_, _, _, got := pauseOf(t, r, c, f, tt.owd, 1000+tt.pBG)
			if b := float64(got.Beta) / fpOne; b < tt.wantBeta-0.001 || b > tt.wantBeta+0.001 {
				t.Errorf("beta %.4f, want %.4f", b, tt.wantBeta)
			}
			if n := r.stat("beta_samples"); n != tt.wantCount {
				t.Errorf("beta_samples = %d, want %d", n, tt.wantCount)
			}
		})
	}
}

// testStaleAndRepeatedEchoes: an echo whose sample the receiver took more
// than one RTT ago, or one already used, moves nothing.
func testStaleAndRepeatedEchoes(t *testing.T, rg *rig) {
	c := conns[0]
	r := rg.use(t, Config{Threshold: 10 * time.Microsecond})
	k := c.key(true)
	// A flow whose RTT is 100 µs; the sample is 5 ms old.
	r.setFlow(k, onrampOnrampFlow{Beta: fpOne, SrttNs: 100_000})
	r.run(r.objs.OnrampIngress, echoAt(t, c, 200*time.Microsecond, 5*time.Millisecond, 0))
	if f := r.flow(k); f.T_next != 0 || r.stat("stale") != 1 {
		t.Errorf("a stale sample paused the flow (t_next %d) or was not counted (stale %d)", f.T_next, r.stat("stale"))
	}
	// The same sample twice: only the first counts.
	r.setFlow(k, onrampOnrampFlow{Beta: fpOne})
	ack := echoAt(t, c, 200*time.Microsecond, 220*time.Microsecond, 0)
	r.run(r.objs.OnrampIngress, ack)
	first := r.flow(k)
	r.run(r.objs.OnrampIngress, ack)
	if again := r.flow(k); again.Pauses != first.Pauses || again.Samples != first.Samples {
		t.Errorf("a repeated echo was used again: %d pauses, %d samples after, %d and %d before",
			again.Pauses, again.Samples, first.Pauses, first.Samples)
	}
}

// testMalformedOptions: options of ours with a wrong length are counted
// and not used; a truncated options area is ignored; neither is fatal.
func testMalformedOptions(t *testing.T, rg *rig) {
	c := conns[0]
	r := rg.use(t, Config{Threshold: time.Microsecond})
	k := c.key(true)
	r.setFlow(k, onrampOnrampFlow{Beta: fpOne})

	// An echo with a stamp's length, and a stamp with an echo's.
	shortEcho := echoOpt(int32(time.Millisecond), uint32(taiNow(t)), 0)[:StampLen]
	shortEcho[1] = StampLen
	longStamp := append(stampOpt(1, 2), 0, 0, 0, 0)
	longStamp[1] = EchoLen
	for _, frame := range [][]byte{c.ack(shortEcho), c.data(longStamp)} {
		r.run(r.objs.OnrampIngress, frame)
	}
	if n := r.stat("malformed"); n != 2 {
		t.Errorf("malformed = %d, want 2", n)
	}
	// A truncated option: its length runs past the options area.
	trunc := echoOpt(int32(time.Millisecond), uint32(taiNow(t)), 0)
	trunc[1] = 40
	r.run(r.objs.OnrampIngress, c.ack(trunc))
	if f := r.flow(k); f.T_next != 0 || f.Samples != 0 {
		t.Errorf("a malformed or truncated echo was used: %+v", f)
	}
	if n := r.stat("echoes"); n != 0 {
		t.Errorf("echoes = %d, want 0", n)
	}
}

// testDepartureNeverGoesBackwards: while a flow is paused its packets get
// the pause's end as departure time, and a later, shorter t_next never
// gives a packet an earlier departure than the one before, nor does the
// pause's end having passed.
func testDepartureNeverGoesBackwards(t *testing.T, rg *rig) {
	for _, c := range conns {
		t.Run(c.name, func(t *testing.T) {
			r := rg.use(t, Config{})
			k := c.key(true)
			until := monoNow() + uint64(50*time.Millisecond)
			r.setFlow(k, onrampOnrampFlow{Beta: fpOne, T_next: until})
			_, first := r.run(r.objs.OnrampEgress, c.data(pad(StampLen)))
			if first != until {
				t.Fatalf("departure %d, want the pause's end %d", first, until)
			}
			f := r.flow(k)
			f.T_next = monoNow() + uint64(time.Millisecond) // shorter
			r.setFlow(k, f)
			_, second := r.run(r.objs.OnrampEgress, c.data(pad(StampLen)))
			if second < first {
				t.Errorf("departure went backwards: %d after %d", second, first)
			}
			if r.stat("delayed") != 2 {
				t.Errorf("delayed = %d, want 2", r.stat("delayed"))
			}

			// Segments sockops left no room on (its FINs, or data when the
			// options are full) leave no earlier than the held ones, or fq
			// would send them first.
			for _, u := range []struct {
				name    string
				flags   uint8
				payload int
			}{
				{"FIN with data", 0x11, 1000},
				{"FIN alone", 0x11, 0},
				{"data with no room", 0x10, 1000},
			} {
				_, dep := r.run(r.objs.OnrampEgress, c.segment(u.flags, nil, u.payload))
				if dep < first {
					t.Errorf("%s left at %d, before the held segments (%d)", u.name, dep, first)
				}
			}
			// A flow this interface never stamped keeps its own time.
			other := c
			other.sport += 100
			if _, dep := r.run(r.objs.OnrampEgress, other.segment(0x11, nil, 1000)); dep != 0 {
				t.Errorf("an unknown flow's FIN got departure %d, want its own (0)", dep)
			}

			// Once the pause has passed, a segment whose own time is
			// earlier than the last departure given still gets that
			// one: the held segment may still wait in fq, which would
			// send the earlier one first. (The run gives a segment no
			// time of its own, as its context cannot mark one
			// monotonic: its own time here is 0.) It is no hold.
			past := monoNow() - uint64(time.Millisecond)
			f = r.flow(k)
			f.T_next, f.LastDep = past-uint64(time.Millisecond), past
			r.setFlow(k, f)
			delayed := r.stat("delayed")
			for _, seg := range [][]byte{c.data(pad(StampLen)), c.segment(0x11, nil, 1000)} {
				if _, dep := r.run(r.objs.OnrampEgress, seg); dep != past {
					t.Errorf("after the pause, a segment left at %d, want the last departure %d", dep, past)
				}
			}
			if got := r.stat("delayed"); got != delayed {
				t.Errorf("delayed went from %d to %d for departures already passed, want no hold counted", delayed, got)
			}
		})
	}
}

// testAutoThreshold: with --threshold auto, T for a peer is its least
// one-way delay plus twice the clock agent's error for it.
func testAutoThreshold(t *testing.T, rg *rig) {
	c := conns[0]
	r := rg.use(t, Config{AutoThreshold: true, Threshold: time.Second})
	r.putClock(c.receiver, 0, 5_000) // σ_clk = 5 µs: T = least + 10 µs
	k := c.key(true)
	// Establish the least delay, 400 µs: with the fallback T of 1 s, no
	// pause.
	r.setFlow(k, onrampOnrampFlow{Beta: fpOne})
	r.run(r.objs.OnrampIngress, echoAt(t, c, 400*time.Microsecond, 420*time.Microsecond, 0))
	if f := r.flow(k); f.T_next != 0 {
		t.Fatalf("paused on the first sample")
	}
	// 430 µs is 20 µs above T = 410 µs.
	lo, hi, paused, _ := pauseOf(t, r, c, onrampOnrampFlow{Beta: fpOne, HavePrev: 1, PrevTx: 1}, 430*time.Microsecond, 0)
	if want := 20 * time.Microsecond; !paused || want < lo || want > hi {
		t.Errorf("paused between %v and %v (paused %v), want %v: T = 400µs least + 2 × 5µs", lo, hi, paused, want)
	}
}

// testNewFlowStartsFromPeer: a new connection to a peer whose newest echo
// was over the threshold starts paused for the excess, at most
// --max-pause; one to a peer below it does not.
func testNewFlowStartsFromPeer(t *testing.T, rg *rig) {
	c := conns[0]
	r := rg.use(t, Config{Threshold: 100 * time.Microsecond, MaxPause: 50 * time.Millisecond})
	// The first connection hears of a 40 ms delay: 39.9 ms over T.
	r.setFlow(c.key(true), onrampOnrampFlow{Beta: fpOne})
	r.run(r.objs.OnrampIngress, echoAt(t, c, 40*time.Millisecond, 40*time.Millisecond+20*time.Microsecond, 0))
	// A second connection to the same peer sends its first segment.
	next := c
	next.sport++
	before := monoNow()
	_, dep := r.run(r.objs.OnrampEgress, next.data(pad(StampLen)))
	after := monoNow()
	want := 40*time.Millisecond - 100*time.Microsecond
	if lo, hi := time.Duration(int64(dep)-int64(after)), time.Duration(int64(dep)-int64(before)); want < lo || want > hi {
		t.Errorf("the new connection's first segment leaves %v to %v from now, want %v", lo, hi, want)
	}
	if n := r.stat("start_paused"); n != 1 {
		t.Errorf("start_paused = %d, want 1", n)
	}
	// Below the threshold: the next new connection goes at once.
	r.setFlow(c.key(true), onrampOnrampFlow{Beta: fpOne})
	r.run(r.objs.OnrampIngress, echoAt(t, c, 50*time.Microsecond, 70*time.Microsecond, 0))
	third := c
	third.sport += 2
	if _, dep := r.run(r.objs.OnrampEgress, third.data(pad(StampLen))); dep > monoNow() {
		t.Errorf("a new connection to a peer below the threshold was held until %d", dep)
	}
}

// testSplitHeaders: the receiver's ingress reads the stamp of a data
// segment whose headers arrive outside the skb's linear part
// (testutil.WithFragsTap), as it reads a linear one's: the IP header, the
// TCP header or On-Ramp's option cut across a page fragment.
func testSplitHeaders(t *testing.T, rg *rig) {
	const tap = "ccl-frags1"
	for _, c := range conns {
		t.Run(c.name, func(t *testing.T) {
			rcv := rg.use(t, Config{})
			rcv.putClock(c.sender, 0, 200)
			l4 := 14 + 20
			if c.sender.Is6() {
				l4 = 14 + 40
			}
			splits := []int{l4, l4 + 8, l4 + 20 + 12 + 3, 14 + 6}
			base := uint32(taiNow(t) - 30_000)
			testutil.WithFragsTap(t, tap, func(write func(parts ...[]byte) error) {
				att, err := qdisc.Attach(tap, rcv.objs.OnrampIngress, qdisc.AttachOptions{Direction: qdisc.Ingress})
				if err != nil {
					t.Errorf("attach onramp_ingress to the tap: %v", err)
					return
				}
				defer att.Close()
				for i, at := range splits {
					tx := base + uint32(i)*1000
					frame := c.data(stampOpt(tx, 777))
					if err := write(frame[:at], frame[at:]); err != nil {
						t.Error(err)
						return
					}
					var f onrampOnrampFlow
					if err := rcv.objs.OnrampFlows.Lookup(c.key(false), &f); err != nil {
						t.Errorf("split at byte %d: no receiver state for the flow: %v", at, err)
						continue
					}
					if f.RxTx != tx || f.RxPause != 777 || f.RxFresh != 1 {
						t.Errorf("split at byte %d: receiver state %+v, want the stamp tx %d pause 777, fresh", at, f, tx)
					}
				}
			})
		})
	}
}

// testOptionLayouts: the programs find On-Ramp's option wherever a TCP
// header may carry it, not only right after the timestamps, where Linux
// puts it and the programs look first: alone, after SACK blocks, after
// another experiment's option, after NOPs. Each data segment's PAD
// becomes a STAMP in place, with a sound checksum, and the receiver takes
// that STAMP.
func testOptionLayouts(t *testing.T, rg *rig) {
	ts := tsOpts
	sack := []byte{1, 1, 5, 10, 0, 0, 0x10, 0, 0, 0, 0x20, 0}
	otherExp := []byte{253, 8, 0xCC, 0x10, 1, 2, 3, 4}
	for _, c := range conns {
		for _, l := range []struct {
			name          string
			before, after []byte
		}{
			{"AfterTimestamps", ts, nil},
			{"Alone", nil, nil},
			{"FirstThenTimestamps", nil, ts},
			{"AfterSACK", append(append([]byte{}, ts...), sack...), nil},
			{"AfterAnotherExperiment", append(append([]byte{}, ts...), otherExp...), nil},
			{"AfterNOPs", []byte{1, 1, 1, 1}, nil},
		} {
			t.Run(c.name+"/"+l.name, func(t *testing.T) {
				r := rg.use(t, Config{})
				r.putClock(c.sender, 0, 200)
				opts := append(append(append([]byte{}, l.before...), pad(StampLen)...), l.after...)
				out, _ := r.run(r.objs.OnrampEgress, c.dataWith(opts))
				if st := optionOf(t, out); st.ExID != ExIDStamp {
					t.Fatalf("egress left %v, want the PAD turned into a STAMP", st)
				}
				at := 14 + 20 + 20
				if c.sender.Is6() {
					at = 14 + 40 + 20
				}
				if got := out[at : at+len(l.before)]; string(got) != string(l.before) {
					t.Errorf("options before ours changed: % x, want % x", got, l.before)
				}
				if n := r.stat("stamped"); n != 1 {
					t.Errorf("stamped = %d, want 1", n)
				}
				r.run(r.objs.OnrampIngress, out)
				if f := r.flow(c.key(false)); f.RxFresh != 1 || r.stat("rx_stamps") != 1 {
					t.Errorf("receiver state %+v, rx_stamps %d: want the STAMP taken", f, r.stat("rx_stamps"))
				}
			})
		}
	}
}

// dataWith is a data segment of c from the sender with exactly opts as
// its options.
func (c conn) dataWith(opts []byte) []byte {
	return segmentOpts(c.sender, c.receiver, c.sport, c.rpt, 0x10, opts, 1000)
}

// testClockCopy: the receiver keeps a copy of the sender's clock entry in
// the flow (clock_offset_cached in bpf/include/clock.h) and takes the
// entry's lock only when the entry's version (seq, updated_ns) is not the
// copy's. A write that changes the version is used from the next stamp on;
// an entry that goes away or expires gives no clock at once, copy or not.
func testClockCopy(t *testing.T, rg *rig) {
	for _, c := range conns {
		t.Run(c.name, func(t *testing.T) {
			r := rg.use(t, Config{})
			now := taiNow(t)
			entry := onrampClockOffset{Seq: 1, OffsetNs: 0, RefNs: now, ErrorNs: 200, UpdatedNs: now,
				ValidUntilNs: now + uint64(time.Minute)}
			r.putClockEntry(c.sender, entry)
			// owd is the one-way delay of a stamp sent 30 µs ago by a
			// sender whose clock reads the same as ours.
			owd := func() int32 {
				t.Helper()
				r.run(r.objs.OnrampIngress, c.data(stampOpt(uint32(taiNow(t)-30_000), 0)))
				return r.flow(c.key(false)).RxOwd
			}
			near := func(got int32, want time.Duration) bool {
				return time.Duration(got) >= want && time.Duration(got) < want+time.Second
			}
			if got := owd(); !near(got, 30*time.Microsecond) {
				t.Fatalf("one-way delay %d ns with offset 0, want 30 µs plus the test's own delay", got)
			}

			// The same version with another offset: the copy stands.
			// (The agent never writes so; this shows that the copy is
			// what the data path reads while the version holds.)
			same := entry
			same.OffsetNs = int64(time.Millisecond)
			r.putClockEntry(c.sender, same)
			if got := owd(); !near(got, 30*time.Microsecond) {
				t.Errorf("one-way delay %d ns: the offset of a write without a new version was used", got)
			}

			// A new version, as every agent write has: used at once.
			for _, v := range []struct {
				name string
				bump func(*onrampClockOffset)
			}{
				{"seq", func(e *onrampClockOffset) { e.Seq++ }},
				{"updated_ns", func(e *onrampClockOffset) { e.UpdatedNs++ }},
			} {
				entry.OffsetNs += int64(time.Millisecond)
				v.bump(&entry)
				r.putClockEntry(c.sender, entry)
				want := 30*time.Microsecond + time.Duration(entry.OffsetNs)
				if got := owd(); !near(got, want) {
					t.Errorf("after a write with a new %s, one-way delay %d ns, want %v plus the test's own delay", v.name, got, want)
				}
			}

			// Gone or expired: no clock, whatever the copy says.
			if err := r.objs.ClockOffsets.Delete(onrampClockPeer{Addr: c.sender.As16()}); err != nil {
				t.Fatal(err)
			}
			if got := owd(); got != NoClock {
				t.Errorf("one-way delay %d ns after the entry was deleted, want no clock", got)
			}
			entry.Seq++
			entry.ValidUntilNs = taiNow(t) - 1
			r.putClockEntry(c.sender, entry)
			if got := owd(); got != NoClock {
				t.Errorf("one-way delay %d ns from an expired entry, want no clock", got)
			}
			if n := r.stat("rx_no_clock"); n != 2 {
				t.Errorf("rx_no_clock = %d, want 2", n)
			}
		})
	}
}

// testPeerSampling: a peer's histogram and counters take at most one echo
// per ONRAMP_PEER_SAMPLE_NS (its sampled_at), while its least delay takes
// every echo; its newest excess over T is written at once when it turns
// zero or non-zero, and otherwise no more often than the histogram. The
// test sets the times the program compares against to a minute ahead
// (taken just now) or to 0 (long ago), so that no run is too slow for it.
func testPeerSampling(t *testing.T, rg *rig) {
	for _, c := range conns {
		t.Run(c.name, func(t *testing.T) {
			r := rg.use(t, Config{Threshold: 100 * time.Microsecond, MaxPause: 50 * time.Millisecond})
			k := c.key(true)
			echo := func(owd time.Duration) onrampOnrampPeer {
				t.Helper()
				r.setFlow(k, onrampOnrampFlow{Beta: fpOne})
				r.run(r.objs.OnrampIngress, echoAt(t, c, owd, owd+20*time.Microsecond, 0))
				return r.peer(c.receiver)
			}
			ahead := func(p onrampOnrampPeer) {
				p.SampledAt = monoNow() + uint64(time.Minute)
				p.LastOwdAt = p.SampledAt
				r.setPeer(c.receiver, p)
			}
			p := echo(400 * time.Microsecond)
			if p.Samples != 1 || p.MinOwd != int64(400*time.Microsecond) || p.LastExcess != uint64(300*time.Microsecond) {
				t.Fatalf("first echo: samples %d, least %d, excess %d; want 1, 400 µs, 300 µs", p.Samples, p.MinOwd, p.LastExcess)
			}
			// Sampled just now: the histogram and the excess wait, the
			// least delay does not.
			ahead(p)
			p = echo(300 * time.Microsecond)
			if p.Samples != 1 || histTotal(p.Hist[:]) != 1 {
				t.Errorf("an echo within the sampling interval went into the histogram: samples %d, histogram %d", p.Samples, histTotal(p.Hist[:]))
			}
			if p.MinOwd != int64(300*time.Microsecond) {
				t.Errorf("least delay %d, want every echo's least, 300 µs", p.MinOwd)
			}
			if p.LastExcess != uint64(300*time.Microsecond) {
				t.Errorf("excess %d written within the interval, want the one before, 300 µs", p.LastExcess)
			}
			// Under T: the excess turns zero, written at once.
			ahead(p)
			if p = echo(50 * time.Microsecond); p.LastExcess != 0 {
				t.Errorf("excess %d after an echo under T, want 0 at once", p.LastExcess)
			}
			// Over T again: written at once too.
			ahead(p)
			if p = echo(2 * time.Millisecond); p.LastExcess != uint64(1900*time.Microsecond) {
				t.Errorf("excess %d after an echo 1.9 ms over T, want it at once", p.LastExcess)
			}
			// Long after the last sample: the next echo is taken.
			p.SampledAt = 0
			r.setPeer(c.receiver, p)
			if p = echo(500 * time.Microsecond); p.Samples != 2 || histTotal(p.Hist[:]) != 2 {
				t.Errorf("an echo after the interval: samples %d, histogram %d; want 2, 2", p.Samples, histTotal(p.Hist[:]))
			}

			// With a max pause under the interval, the excess is
			// written once per max pause: new flows take an excess at
			// most four max pauses old.
			r.use(t, Config{Threshold: 100 * time.Microsecond, MaxPause: 10 * time.Microsecond})
			p = echo(400 * time.Microsecond)
			p.LastOwdAt = monoNow() - uint64(50*time.Microsecond)
			r.setPeer(c.receiver, p)
			if p = echo(600 * time.Microsecond); p.LastExcess != uint64(500*time.Microsecond) {
				t.Errorf("excess %d 50 µs after the last write with a 10 µs max pause, want it written, 500 µs", p.LastExcess)
			}
		})
	}
}

// testObserve: in observe mode an echo above T asserts no pause, not even
// one clamped to --max-pause, and a new connection to a peer over T starts
// at once; the peer's histogram and the flow's samples still take the
// echoes, and the trace says what the echo would have paused.
func testObserve(t *testing.T, rg *rig) {
	for _, c := range conns {
		t.Run(c.name, func(t *testing.T) {
			r := rg.use(t, Config{Threshold: 100 * time.Microsecond, MaxPause: 50 * time.Millisecond, Observe: true})
			nextTrace := r.trace(t)

			// 700 µs against T = 100 µs, nothing paused before: the
			// rule asks for 600 µs.
			lo, hi, paused, f := pauseOf(t, r, c, onrampOnrampFlow{Beta: fpOne}, 700*time.Microsecond, 0)
			if paused {
				t.Errorf("observe mode paused the flow for %v to %v", lo, hi)
			}
			if f.Samples != 1 || f.Pauses != 0 || f.PauseTotal != 0 {
				t.Errorf("flow after the echo: samples %d, pauses %d, pause total %d; want 1, 0, 0", f.Samples, f.Pauses, f.PauseTotal)
			}
			if p := r.peer(c.receiver); p.Samples != 1 || histTotal(p.Hist[:]) != 1 || p.Pauses != 0 {
				t.Errorf("peer after the echo: samples %d, histogram %d, pauses %d; want 1, 1, 0", p.Samples, histTotal(p.Hist[:]), p.Pauses)
			}
			// The trace says what each echo would have paused.
			traced := func(want time.Duration, flags ...string) {
				t.Helper()
				ev := nextTrace()
				if !slices.Equal(ev.Flags, flags) || ev.Pause != want || ev.PausedFor != 0 {
					t.Errorf("trace of the echo: flags %v, pause %v, paused for %v; want %v, %v, 0", ev.Flags, ev.Pause, ev.PausedFor, flags, want)
				}
			}
			traced(600*time.Microsecond, "observed")

			// A huge delay would be clamped: still no pause, and no
			// clamped pause counted. No smoothed RTT: a slow guest's
			// stall between building the echo and running it must not
			// make the echo look older than the first one's round trip
			// (stale, a case of its own).
			f.HavePrev, f.PrevTx, f.SrttNs = 0, 0, 0
			if lo, hi, paused, _ := pauseOf(t, r, c, f, 900*time.Millisecond, 0); paused {
				t.Errorf("observe mode paused the flow for %v to %v on a 900 ms delay", lo, hi)
			}
			traced(50*time.Millisecond, "clamped", "observed")
			for _, name := range []string{"pauses", "pause_ns", "clamped", "delayed"} {
				if n := r.stat(name); n != 0 {
					t.Errorf("%s = %d in observe mode, want 0", name, n)
				}
			}
			if n := r.stat("echoes"); n != 2 {
				t.Errorf("echoes = %d, want 2", n)
			}

			// A new connection to the peer whose newest echo was far over
			// T starts at once.
			next := c
			next.sport += 10
			if _, dep := r.run(r.objs.OnrampEgress, next.data(pad(StampLen))); dep != 0 {
				t.Errorf("a new connection's first segment got departure %d in observe mode, want its own (0)", dep)
			}
			if n := r.stat("start_paused"); n != 0 {
				t.Errorf("start_paused = %d in observe mode, want 0", n)
			}
		})
	}
}

// testCoarseClock: with a fixed T, an echo is not acted on when this
// host's clock error for the peer exceeds T/2 (the delay it carries could
// lie on either side of T); it counts as no_clock and traces as
// coarse_clock. An error of T/2 or less leaves the echo to the rule.
func testCoarseClock(t *testing.T, rg *rig) {
	const T = 100 * time.Microsecond
	c := conns[0]
	tests := []struct {
		name    string
		errNs   uint32
		want    time.Duration // 0: no pause
		flags   []string
		noClock uint64
	}{
		{"error over T/2", 60_000, 0, []string{"coarse_clock"}, 1},
		{"error at T/2", 50_000, 600 * time.Microsecond, []string{"paused"}, 0},
		{"no clock entry: the receiver's delay stands", 0, 600 * time.Microsecond, []string{"paused"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rg.use(t, Config{Threshold: T})
			if tt.errNs > 0 {
				r.putClock(c.receiver, 0, tt.errNs)
			}
			nextTrace := r.trace(t)

			// 700 µs against T = 100 µs: the rule asks for 600 µs.
			lo, hi, paused, _ := pauseOf(t, r, c, onrampOnrampFlow{Beta: fpOne}, 700*time.Microsecond, 0)
			if tt.want == 0 && paused {
				t.Errorf("paused %v to %v, want no pause", lo, hi)
			}
			if tt.want > 0 && (!paused || tt.want < lo || tt.want > hi) {
				t.Errorf("paused between %v and %v (paused %v), want %v", lo, hi, paused, tt.want)
			}
			if n := r.stat("no_clock"); n != tt.noClock {
				t.Errorf("no_clock = %d, want %d", n, tt.noClock)
			}
			if ev := nextTrace(); !slices.Equal(ev.Flags, tt.flags) || ev.Threshold != T {
				t.Errorf("trace of the echo: flags %v, T %v; want %v, %v", ev.Flags, ev.Threshold, tt.flags, T)
			}
		})
	}
}

// testSparseStamps: a flow whose newest echo was below T/2 is stamped at
// most once per T/4; the segments in between that have room keep their
// PAD (with a valid checksum: sockops gives room to those it sized before
// the egress told it the flow was quiet) and still get the flow's
// departure time. An echo at T/2 or
// more, or StampEveryPacket, stamps every segment. T is 400 ms, so that a
// slow guest's stalls between two runs stay well inside T/4 (at 40 ms, a
// 6.1 guest under TCG once took more than T/4 = 10 ms, and stamped a
// segment the test meant to fall inside it).
func testSparseStamps(t *testing.T, rg *rig) {
	const T = 400 * time.Millisecond
	for _, c := range conns {
		for _, tt := range []struct {
			name       string
			every      bool
			owd        time.Duration
			quiet      bool // the echo makes the flow quiet
			wantSparse bool
		}{
			{"far below T", false, time.Millisecond, true, true},
			{"just below T/2", false, T/2 - time.Microsecond, true, true},
			{"at T/2", false, T / 2, false, false},
			{"every packet", true, time.Millisecond, true, false},
		} {
			t.Run(c.name+"/"+tt.name, func(t *testing.T) {
				r := rg.use(t, Config{Threshold: T, MaxPause: 50 * time.Millisecond, StampEveryPacket: tt.every})
				k := c.key(true)
				stamped := func(frame []byte) (bool, uint64) {
					t.Helper()
					out, dep := r.run(r.objs.OnrampEgress, frame)
					switch o := optionOf(t, out); o.ExID {
					case ExIDStamp:
						return true, dep
					case ExIDPad:
						return false, dep
					default:
						t.Fatalf("egress wrote %v on a data segment", o)
					}
					return false, 0
				}
				if ok, _ := stamped(c.data(pad(StampLen))); !ok {
					t.Fatal("a new flow's first segment went without a stamp")
				}
				r.run(r.objs.OnrampIngress, echoAt(t, c, tt.owd, tt.owd+20*time.Microsecond, 0))
				f := r.flow(k)
				if f.Samples != 1 {
					t.Fatalf("the echo was not used: samples %d", f.Samples)
				}
				if want := uint32(T / 4); tt.quiet != (f.SparseGapNs == want) {
					t.Errorf("sparse gap %d ns after an echo of %v, want T/4 (%d) %v", f.SparseGapNs, tt.owd, want, tt.quiet)
				}
				ok, _ := stamped(c.data(pad(StampLen)))
				if ok == tt.wantSparse {
					t.Errorf("the segment after the echo stamped: %v, want %v", ok, !tt.wantSparse)
				}
				if want := map[bool]uint64{true: 1, false: 0}[tt.wantSparse]; r.stat("spared") != want {
					t.Errorf("spared = %d, want %d", r.stat("spared"), want)
				}
				if !tt.wantSparse {
					return
				}
				// A pause in force holds the unstamped segments too.
				f = r.flow(k)
				f.T_next = monoNow() + uint64(time.Hour)
				r.setFlow(k, f)
				if ok, dep := stamped(c.data(pad(StampLen))); ok || dep != f.T_next {
					t.Errorf("segment during a pause: stamped %v, departure %d; want no stamp, departure t_next %d", ok, dep, f.T_next)
				}
				// T/4 after the last stamp, the next segment takes one.
				f = r.flow(k)
				f.T_next, f.LastDep = 0, 0
				f.StampedAt -= uint64(T/4) + 1
				r.setFlow(k, f)
				if ok, _ := stamped(c.data(pad(StampLen))); !ok {
					t.Error("a segment T/4 after the last stamp went without one")
				}
				if r.stat("stamped") != 2 || r.stat("spared") != 2 {
					t.Errorf("stamped %d, spared %d; want 2 and 2", r.stat("stamped"), r.stat("spared"))
				}
			})
		}
	}
}

// testHistogramWeighsTime: a peer's histogram weighs each echo by the time
// since the one before, in 100 µs, from 1 to 16, and counts it as one
// sample; a peer's first echo weighs 1.
func testHistogramWeighsTime(t *testing.T, rg *rig) {
	c := conns[0]
	for _, tt := range []struct {
		name     string
		before   time.Duration // the previous echo this long ago; 0: none
		min, max uint64
	}{
		{"first echo", 0, 1, 1},
		{"idle for a minute", time.Minute, 16, 16},
		{"800 us ago", 800 * time.Microsecond, 8, 16},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := rg.use(t, Config{Threshold: 100 * time.Microsecond})
			k := c.key(true)
			if tt.before > 0 {
				r.setPeer(c.receiver, onrampOnrampPeer{MinOwd: 0x7fffffff, MinOwdPrev: 0x7fffffff, SampledAt: monoNow() - uint64(tt.before)})
			}
			r.setFlow(k, onrampOnrampFlow{Beta: fpOne})
			r.run(r.objs.OnrampIngress, echoAt(t, c, 50*time.Microsecond, 70*time.Microsecond, 0))
			p := r.peer(c.receiver)
			if w := histTotal(p.Hist[:]); p.Samples != 1 || w < tt.min || w > tt.max {
				t.Errorf("samples %d, weight %d; want 1, %d to %d", p.Samples, w, tt.min, tt.max)
			}
		})
	}
}
