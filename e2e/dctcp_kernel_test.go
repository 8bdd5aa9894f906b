package e2e

// bpf_dctcp against the kernel's own dctcp (tcp_dctcp.ko) on the same
// ECN-marking bottleneck. The host's kernel has neither tcp_dctcp nor
// fq_codel, so this runs in the vmtests guests:
//
//	go run ./vmtests --kernel 6.12 --only loader='^TestDCTCPMatchesKernel$'

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/testbed"
)

// The set-up of TestDCTCPMatchesKernel. The guests run under TCG, where
// two emulated CPUs move a little over 100 Mbit/s through three namespaces
// with the queue sampled; at 100 Mbit/s the shaper, not the CPU, is the
// bottleneck as long as the host's CPUs are otherwise idle.
const (
	dctcpRate   = 100_000_000          // bits/s
	dctcpMarkAt = 2 * time.Millisecond // K = 25 KB, about 17 full-size packets
	dctcpBuffer = 1 << 20              // bytes; DCTCP never fills it
	dctcpBytes  = 12 << 20             // per flow: about 1 s at the rate
	// dctcpRounds is the number of rounds; each runs one flow of each CC,
	// back to back, in alternating order.
	dctcpRounds = 5
	// dctcpSampleEvery is the queue sampling interval. A reading costs
	// far more CPU under TCG than on the host.
	dctcpSampleEvery = 2 * time.Millisecond
)

// The tolerances of TestDCTCPMatchesKernel; its doc comment says why.
const (
	dctcpThroughputAgree = 0.15     // median per-round difference, relative to the larger
	dctcpQueueAgree      = 0.25     // median per-round difference, relative to the larger,
	dctcpQueueAgreeBytes = 3 * 1514 // or in bytes, whichever is looser
	dctcpCEAgree         = 0.30     // median per-round difference of the CE share, relative to the larger
)

// dctcpRun is one flow of TestDCTCPMatchesKernel.
type dctcpRun struct {
	cc    string
	round int
	m     testbed.Measurement
	// queue summarises the queue after the first fifth of the flow.
	queue testbed.QueueStats
	// empty is the fraction of those samples that found the queue empty:
	// time in which the link may have idled for want of data.
	empty float64
	drops uint32
	recv  receiverResult
	// ceRounds and acks are the increments of bpf_dctcp's counters during
	// the flow: windows that saw CE marks, and ACKs it processed.
	ceRounds, acks uint64
}

// TestDCTCPMatchesKernel checks that bpf_dctcp behaves as the kernel's
// dctcp. Both send, in turn, one long flow through the same dumbbell whose
// bottleneck (htb at dctcpRate) CE-marks every ECN-capable packet that has
// queued for longer than dctcpMarkAt (fq_codel ce_threshold: DCTCP's step
// marking at K). Both ends of a flow run the CC under test, so ECN is
// negotiated and the receiver echoes CE precisely, as DCTCP requires.
//
// Each of dctcpRounds rounds runs one flow of each CC back to back, in
// alternating order. The two must agree:
//
//   - throughput: in the median round they differ by at most 15% of the
//     larger;
//   - steady-state queue (mean backlog after the first fifth of a flow): in
//     the median round they differ by at most 25% of the larger, or by at
//     most 3 full-size packets (4542 B), whichever is looser;
//   - the share of delivered packets that carried CE (tcpi_delivered_ce
//     over tcpi_delivered), which measures how hard the CC backs off per
//     mark: in the median round they differ by at most 30% of the larger.
//
// On an idle host the two CCs land within a few percent of each other on
// all three (93-95 Mbit/s, 21-23 KB and 15-18% CE, 6.1 and 6.12 alike;
// median per-round differences below 1%, 3% and 8%). A
// bpf_dctcp made to keep α near 1 (shift_g=10), so that it halves its
// window on marks as Reno with ECN does, still fills the link at this
// K, but keeps a queue about 30% shorter and sees 4% CE instead of 16%;
// the queue tolerance catches it, the CE tolerance with a wide margin. The
// comparison is made per round, and through medians, because a host busy
// with other work slows the emulated guest for seconds at a time: a round
// compares two flows that saw about the same conditions, and the median
// discards rounds in which they did not. Under such load the per-round
// differences between the two grow to about 20%.
//
// Each CC's median throughput against the bottleneck rate is logged, not
// asserted: under TCG it measures the host's spare CPU. With one host CPU
// kept busy, both CCs' median flows moved 64 Mbit/s of the 100 while their
// median per-round differences stayed at 3.6%, 6.1% and 4.3%.
//
// Every flow must also have negotiated ECN at both ends and have had CE
// marks delivered (tcpi_delivered_ce); bpf_dctcp's flows must have counted
// windows with CE (ecn_ce_rounds), and the native flows must not have run
// through bpf_dctcp at all (its acks counter stays put).
func TestDCTCPMatchesKernel(t *testing.T) {
	testutil.RequireKernelCC(t, "bpf_dctcp")
	if !testutil.Registered(t, "dctcp") {
		testutil.SkipKernelLacks(t, "the tcp_dctcp module")
	}
	l, _ := newSys(t)
	attachForTest(t, l, loader.AttachRequest{Name: "bpf_dctcp"})
	d := newMarkingDumbbell(t)
	warmUp(t, d)

	type pair struct{ native, bpf dctcpRun }
	var (
		rounds []pair
		runs   []dctcpRun // in the order they ran
	)
	for round := range dctcpRounds {
		var p pair
		if round%2 == 0 {
			p.native = runDCTCP(t, l, d, "dctcp", round)
			p.bpf = runDCTCP(t, l, d, "bpf_dctcp", round)
			runs = append(runs, p.native, p.bpf)
		} else {
			p.bpf = runDCTCP(t, l, d, "bpf_dctcp", round)
			p.native = runDCTCP(t, l, d, "dctcp", round)
			runs = append(runs, p.bpf, p.native)
		}
		rounds = append(rounds, p)
	}
	t.Logf("one flow at a time through %d Mbit/s, CE mark above %v of queueing (K = %d B); queue after the first fifth of each flow:\n%s",
		dctcpRate/1_000_000, dctcpMarkAt, d.Config.ECNThresholdBytes(), formatDCTCPRuns(runs))

	for _, r := range runs {
		checkDCTCPRun(t, r)
	}

	// Each CC's median flow, against the bottleneck rate: a figure of the
	// guest's CPU as much as of the CC, so it is reported, not asserted.
	for _, cc := range []string{"dctcp", "bpf_dctcp"} {
		var mine []dctcpRun
		for _, r := range runs {
			if r.cc == cc {
				mine = append(mine, r)
			}
		}
		slices.SortFunc(mine, func(a, b dctcpRun) int { return cmp.Compare(a.m.Flow.Throughput, b.m.Flow.Throughput) })
		med := mine[len(mine)/2]
		t.Logf("%s: median flow %.1f Mbit/s, %.0f%% of the bottleneck (round %d, queue empty in %.0f%% of its samples)",
			cc, med.m.Flow.Throughput/1e6, 100*med.m.Flow.Throughput/dctcpRate, med.round, 100*med.empty)
	}

	// The two agree in the median round.
	var dTput, dQueue, dQueueBytes, dCE []float64
	var perRound strings.Builder
	for i, p := range rounds {
		nt, bt := p.native.m.Flow.Throughput, p.bpf.m.Flow.Throughput
		nq, bq := p.native.queue.Mean, p.bpf.queue.Mean
		nc, bc := ceShare(p.native), ceShare(p.bpf)
		dTput = append(dTput, math.Abs(bt-nt)/max(bt, nt))
		dQueue = append(dQueue, math.Abs(bq-nq)/max(bq, nq))
		dQueueBytes = append(dQueueBytes, math.Abs(bq-nq))
		dCE = append(dCE, math.Abs(bc-nc)/max(bc, nc))
		fmt.Fprintf(&perRound, "\n  round %d: throughput %+.1f%%, queue %+.1f%% (%+.0f B), CE share %+.1f%%",
			i, 100*(bt-nt)/max(bt, nt), 100*(bq-nq)/max(bq, nq), bq-nq, 100*(bc-nc)/max(bc, nc))
	}
	medTput, medQueue, medQueueBytes, medCE := median(dTput), median(dQueue), median(dQueueBytes), median(dCE)
	t.Logf("bpf_dctcp against dctcp, per round (relative to the larger):%s\nmedian differences: throughput %.1f%%, queue %.1f%% (%.0f B), CE share %.1f%%",
		perRound.String(), 100*medTput, 100*medQueue, medQueueBytes, 100*medCE)
	if medTput > dctcpThroughputAgree {
		t.Errorf("throughput: in the median round bpf_dctcp and dctcp differ by %.1f%%, more than the %.0f%% allowed",
			100*medTput, 100*dctcpThroughputAgree)
	}
	if medQueue > dctcpQueueAgree && medQueueBytes > dctcpQueueAgreeBytes {
		t.Errorf("steady-state queue: in the median round bpf_dctcp and dctcp differ by %.1f%% (%.0f B), more than the %.0f%% or %d B allowed",
			100*medQueue, medQueueBytes, 100*dctcpQueueAgree, dctcpQueueAgreeBytes)
	}
	if medCE > dctcpCEAgree {
		t.Errorf("CE share of delivered packets: in the median round bpf_dctcp and dctcp differ by %.1f%%, more than the %.0f%% allowed",
			100*medCE, 100*dctcpCEAgree)
	}
}

// ceShare is the fraction of the packets a flow delivered that carried CE.
func ceShare(r dctcpRun) float64 {
	if r.m.Flow.Info.Delivered == 0 {
		return 0
	}
	return float64(r.m.Flow.Info.Delivered_ce) / float64(r.m.Flow.Info.Delivered)
}

// newMarkingDumbbell builds the one-sender dumbbell of
// TestDCTCPMatchesKernel, skipping when the kernel lacks the marking qdisc.
func newMarkingDumbbell(t *testing.T) *testbed.Dumbbell {
	t.Helper()
	return testnet.NewDumbbell(t, testbed.DumbbellConfig{
		Senders:        1,
		BottleneckRate: dctcpRate,
		BufferBytes:    dctcpBuffer,
		ECNThreshold:   dctcpMarkAt,
	})
}

// warmUp sends one short reno flow across d and discards it. The first
// flow after the guest boots runs a few percent slower than the rest,
// whatever its CC, which would otherwise count against the CC that goes
// first.
func warmUp(t *testing.T, d *testbed.Dumbbell) {
	t.Helper()
	recv := startCCReceiver(t, d.Receiver, d.Receiver.Addr, "reno")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := testbed.SendFlow(ctx, d.Senders[0], recv.addr, testbed.FlowConfig{
		CC: "reno", Bytes: 4 << 20, Timeout: 30 * time.Second,
	}); err != nil {
		t.Fatalf("warm-up flow: %v", err)
	}
	if res := recv.wait(t); res.err != nil {
		t.Fatalf("warm-up flow, receiver: %v", res.err)
	}
}

// runDCTCP sends one flow with cc at both ends and measures it.
func runDCTCP(t *testing.T, l *loader.Loader, d *testbed.Dumbbell, cc string, round int) dctcpRun {
	t.Helper()
	recv := startCCReceiver(t, d.Receiver, d.Receiver.Addr, cc)
	before := ccStats(t, l, "bpf_dctcp")
	m, err := d.MeasureFlow(context.Background(), 0, recv.addr, testbed.FlowConfig{
		CC: cc, Bytes: dctcpBytes, Seed: uint64(time.Now().UnixNano()), Timeout: 60 * time.Second,
	}, dctcpSampleEvery)
	if err != nil {
		t.Fatalf("%s flow, round %d: %v", cc, round, err)
	}
	after := ccStats(t, l, "bpf_dctcp")
	r := dctcpRun{
		cc:       cc,
		round:    round,
		m:        m,
		queue:    m.Steady(),
		recv:     recv.wait(t),
		ceRounds: after["ecn_ce_rounds"] - before["ecn_ce_rounds"],
		acks:     after["acks"] - before["acks"],
	}
	if n := len(m.Samples); n > 0 {
		r.drops = m.Samples[n-1].Drops - m.Samples[0].Drops
	}
	var steady, empty int
	for _, s := range m.Samples {
		if s.At >= m.Flow.Duration/5 {
			steady++
			if s.BacklogBytes == 0 {
				empty++
			}
		}
	}
	if steady > 0 {
		r.empty = float64(empty) / float64(steady)
	}
	return r
}

// checkDCTCPRun checks what must hold for every flow on its own.
func checkDCTCPRun(t *testing.T, r dctcpRun) {
	t.Helper()
	name := fmt.Sprintf("%s (round %d)", r.cc, r.round)
	f := r.m.Flow
	if f.CC != r.cc || r.recv.cc != r.cc {
		t.Errorf("%s: the sender ran %q and the receiver %q, want %q at both ends", name, f.CC, r.recv.cc, r.cc)
	}
	if f.Info.Options&tcpiOptECN == 0 || r.recv.info.Options&tcpiOptECN == 0 {
		t.Errorf("%s: ECN not negotiated: tcpi_options %#x at the sender, %#x at the receiver", name, f.Info.Options, r.recv.info.Options)
	}
	if f.Info.Delivered_ce == 0 {
		t.Errorf("%s: no CE mark reached the sender: the bottleneck did not mark or the receiver did not echo", name)
	}
	if r.recv.err != nil || r.recv.bytes < f.Bytes {
		t.Errorf("%s: the receiver read %d bytes (want at least %d): %v", name, r.recv.bytes, f.Bytes, r.recv.err)
	}
	switch r.cc {
	case "bpf_dctcp":
		if r.ceRounds == 0 {
			t.Errorf("%s: bpf_dctcp counted no window with CE marks (ecn_ce_rounds did not move)", name)
		}
	case "dctcp":
		if r.acks != 0 {
			t.Errorf("%s: bpf_dctcp processed %d ACKs during the native dctcp flow", name, r.acks)
		}
	}
	if r.queue.N == 0 {
		t.Errorf("%s: no queue samples in the steady state", name)
	}
}

// median returns the median of vals (the mean of the middle two for an
// even count), or NaN for none. It sorts vals.
func median(vals []float64) float64 {
	if len(vals) == 0 {
		return math.NaN()
	}
	slices.Sort(vals)
	n := len(vals)
	return (vals[(n-1)/2] + vals[n/2]) / 2
}

// formatDCTCPRuns tabulates runs: throughput, the steady-state queue and
// the share of its samples that found it empty, drops, the share of
// delivered packets that carried CE, bpf_dctcp's CE windows, retransmits
// and the final smoothed RTT.
func formatDCTCPRuns(runs []dctcpRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-9s %5s %6s | %7s %7s %7s %7s %5s %5s | %5s %6s %4s %7s\n",
		"cc", "round", "Mbit/s", "q mean", "q p50", "q p99", "q max", "q=0", "drops",
		"CE%", "ce_rnd", "retr", "srtt")
	for _, r := range runs {
		f, q := r.m.Flow, r.queue
		cePct := 100 * ceShare(r)
		ceRounds := "-"
		if r.cc == "bpf_dctcp" {
			ceRounds = fmt.Sprint(r.ceRounds)
		}
		fmt.Fprintf(&b, "%-9s %5d %6.1f | %5.1fKB %5.1fKB %5.1fKB %5.1fKB %4.0f%% %5d | %5.1f %6s %4d %5dus\n",
			r.cc, r.round, f.Throughput/1e6, q.Mean/1e3, q.P50/1e3, q.P99/1e3, q.Max/1e3, 100*r.empty, r.drops,
			cePct, ceRounds, f.Info.Total_retrans, f.Info.Rtt)
	}
	return b.String()
}

// ccReceiver accepts one connection on a listening socket that runs a
// chosen CC, reads it to EOF and closes it, so that a testbed flow to it
// completes.
//
// Setting the CC on the listening socket is what makes both ends run it:
// the accepted socket inherits a CC set with setsockopt, and the kernel
// grants ECN to an ECT-marked SYN only when the listener's CC needs ECN.
// The netns default cannot do this for the kernel's dctcp: in a child netns
// only CCs in tcp_allowed_congestion_control may be the default, and
// dctcp is not one (sysctl fails with EPERM).
type ccReceiver struct {
	addr netip.AddrPort
	done <-chan receiverResult
}

// receiverResult is what the receiving end saw.
type receiverResult struct {
	bytes int64
	cc    string
	info  *unix.TCPInfo
	err   error
}

// startCCReceiver listens on h at addr (a free port) with cc set on the
// listening socket, and accepts one connection in the background. The
// listener is closed when the connection ends or the test does.
func startCCReceiver(t *testing.T, h *testbed.Host, addr netip.Addr, cc string) *ccReceiver {
	t.Helper()
	lc := net.ListenConfig{Control: testbed.SetCC(cc)}
	var ln *net.TCPListener
	if err := h.Do(func() error {
		l, err := lc.Listen(context.Background(), "tcp", netip.AddrPortFrom(addr, 0).String())
		if err != nil {
			return err
		}
		ln = l.(*net.TCPListener)
		return nil
	}); err != nil {
		t.Fatalf("listen in %s with %s: %v", h.Name, cc, err)
	}
	t.Cleanup(func() { ln.Close() })

	done := make(chan receiverResult, 1)
	go func() {
		done <- receiveOne(ln)
	}()
	return &ccReceiver{addr: ln.Addr().(*net.TCPAddr).AddrPort(), done: done}
}

// receiverDeadline bounds a receiver's accept and its reads.
const receiverDeadline = 60 * time.Second

// receiveOne accepts one connection on ln, drains it to EOF, reads the
// accepted socket's CC and TCP_INFO, and closes both.
func receiveOne(ln *net.TCPListener) (res receiverResult) {
	defer ln.Close()
	deadline := time.Now().Add(receiverDeadline)
	if err := ln.SetDeadline(deadline); err != nil {
		res.err = fmt.Errorf("set accept deadline: %w", err)
		return res
	}
	c, err := ln.AcceptTCP()
	if err != nil {
		res.err = fmt.Errorf("accept: %w", err)
		return res
	}
	defer c.Close()
	if err := c.SetReadDeadline(deadline); err != nil {
		res.err = fmt.Errorf("set read deadline: %w", err)
		return res
	}
	if res.bytes, err = io.Copy(io.Discard, c); err != nil {
		res.err = fmt.Errorf("read after %d bytes: %w", res.bytes, err)
	}
	raw, err := c.SyscallConn()
	if err != nil {
		res.err = errors.Join(res.err, fmt.Errorf("raw connection: %w", err))
		return res
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		var e1, e2 error
		res.cc, e1 = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
		res.info, e2 = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		serr = errors.Join(e1, e2)
	}); err != nil {
		serr = errors.Join(serr, err)
	}
	if serr != nil {
		res.err = errors.Join(res.err, fmt.Errorf("read TCP_CONGESTION and TCP_INFO of the accepted socket: %w", serr))
	}
	res.cc = strings.TrimRight(res.cc, "\x00")
	return res
}

// wait returns the receiver's result once its connection has ended. A
// missing TCP_INFO reads as zeros.
func (r *ccReceiver) wait(t *testing.T) receiverResult {
	t.Helper()
	select {
	case res := <-r.done:
		if res.info == nil {
			res.info = &unix.TCPInfo{}
		}
		return res
	case <-time.After(receiverDeadline + 10*time.Second):
		t.Fatalf("the receiver did not finish within %v", receiverDeadline+10*time.Second)
		return receiverResult{}
	}
}
