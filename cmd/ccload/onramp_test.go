package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/onramp"
	"github.com/ccload/ccload/testbed"
)

func TestOnRampUsageErrors(t *testing.T) {
	tests := []struct {
		args   []string
		code   int
		stderr []string
	}{
		{[]string{"onramp", "enable", "--iface", "eth9", "--threshold", "soon"}, 2, []string{"--threshold", "50us", "auto"}},
		{[]string{"onramp", "enable", "--iface", "eth9", "--threshold", "0us"}, 2, []string{"positive"}},
		{[]string{"onramp", "enable", "--iface", "eth9", "--gain", "1/0"}, 2, []string{"--gain", "1/16"}},
		{[]string{"onramp", "enable", "--iface", "eth9", "--peers", "10.0.0.0/33"}, 2, []string{"--peers"}},
		{[]string{"onramp", "enable", "--iface", "eth9", "--gain", "2"}, 1, []string{"gain 2 is out of range", "fix:"}},
		{[]string{"onramp", "enable", "--iface", "eth9", "--max-pause", "1s"}, 1, []string{"maximum pause 1s is out of range", "fix:"}},
		{[]string{"onramp", "enable", "--iface", "eth9", "--threshold", "2s"}, 1, []string{"threshold 2s is out of range", "fix:"}},
		{[]string{"onramp", "enable"}, 1, []string{"no interface given", "--iface"}},
		{[]string{"onramp", "disable"}, 2, []string{"--iface is required"}},
		{[]string{"onramp", "status", "extra"}, 2, []string{"Run 'ccload onramp status --help'"}},
		{[]string{"trace", "theta_powertcp", "--iface", "eth0"}, 2, []string{"--iface is for 'trace onramp' only"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, _, stderr := cli(tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr)
			}
			for _, want := range tt.stderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
		})
	}
}

// addHTBRoot installs an htb root qdisc, handle 1:, on iface in h: a root
// qdisc somebody else installed. The returned function removes it.
func addHTBRoot(t *testing.T, h *testbed.Host, iface string) (remove func()) {
	t.Helper()
	htb := func(op func(netlink.Qdisc) error) {
		t.Helper()
		err := h.Do(func() error {
			l, err := netlink.LinkByName(iface)
			if err != nil {
				return err
			}
			return op(netlink.NewHtb(netlink.QdiscAttrs{LinkIndex: l.Attrs().Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT}))
		})
		if err != nil {
			t.Fatalf("htb root on %s: %v", iface, err)
		}
	}
	htb(netlink.QdiscAdd)
	return func() { htb(netlink.QdiscDel) }
}

// pinsLeft lists what is left under the test bpffs's ccload directory.
func pinsLeft(t *testing.T, e *hopCLIEnv) []string {
	t.Helper()
	var left []string
	filepath.WalkDir(filepath.Join(e.bpffs, "ccload"), func(path string, d os.DirEntry, err error) error {
		if err == nil && path != filepath.Join(e.bpffs, "ccload") {
			left = append(left, strings.TrimPrefix(path, e.bpffs))
		}
		return nil
	})
	return left
}

// TestOnRampEnableWithoutFQ: on a kernel without sch_fq, like this host's,
// enable fails with an error that names CONFIG_NET_SCH_FQ and its fix,
// and leaves no pin, no program and the root qdisc as it was.
func TestOnRampEnableWithoutFQ(t *testing.T) {
	testutil.RequireFile(t, "/sys/kernel/btf/vmlinux", "kernel BTF (CONFIG_DEBUG_INFO_BTF)")
	e := newHopCLIEnv(t)
	before := testnet.RootQdisc(t, e.pair.A, e.iface)
	code, _, stderr := e.cliIn(t, e.pair.A, "onramp", "enable", "--iface", e.iface, "--peers", "198.18.0.0/15")
	if code == 0 {
		e.cliIn(t, e.pair.A, "onramp", "disable", "--iface", e.iface)
		t.Skip("this kernel has sch_fq: TestOnRampCLI, which the vmtests guests run, covers enable")
	}
	for _, want := range []string{"CONFIG_NET_SCH_FQ", "fix:", "modprobe sch_fq", "--observe"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if left := pinsLeft(t, e); len(left) > 0 {
		t.Errorf("a failed enable left pins: %v", left)
	}
	if after := testnet.RootQdisc(t, e.pair.A, e.iface); after != before {
		t.Errorf("root qdisc %q after a failed enable, was %q", after, before)
	}
}

// TestOnRampCLI goes through On-Ramp's commands as an SRE would, on a
// kernel with sch_fq (the vmtests guests): enable, status, enable again to
// retune, trace, disable twice; a foreign root qdisc refused, then
// replaced with --replace-qdisc; nothing left at the end.
func TestOnRampCLI(t *testing.T) {
	testutil.RequireFile(t, "/sys/kernel/btf/vmlinux", "kernel BTF (CONFIG_DEBUG_INFO_BTF)")
	e := newHopCLIEnv(t)
	a, iface := e.pair.A, e.iface
	t.Cleanup(func() { e.cliIn(t, a, "onramp", "disable", "--iface", iface) })
	before := testnet.RootQdisc(t, e.pair.A, iface)

	code, out, stderr := e.cliIn(t, a, "onramp", "enable", "--iface", iface, "--peers", "198.18.0.0/15,fd00::/8", "--threshold", "auto")
	if code != 0 && strings.Contains(stderr, "CONFIG_NET_SCH_FQ") {
		testutil.SkipKernelLacks(t, "sch_fq")
	}
	if code != 0 {
		t.Fatalf("enable: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"On-Ramp enabled on " + iface, "198.18.0.0/15", "threshold auto"} {
		if !strings.Contains(out, want) {
			t.Errorf("enable says %q, lacking %q", out, want)
		}
	}
	var sts []onramp.Status
	code, out, stderr = e.cliIn(t, a, "onramp", "status", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &sts) != nil || len(sts) != 1 {
		t.Fatalf("status --json: exit %d, %d interfaces: %s %s", code, len(sts), out, stderr)
	}
	st := sts[0]
	if !st.Attached || st.Qdisc == nil || !st.Qdisc.Owned || !st.Settings.AutoThreshold || len(st.Peers) != 2 {
		t.Errorf("status after enable: %+v", st)
	}

	code, out, stderr = e.cliIn(t, a, "onramp", "enable", "--iface", iface, "--peers", "198.18.0.0/15", "--threshold", "80us", "--gain", "1/8")
	if code != 0 || !strings.Contains(out, "already enabled") || !strings.Contains(out, "threshold 80µs, gain 0.125") {
		t.Errorf("enable again: exit %d: %s %s", code, out, stderr)
	}
	code, out, stderr = e.cliIn(t, a, "trace", "onramp", "--duration", "100ms")
	if code != 0 || !strings.Contains(out, "owd") {
		t.Errorf("trace onramp: exit %d: %s %s", code, out, stderr)
	}
	code, out, _ = e.cliIn(t, a, "onramp", "disable", "--iface", iface)
	if code != 0 || !strings.Contains(out, "On-Ramp disabled on "+iface) {
		t.Errorf("disable: exit %d: %s", code, out)
	}
	if got := testnet.RootQdisc(t, e.pair.A, iface); got != before {
		t.Errorf("root qdisc %q after disable, was %q", got, before)
	}
	code, out, _ = e.cliIn(t, a, "onramp", "disable", "--iface", iface)
	if code != 0 || !strings.Contains(out, "not enabled") {
		t.Errorf("second disable: exit %d: %s", code, out)
	}

	// A root qdisc somebody installed is refused, then replaced.
	addHTBRoot(t, a, iface) // replaced below: nothing to remove
	code, _, stderr = e.cliIn(t, a, "onramp", "enable", "--iface", iface, "--peers", "198.18.0.0/15")
	if code == 0 || !strings.Contains(stderr, "htb 1:") || !strings.Contains(stderr, "--replace-qdisc") {
		t.Errorf("enable over htb: exit %d: %s", code, stderr)
	}
	if got := testnet.RootQdisc(t, e.pair.A, iface); !strings.HasPrefix(got, "htb 1:") {
		t.Errorf("a refused enable changed the root qdisc to %q", got)
	}
	code, out, stderr = e.cliIn(t, a, "onramp", "enable", "--iface", iface, "--peers", "198.18.0.0/15", "--replace-qdisc")
	if code != 0 || !strings.Contains(out, "replaced the root qdisc htb 1:") {
		t.Errorf("enable --replace-qdisc: exit %d: %s %s", code, out, stderr)
	}
	if code, _, stderr = e.cliIn(t, a, "onramp", "disable", "--iface", iface); code != 0 {
		t.Errorf("disable: %s", stderr)
	}
	if left := pinsLeft(t, e); len(left) > 0 {
		t.Errorf("disable left pins: %v", left)
	}
}

// TestOnRampObserveCLI: --observe runs On-Ramp without touching the root
// qdisc, on any kernel (no fq needed: this host has none), over a root
// qdisc somebody installed too. Turning the pauses on is enable without
// --observe: on a kernel without sch_fq it fails and leaves On-Ramp
// observing, as it was; on one with sch_fq it installs fq, and observing
// again keeps it until disable, which leaves the root as it found it.
func TestOnRampObserveCLI(t *testing.T) {
	testutil.RequireFile(t, "/sys/kernel/btf/vmlinux", "kernel BTF (CONFIG_DEBUG_INFO_BTF)")
	e := newHopCLIEnv(t)
	a, iface := e.pair.A, e.iface
	t.Cleanup(func() { e.cliIn(t, a, "onramp", "disable", "--iface", iface) })
	status := func() onramp.Status {
		t.Helper()
		var sts []onramp.Status
		code, out, stderr := e.cliIn(t, a, "onramp", "status", "--json")
		if code != 0 || json.Unmarshal([]byte(out), &sts) != nil || len(sts) != 1 {
			t.Fatalf("status --json: exit %d, %d interfaces: %s %s", code, len(sts), out, stderr)
		}
		return sts[0]
	}
	observe := []string{"onramp", "enable", "--iface", iface, "--peers", "198.18.0.0/15", "--threshold", "1ms", "--observe"}
	enforce := observe[:len(observe)-1]

	// Over a root qdisc somebody installed, without --replace-qdisc.
	removeHTB := addHTBRoot(t, a, iface)
	before := testnet.RootQdisc(t, e.pair.A, iface)
	code, out, stderr := e.cliIn(t, a, observe...)
	if code != 0 || !strings.Contains(out, "observe only (no pauses), threshold 1ms") {
		t.Fatalf("enable --observe over %s: exit %d: %s %s", before, code, out, stderr)
	}
	if !strings.Contains(out, "one-way delays are measured only once `ccload clock run` publishes offsets") {
		t.Errorf("enable --observe without a clock agent does not say what waits for one: %s", out)
	}
	if got := testnet.RootQdisc(t, e.pair.A, iface); got != before {
		t.Errorf("enable --observe changed the root qdisc from %q to %q", before, got)
	}
	if st := status(); !st.Settings.Observe || !st.Attached || st.Qdisc != nil || len(st.Notes) != 0 {
		t.Errorf("status in observe mode: observe %v, attached %v, qdisc %+v, notes %q", st.Settings.Observe, st.Attached, st.Qdisc, st.Notes)
	}
	code, out, stderr = e.cliIn(t, a, "onramp", "status")
	if code != 0 || !strings.Contains(out, "observe only") {
		t.Errorf("status: exit %d: %s %s", code, out, stderr)
	}
	// The pauses on: fq is needed, and the htb is somebody's.
	code, _, stderr = e.cliIn(t, a, enforce...)
	if code == 0 || !strings.Contains(stderr, "--replace-qdisc") {
		t.Errorf("enable without --observe over htb: exit %d: %s", code, stderr)
	}
	if st := status(); !st.Settings.Observe || !st.Attached {
		t.Errorf("a refused switch to pausing left observe %v, attached %v; want On-Ramp observing as before", st.Settings.Observe, st.Attached)
	}
	if code, _, stderr = e.cliIn(t, a, "onramp", "disable", "--iface", iface); code != 0 {
		t.Fatalf("disable: %s", stderr)
	}
	if got := testnet.RootQdisc(t, e.pair.A, iface); got != before {
		t.Errorf("disable changed the root qdisc from %q to %q", before, got)
	}
	removeHTB()

	// Over the kernel's default root.
	before = testnet.RootQdisc(t, e.pair.A, iface)
	if code, out, stderr = e.cliIn(t, a, observe...); code != 0 {
		t.Fatalf("enable --observe: exit %d: %s %s", code, out, stderr)
	}
	code, out, stderr = e.cliIn(t, a, enforce...)
	switch {
	case code != 0 && strings.Contains(stderr, "CONFIG_NET_SCH_FQ"):
		// No sch_fq (this host): On-Ramp keeps observing.
		if st := status(); !st.Settings.Observe || !st.Attached {
			t.Errorf("a failed switch to pausing left observe %v, attached %v; want On-Ramp observing as before", st.Settings.Observe, st.Attached)
		}
		if got := testnet.RootQdisc(t, e.pair.A, iface); got != before {
			t.Errorf("a failed switch to pausing changed the root qdisc from %q to %q", before, got)
		}
	case code != 0:
		t.Fatalf("enable without --observe: exit %d: %s", code, stderr)
	default:
		if !strings.Contains(out, "installed fq") {
			t.Errorf("enable without --observe does not say it installed fq: %s", out)
		}
		if st := status(); st.Settings.Observe || st.Qdisc == nil || !st.Qdisc.Owned {
			t.Errorf("status after turning the pauses on: observe %v, qdisc %+v; want pausing, on ccload's fq", st.Settings.Observe, st.Qdisc)
		}
		if code, out, stderr = e.cliIn(t, a, observe...); code != 0 {
			t.Fatalf("enable --observe again: exit %d: %s %s", code, out, stderr)
		}
		if st := status(); !st.Settings.Observe || st.Qdisc == nil {
			t.Errorf("observing again: observe %v, qdisc %+v; want observing, with the fq kept until disable", st.Settings.Observe, st.Qdisc)
		}
	}
	if code, _, stderr = e.cliIn(t, a, "onramp", "disable", "--iface", iface); code != 0 {
		t.Errorf("disable: %s", stderr)
	}
	if got := testnet.RootQdisc(t, e.pair.A, iface); got != before {
		t.Errorf("root qdisc %q after disable, was %q", got, before)
	}
	if left := pinsLeft(t, e); len(left) > 0 {
		t.Errorf("disable left pins: %v", left)
	}
}
