package loader

// bpf_dctcp against the kernel's own dctcp (tcp_dctcp.ko) on the same
// ECN-marking bottleneck. The host's kernel has no tcp_dctcp and no
// fq_codel, so this runs in the vmtests guests:
//
//	go run ./vmtests --kernel 6.12 --only loader='^TestDCTCPMatchesKernel$'

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/testbed"
)

// The bottleneck of TestDCTCPMatchesKernel. The rate is low because the
// guests run under TCG, where two emulated CPUs cannot push much more than
// a few hundred Mbit/s through three namespaces; at this rate the shaper,
// not the CPU, is the bottleneck.
const (
	dctcpRate   = 50_000_000           // bits/s
	dctcpMarkAt = 4 * time.Millisecond // K = 25 KB, about 17 full-size packets
	dctcpBuffer = 1 << 20              // bytes; never reached with marking
	dctcpBytes  = 12 << 20             // per flow, about 2 s at the rate
	dctcpRounds = 2                    // flows per CC, alternating
	// dctcpSampleEvery is the queue sampling interval. A reading costs
	// about ten times more CPU under TCG than on the host.
	dctcpSampleEvery = time.Millisecond
)

// Tolerances of TestDCTCPMatchesKernel; see its doc comment.
const (
	dctcpMinUtilisation  = 0.70       // of dctcpRate, every flow
	dctcpThroughputAgree = 0.15       // relative, between the CCs' mean throughputs
	dctcpQueueAgree      = 0.50       // relative, between the CCs' mean queues...
	dctcpQueueAgreeFloor = 4 * 1514.0 // ...or this many bytes, whichever is larger
)

// dctcpRun is one flow of TestDCTCPMatchesKernel.
type dctcpRun struct {
	cc    string
	round int
	m     testbed.Measurement
	queue testbed.QueueStats // steady state
	recv  receiverResult
	// ceRounds and acks are the increments of bpf_dctcp's counters during
	// the flow: windows with CE marks, and ACKs bpf_dctcp processed.
	ceRounds, acks uint64
	drops          uint32
}

// TestDCTCPMatchesKernel checks that bpf_dctcp behaves as the kernel's
// dctcp: both run, in turn, one long flow through the same dumbbell whose
// bottleneck (dctcpRate, htb) CE-marks every ECN-capable packet that waited
// longer than dctcpMarkAt (fq_codel ce_threshold, a DCTCP step marker).
// Both ends of each flow run the CC under test, so ECN is negotiated and
// CE marks are echoed with DCTCP's precise ACKs.
//
// The CCs alternate, dctcpRounds flows each. They must agree within these
// tolerances:
//
//   - every flow reaches at least 70% of the bottleneck rate;
//   - the mean throughputs of the two CCs differ by at most 15%;
//   - the mean steady-state queues (after the first fifth of each flow)
//     differ by at most 50% of the larger, or by four full-size packets
//     (6056 B), whichever is larger.
//
// Each flow must have negotiated ECN at both ends and seen CE marks
// (tcpi_delivered_ce > 0; for bpf_dctcp also its ecn_ce_rounds counter),
// and the native flows must not touch bpf_dctcp's counters.
func TestDCTCPMatchesKernel(t *testing.T) {
	requireKernelCC(t, "bpf_dctcp")
	if ok, err := isRegistered("/proc/sys", "dctcp"); err != nil {
		t.Fatal(err)
	} else if !ok {
		testutil.SkipKernelLacks(t, "the tcp_dctcp module")
	}
	l := New(testHost(t))
	attachForTest(t, l, AttachRequest{Name: "bpf_dctcp"})
	d := newMarkingDumbbell(t)

	var runs []dctcpRun
	for round := range dctcpRounds {
		order := []string{"dctcp", "bpf_dctcp"}
		if round%2 == 1 {
			order = []string{"bpf_dctcp", "dctcp"}
		}
		for _, cc := range order {
			runs = append(runs, runDCTCP(t, l, d, cc, round))
		}
	}
	t.Logf("one flow at a time through %d Mbit/s, CE mark above %v of queueing (K = %d B); queue after the first 20%% of each flow:\n%s",
		dctcpRate/1_000_000, dctcpMarkAt, d.Config.ECNThresholdBytes(), formatDCTCPRuns(runs))

	for _, r := range runs {
		checkDCTCPRun(t, r)
	}

	var native, bpf []dctcpRun
	for _, r := range runs {
		if r.cc == "dctcp" {
			native = append(native, r)
		} else {
			bpf = append(bpf, r)
		}
	}
	nTput, bTput := meanOf(native, func(r dctcpRun) float64 { return r.m.Flow.Throughput }),
		meanOf(bpf, func(r dctcpRun) float64 { return r.m.Flow.Throughput })
	nQueue, bQueue := meanOf(native, func(r dctcpRun) float64 { return r.queue.Mean }),
		meanOf(bpf, func(r dctcpRun) float64 { return r.queue.Mean })
	t.Logf("means: dctcp %.1f Mbit/s, queue %.1f KB; bpf_dctcp %.1f Mbit/s, queue %.1f KB",
		nTput/1e6, nQueue/1e3, bTput/1e6, bQueue/1e3)

	if diff := math.Abs(nTput-bTput) / max(nTput, bTput); diff > dctcpThroughputAgree {
		t.Errorf("mean throughput: bpf_dctcp %.1f Mbit/s, dctcp %.1f Mbit/s: they differ by %.0f%%, more than the %.0f%% allowed",
			bTput/1e6, nTput/1e6, 100*diff, 100*dctcpThroughputAgree)
	}
	allowed := max(dctcpQueueAgree*max(nQueue, bQueue), dctcpQueueAgreeFloor)
	if diff := math.Abs(nQueue - bQueue); diff > allowed {
		t.Errorf("mean steady-state queue: bpf_dctcp %.1f KB, dctcp %.1f KB: they differ by %.1f KB, more than the %.1f KB allowed (%.0f%% of the larger or %.0f B)",
			bQueue/1e3, nQueue/1e3, diff/1e3, allowed/1e3, 100*dctcpQueueAgree, dctcpQueueAgreeFloor)
	}
}

// newMarkingDumbbell builds the one-sender dumbbell of
// TestDCTCPMatchesKernel, skipping when the kernel lacks the marking qdisc.
func newMarkingDumbbell(t *testing.T) *testbed.Dumbbell {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := testbed.NewDumbbell(ctx, testbed.DumbbellConfig{
		Senders:        1,
		BottleneckRate: dctcpRate,
		BufferBytes:    dctcpBuffer,
		ECNThreshold:   dctcpMarkAt,
	})
	if errors.Is(err, testbed.ErrQdiscNotSupported) {
		t.Logf("build dumbbell: %v", err)
		testutil.SkipKernelLacks(t, "fq_codel/RED (an ECN-marking qdisc)")
	}
	if err != nil {
		t.Fatalf("build dumbbell: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("tear down dumbbell: %v", err)
		}
	})
	return d
}

// runDCTCP sends one flow with cc at both ends and measures it.
func runDCTCP(t *testing.T, l *Loader, d *testbed.Dumbbell, cc string, round int) dctcpRun {
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
	i, ri := m.Flow.Info, r.recv.info
	t.Logf("%s round %d: %.1f Mbit/s in %v; sender: retrans %d (dsack %d), cwnd %d, ssthresh %d, srtt %dus, min_rtt %dus, busy %dms, rwnd-limited %dms; receiver: rcv_space %d, cc %s",
		cc, round, m.Flow.Throughput/1e6, m.Flow.Duration.Round(time.Millisecond), i.Total_retrans, i.Dsack_dups, i.Snd_cwnd, i.Snd_ssthresh,
		i.Rtt, i.Min_rtt, i.Busy_time/1000, i.Rwnd_limited/1000, ri.Rcv_space, r.recv.cc)
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
		t.Errorf("%s: the sender saw no CE-marked delivery: the bottleneck did not mark", name)
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
	if f.Throughput < dctcpMinUtilisation*dctcpRate {
		t.Errorf("%s: %.1f Mbit/s, below %.0f%% of the %d Mbit/s bottleneck", name, f.Throughput/1e6,
			100*dctcpMinUtilisation, dctcpRate/1_000_000)
	}
	if r.queue.N == 0 {
		t.Errorf("%s: no queue samples in the steady state", name)
	}
}

func meanOf(runs []dctcpRun, v func(dctcpRun) float64) float64 {
	if len(runs) == 0 {
		return math.NaN()
	}
	var sum float64
	for _, r := range runs {
		sum += v(r)
	}
	return sum / float64(len(runs))
}

func formatDCTCPRuns(runs []dctcpRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-10s %5s %7s %9s %9s %9s %9s %6s %8s %8s %6s %6s %6s %5s\n",
		"cc", "round", "Mbit/s", "q mean", "q p50", "q p99", "q max", "drops",
		"deliv", "deliv_ce", "ce%", "ce_rnd", "rtt_us", "retr")
	for _, r := range runs {
		f, q := r.m.Flow, r.queue
		cePct := 0.0
		if f.Info.Delivered > 0 {
			cePct = 100 * float64(f.Info.Delivered_ce) / float64(f.Info.Delivered)
		}
		ce := "-"
		if r.cc == "bpf_dctcp" {
			ce = fmt.Sprint(r.ceRounds)
		}
		fmt.Fprintf(&b, "%-10s %5d %7.1f %7.1fKB %7.1fKB %7.1fKB %7.1fKB %6d %8d %8d %6.1f %6s %6d %5d\n",
			r.cc, r.round, f.Throughput/1e6, q.Mean/1e3, q.P50/1e3, q.P99/1e3, q.Max/1e3, r.drops,
			f.Info.Delivered, f.Info.Delivered_ce, cePct, ce, f.Info.Rtt, f.Info.Total_retrans)
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

func startCCReceiver(t *testing.T, h *testbed.Host, addr netip.Addr, cc string) *ccReceiver {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc)
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("set TCP_CONGESTION %s on the listener: %w", cc, serr)
		}
		return nil
	}}
	var ln net.Listener
	if err := h.Do(func() (err error) {
		ln, err = lc.Listen(context.Background(), "tcp", netip.AddrPortFrom(addr, 0).String())
		return err
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

// receiveOne accepts one connection on ln and drains it, for at most a
// minute; then it closes ln.
func receiveOne(ln net.Listener) (res receiverResult) {
	defer ln.Close()
	deadline := time.Now().Add(60 * time.Second)
	ln.(*net.TCPListener).SetDeadline(deadline)
	c, err := ln.Accept()
	if err != nil {
		res.err = fmt.Errorf("accept: %w", err)
		return res
	}
	defer c.Close()
	c.SetReadDeadline(deadline)
	tc := c.(*net.TCPConn)
	res.bytes, res.err = io.Copy(io.Discard, tc)
	raw, err := tc.SyscallConn()
	if err != nil {
		res.err = errors.Join(res.err, err)
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
	res.cc = strings.TrimRight(res.cc, "\x00")
	res.err = errors.Join(res.err, serr)
	return res
}

// wait returns the receiver's result once the flow's connection ended.
func (r *ccReceiver) wait(t *testing.T) receiverResult {
	t.Helper()
	select {
	case res := <-r.done:
		if res.info == nil {
			res.info = &unix.TCPInfo{}
		}
		return res
	case <-time.After(70 * time.Second):
		t.Fatal("the receiver did not finish within 70s")
		return receiverResult{}
	}
}
