package bench

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/testbed"
)

// TestParsePTP4LLine checks the parser on lines printed by ptp4l 3.1.1
// (Debian's linuxptp) on a dumbbell, free-running, with and without a
// message_tag, and on the lines around them that are not samples.
func TestParsePTP4LLine(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		line string
		want PTPSample
		ok   bool
	}{
		{
			line: "ptp4l[38307.503]: master offset     -10546 s0 freq    +230 path delay     14201",
			want: PTPSample{At: 38307503 * ms, OffsetNs: -10546, PathDelayNs: 14201, State: "s0"},
			ok:   true,
		},
		{
			line: "ptp4l[38363.499]: master offset      -8651 s0 freq    -239 path delay     13409",
			want: PTPSample{At: 38363499 * ms, OffsetNs: -8651, PathDelayNs: 13409, State: "s0"},
			ok:   true,
		},
		{
			line: "ptp4l[38796.177]: [snd0] master offset      -6960 s0 freq   +1632 path delay     10996",
			want: PTPSample{At: 38796177 * ms, OffsetNs: -6960, PathDelayNs: 10996, State: "s0"},
			ok:   true,
		},
		{
			// ptp4l's format with a locked servo. Not captured here: a
			// servo that locks adjusts the clock every netns shares.
			line: "ptp4l[1234.567]: master offset        -12 s2 freq      +0 path delay      1234",
			want: PTPSample{At: 1234567 * ms, OffsetNs: -12, PathDelayNs: 1234, State: "s2"},
			ok:   true,
		},
		{line: "ptp4l[38787.972]: [snd0] rms 10535 max 11515 freq   -441 +/- 471 delay  8459 +/- 3960"},
		{line: "ptp4l[38246.300]: port 1: LISTENING to UNCALIBRATED on RS_SLAVE"},
		{line: "ptp4l[38225.884]: port 1: INITIALIZING to LISTENING on INIT_COMPLETE"},
		{line: "ptp4l[38306.252]: foreign master not using PTP timescale"},
		{line: "ptp4l[38276.236]: delay   filtered      16019   raw      16379"},
		{line: "failed to create a clock"},
		{line: ""},
		// Damaged servo lines.
		{line: "ptp4l[38307.503]: master offset     -10546 s0 freq    +230 path delay"},
		{line: "ptp4l[38307.503]: master offset     -10546 s0 freq    +230 path delay     14201 extra"},
		{line: "ptp4l[38307.503]: master offset        1x6 s0 freq    +230 path delay     14201"},
		{line: "ptp4l[38307.503]: master offset     -10546 sX freq    +230 path delay     14201"},
		{line: "ptp4l[38307.503]: master offset     -10546 s0 freq    fast path delay     14201"},
		{line: "ptp4l[38307.5]: master offset     -10546 s0 freq    +230 path delay     14201"},
		{line: "ptp4l[now]: master offset     -10546 s0 freq    +230 path delay     14201"},
	} {
		got, ok := parsePTP4LLine(tc.line)
		if ok != tc.ok || got != tc.want {
			t.Errorf("parsePTP4LLine(%q) = %+v, %v; want %+v, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}

// TestLineTail checks that output split across writes comes out as whole
// lines, that an unterminated last line is passed on by flush, and that
// only the last ptp4lTailLines lines are kept.
func TestLineTail(t *testing.T) {
	var got []string
	lt := newLineTail(func(l string) { got = append(got, l) })
	for _, w := range []string{"ptp4l[1.000]: a", "b\nc\r\n", "", "d\ne"} {
		if _, err := lt.Write([]byte(w)); err != nil {
			t.Fatal(err)
		}
	}
	lt.flush()
	want := []string{"ptp4l[1.000]: ab", "c", "d", "e"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("lines %q, want %q", got, want)
	}

	for i := range 3 * ptp4lTailLines {
		lt.Write([]byte{byte('A' + i%26), '\n'})
	}
	tail := lt.lines()
	if len(tail) != ptp4lTailLines || tail[len(tail)-1] != string(rune('A'+(3*ptp4lTailLines-1)%26)) {
		t.Errorf("tail %q: want the last %d lines", tail, ptp4lTailLines)
	}
}

// TestStartPTP4LRejectsIPv6 checks the address check, which comes before
// anything is started.
func TestStartPTP4LRejectsIPv6(t *testing.T) {
	_, err := StartPTP4L(context.Background(), nil, "eth0", netip.MustParseAddr("fd00:19::2"), nil, "eth0")
	if err == nil || !strings.Contains(err.Error(), "not IPv4") {
		t.Fatalf("StartPTP4L with an IPv6 master address: %v, want an error saying it is not IPv4", err)
	}
}

// TestPTP4LNotInstalled checks that a missing ptp4l is reported with the
// package to install.
func TestPTP4LNotInstalled(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	defer func(dirs []string) { ptp4lDirs = dirs }(ptp4lDirs)
	ptp4lDirs = []string{t.TempDir()}
	_, err := StartPTP4L(context.Background(), nil, "eth0", netip.MustParseAddr("198.19.0.2"), nil, "eth0")
	if err == nil || !strings.Contains(err.Error(), "linuxptp") || !strings.Contains(kernel.FixOf(err), "apt-get install linuxptp") {
		t.Fatalf("StartPTP4L without ptp4l: %v (fix: %q), want an error naming linuxptp and a fix that installs it", err, kernel.FixOf(err))
	}
}

// TestPTP4LOnDumbbell runs a ptp4l master on a dumbbell's receiver and a
// slave on sender 0, across the router, and checks that the slave reports
// offsets near the truth, 0: every netns shares one clock. It also checks
// that a ptp4l that cannot start is reported with its own words.
func TestPTP4LOnDumbbell(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := ptp4lPath(); err != nil {
		testutil.Skip(t, "ptp4l not installed: apt-get install linuxptp")
	}
	d := testnet.NewDumbbell(t, testbed.DumbbellConfig{Senders: 2, BottleneckRate: 1e9})
	rcvIface, err := d.Receiver.Interface()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("bad interface", func(t *testing.T) {
		p, err := StartPTP4L(ctx, d.Receiver, "nosuch0", d.Receiver.Addr, d.Senders[0], d.SenderIfaces[0])
		if err == nil {
			p.Stop()
			t.Fatal("StartPTP4L on a missing interface succeeded")
		}
		t.Logf("StartPTP4L on a missing interface: %v", err)
		if !strings.Contains(err.Error(), "exited while starting") || !strings.Contains(err.Error(), "failed to create a clock") {
			t.Errorf("the error does not say that the master exited, quoting its stderr: %v", err)
		}
	})

	t.Run("context canceled", func(t *testing.T) {
		cctx, ccancel := context.WithCancel(ctx)
		defer ccancel()
		p, err := StartPTP4L(cctx, d.Receiver, rcvIface, d.Receiver.Addr, d.Senders[0], d.SenderIfaces[0])
		if err != nil {
			t.Fatalf("StartPTP4L: %v", err)
		}
		defer p.Stop()
		ccancel()
		for _, proc := range []*ptp4lProc{p.master, p.slave} {
			select {
			case <-proc.done:
			case <-time.After(2 * ptp4lStopTimeout):
				t.Fatalf("ptp4l %s still runs %v after its context was canceled", proc.role, 2*ptp4lStopTimeout)
			}
		}
		if _, err := p.Stop(); !errors.Is(err, context.Canceled) {
			t.Errorf("Stop after the context was canceled: %v, want context.Canceled", err)
		}
	})

	start := time.Now()
	p, err := StartPTP4L(ctx, d.Receiver, rcvIface, d.Receiver.Addr, d.Senders[0], d.SenderIfaces[0])
	if err != nil {
		t.Fatalf("StartPTP4L: %v", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			p.Stop()
		}
	}()

	// The first sample comes about 3 s after the start, then one a
	// second; wait for 8, or 16 s.
	const want, runFor = 8, 16 * time.Second
	for time.Since(start) < runFor && len(p.Samples()) < want {
		time.Sleep(250 * time.Millisecond)
	}
	samples, err := p.Stop()
	stopped = true
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(p.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the temp dir %s is still there after Stop: %v", p.dir, err)
	}
	for _, s := range samples {
		t.Logf("at %6.3fs  offset %7d ns  path delay %7d ns  %s", s.At.Seconds(), s.OffsetNs, s.PathDelayNs, s.State)
	}

	if len(samples) < 4 {
		t.Fatalf("%d samples in %v, want at least 4", len(samples), elapsed.Round(time.Millisecond))
	}
	var prev time.Duration
	for i, s := range samples {
		if s.At < prev || s.At > elapsed+time.Second {
			t.Errorf("sample %d at %v: not in order or outside the run's %v", i, s.At, elapsed)
		}
		prev = s.At
	}
	// Truth is 0. Software timestamps on veth are off by tens of µs at
	// worst; 1 ms is a margin a busy 2-vCPU machine keeps.
	for i, s := range samples[2:] {
		if s.OffsetNs <= -1e6 || s.OffsetNs >= 1e6 {
			t.Errorf("sample %d: offset %d ns, want |offset| < 1 ms", i+2, s.OffsetNs)
		}
		if s.PathDelayNs <= 0 || s.PathDelayNs >= 1e6 {
			t.Errorf("sample %d: path delay %d ns, want between 0 and 1 ms", i+2, s.PathDelayNs)
		}
	}
}
