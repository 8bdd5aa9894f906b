package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cilium/ebpf"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/testbed"
)

// cli runs ccload in-process and returns its exit code and output.
func cli(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestUsageAndInputErrors(t *testing.T) {
	tests := []struct {
		args     []string
		code     int
		stderr   []string
		noKernel bool // fails before touching the kernel
	}{
		{args: []string{"attach"}, code: 2, stderr: []string{"expects one CC name", "--help"}},
		{args: []string{"attach", "a", "b"}, code: 2, stderr: []string{"expects one CC name"}},
		{args: []string{"set", "theta_powertcp"}, code: 2, stderr: []string{"name=value"}},
		{args: []string{"list", "--bogus"}, code: 2, stderr: []string{"unknown flag"}},
		{args: []string{"attach", "nope"}, code: 1, stderr: []string{`unknown congestion control "nope"`, "fix:", "theta_powertcp"}},
		{args: []string{"attach", "theta_powertcp", "--param", "gamma"}, code: 1, stderr: []string{"name=value", "fix:"}},
		{args: []string{"attach", "theta_powertcp", "-p", "gamma=2"}, code: 1, stderr: []string{"out of range", "fix:"}},
		{args: []string{"attach", "theta_powertcp", "-p", "base_rtt=20"}, code: 1, stderr: []string{"needs a unit"}},
		{args: []string{"attach", "theta_powertcp", "-p", "host_bw=10Gbps"}, code: 1, stderr: []string{"ambiguous"}},
		{args: []string{"set", "theta_powertcp", "nope=1"}, code: 1, stderr: []string{`unknown parameter "nope"`}},
		{args: []string{"detach", "nope"}, code: 1, stderr: []string{"unknown congestion control"}},
		{args: []string{"int", "hop", "--iface", "eth9", "--off", "--rate", "1gbit"}, code: 2, stderr: []string{"--off takes only --iface", "--rate", "--help"}},
		{args: []string{"int", "hop", "--iface", "eth9", "--off", "--duration", "5s"}, code: 2, stderr: []string{"--off takes only --iface", "--duration"}},
		{args: []string{"int", "hop", "--iface", "eth9", "--off", "--buffer", "1MiB"}, code: 2, stderr: []string{"--off takes only --iface", "--buffer"}},
		{args: []string{"int", "hop", "--off"}, code: 2, stderr: []string{"--iface is required"}},
		{args: []string{"int", "hop", "--rate", "1gbit"}, code: 2, stderr: []string{"--iface is required"}},
		{args: []string{"int", "hop", "--iface", "eth9"}, code: 2, stderr: []string{"--rate is required"}},
		{args: []string{"int", "hop", "--iface", "eth9", "--rate", "1gbps"}, code: 2, stderr: []string{"--rate", "ambiguous"}},
		{args: []string{"int", "hop", "--iface", "eth9", "--rate", "1gbit", "--buffer", "lots"}, code: 2, stderr: []string{"--buffer", "not a size"}},
		{args: []string{"int", "hop", "--iface", "eth9", "--rate", "1gbit", "extra"}, code: 2, stderr: []string{"no arguments", "Run 'ccload int hop --help'"}},
		// The --help line names the whole command path.
		{args: []string{"int", "enable", "--bogus"}, code: 2, stderr: []string{"unknown flag", "Run 'ccload int enable --help'"}},
		{args: []string{"int", "status", "extra"}, code: 2, stderr: []string{"Run 'ccload int status --help'"}},
		{args: []string{"--bogus"}, code: 2, stderr: []string{"Run 'ccload --help'"}},
		// bench --keep-cpus-awake and its spinners.
		{args: []string{"spin"}, code: 2, stderr: []string{"--cpu -1", "give a CPU"}},
		{args: []string{"spin", "--cpu", "100000"}, code: 1, stderr: []string{"CPU 100000 is not one this process may run on"}},
		{args: []string{"bench", "--scenario", "onramp", "--keep-cpus-awake"}, code: 2, stderr: []string{"--keep-cpus-awake", "not --scenario onramp"}},
		{args: []string{"bench", "--scenario", "clock", "--keep-cpus-awake"}, code: 2, stderr: []string{"--keep-cpus-awake", "not --scenario clock"}},
		{args: []string{"bench", "--scenario", "onramp", "--response-conns", "pooled"}, code: 2, stderr: []string{`--response-conns "pooled"`, "persistent", "new"}},
		{args: []string{"bench", "--scenario", "incast", "--cc-param", "theta_powertcp=beta"}, code: 2, stderr: []string{`--cc-param "theta_powertcp=beta"`, "CC:NAME=VALUE"}},
		{args: []string{"bench", "--scenario", "clock", "--cc-param", "theta_powertcp:beta=600B"}, code: 2, stderr: []string{"--cc-param", "--scenario clock runs no CC"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			if tt.code == 1 && os.Geteuid() == 0 {
				requireNotRegistered(t, "theta_powertcp")
			}
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

// TestReportVerifierLog checks that a verifier rejection reaches the user
// with its whole log, and with the fix.
func TestReportVerifierLog(t *testing.T) {
	ve := &ebpf.VerifierError{Cause: unix.EACCES, Log: []string{"0: (b7) r0 = 0", "1: (95) exit", "R0 !read_ok"}}
	err := fmt.Errorf("attach powertcp: %w", kernel.LoadError("powertcp", ve))
	var b bytes.Buffer
	if code := report(&b, err); code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	for _, want := range []string{"the verifier rejected powertcp", "verifier log:", "0: (b7) r0 = 0", "R0 !read_ok", "fix:"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}

// TestTraceNotAttached checks that trace reports a CC that is not attached
// before it prints anything.
func TestTraceNotAttached(t *testing.T) {
	code, stdout, stderr := cli("--bpffs", t.TempDir(), "trace", "powertcp")
	if code != 1 || stdout != "" || !strings.Contains(stderr, "powertcp is not attached") || !strings.Contains(stderr, "fix: attach it first") {
		t.Fatalf("trace of a detached CC: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit 1, nothing on stdout, and the not-attached error with its fix", code, stdout, stderr)
	}
}

func TestHelpTeaches(t *testing.T) {
	code, out, _ := cli("attach", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"base_rtt", "gamma", "host_bw", "shift_g", "--default", "Example"} {
		if !strings.Contains(out, want) {
			t.Errorf("attach --help lacks %q", want)
		}
	}
}

func TestINTHopHelpTeaches(t *testing.T) {
	code, out, _ := cli("int", "hop", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"--off", "--foreground", "--duration", "pin", "exits 0", "ccload int status",
		"nsenter --net=", "ip netns exec", "Examples:", "ccload int hop --iface eth1 --off"} {
		if !strings.Contains(out, want) {
			t.Errorf("int hop --help lacks %q", want)
		}
	}
}

func requireNotRegistered(t *testing.T, name string) {
	t.Helper()
	if testutil.Registered(t, name) {
		t.Fatalf("%s is already registered; detach it before running the tests", name)
	}
}

// TestLifecycleJSON drives the whole cycle through the CLI with --json,
// as a config-management tool would.
func TestLifecycleJSON(t *testing.T) {
	testutil.RequireKernelCC(t, "theta_powertcp")
	// This test uses the default pin root, as a user does: remove the
	// root too if the test made it.
	root := kernel.DefaultHost().PinRoot()
	_, statErr := os.Stat(root)
	t.Cleanup(func() {
		cli("detach", "theta_powertcp")
		if os.IsNotExist(statErr) {
			os.Remove(root) // only when empty
		}
	})

	var status struct {
		OK     bool `json:"ok"`
		Checks []struct {
			Name string `json:"name"`
			OK   bool   `json:"ok"`
		} `json:"checks"`
	}
	decode(t, &status, "status", "--json")
	if !status.OK || len(status.Checks) < 4 {
		t.Fatalf("status: %+v", status)
	}

	var att struct {
		Name            string            `json:"name"`
		AlreadyAttached bool              `json:"already_attached"`
		Params          map[string]string `json:"params"`
	}
	decode(t, &att, "attach", "theta_powertcp", "-p", "base_rtt=30us", "--json")
	if att.AlreadyAttached || att.Params["base_rtt"] != "30us" {
		t.Fatalf("attach: %+v", att)
	}
	decode(t, &att, "attach", "theta_powertcp", "--json")
	if !att.AlreadyAttached {
		t.Fatalf("second attach: %+v", att)
	}
	code, out, _ := cli("attach", "theta_powertcp")
	if code != 0 || !strings.Contains(out, "already attached") {
		t.Fatalf("second attach says: %s", out)
	}

	var set struct {
		Params map[string]string `json:"params"`
	}
	decode(t, &set, "set", "theta_powertcp", "gamma=0.8", "--json")
	if set.Params["gamma"] != "0.8" || set.Params["base_rtt"] != "30us" {
		t.Fatalf("set: %+v", set)
	}

	var list struct {
		CCs []struct {
			Name     string            `json:"name"`
			Attached bool              `json:"attached"`
			Params   map[string]string `json:"params"`
		} `json:"ccs"`
		Kernel []string `json:"kernel_registered"`
	}
	decode(t, &list, "list", "--json")
	found := false
	for _, c := range list.CCs {
		if c.Name == "theta_powertcp" {
			found = c.Attached && c.Params["gamma"] == "0.8"
		}
	}
	if !found || !strings.Contains(strings.Join(list.Kernel, " "), "theta_powertcp") {
		t.Fatalf("list: %+v", list)
	}

	var det struct {
		WasAttached bool `json:"was_attached"`
	}
	decode(t, &det, "detach", "theta_powertcp", "--json")
	if !det.WasAttached {
		t.Fatalf("detach: %+v", det)
	}
	code, out, _ = cli("detach", "theta_powertcp")
	if code != 0 || !strings.Contains(out, "not attached") {
		t.Fatalf("second detach: exit %d, %s", code, out)
	}
}

func decode(t *testing.T, v any, args ...string) {
	t.Helper()
	code, out, stderr := cli(args...)
	if code != 0 {
		t.Fatalf("ccload %s: exit %d: %s", strings.Join(args, " "), code, stderr)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("ccload %s: output is not JSON: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestStatusCLI checks `ccload status` where ccload can run: it passes,
// as text and as JSON, and lists each optional feature with what needs it
// whether this kernel has it or not (sch_fq is missing on the project's
// host, and present in the vmtests guests).
func TestStatusCLI(t *testing.T) {
	testutil.RequireRoot(t)
	code, out, stderr := cli("status")
	if code != 0 {
		t.Fatalf("status: exit %d\n%s%s", code, out, stderr)
	}
	for _, want := range []string{"kernel BTF", "capabilities", "cgroup v2", "sch_fq", "needed by: ccload onramp enable"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	var st statusReport
	decode(t, &st, "status", "--json")
	if !st.OK {
		t.Errorf("status --json: ok is false: %+v", st)
	}
	optional := 0
	for _, c := range st.Checks {
		switch {
		case c.Unknown:
			t.Errorf("check %s could not tell, as root: %+v", c.Name, c)
		case c.Required && !c.OK:
			t.Errorf("required check %s failed, yet status passed", c.Name)
		case !c.Required:
			optional++
			if c.NeededBy == "" || (!c.OK && c.Fix == "") {
				t.Errorf("optional check %+v lacks what needs it, or a fix", c)
			}
		}
	}
	if optional != 2 {
		t.Errorf("status --json lists %d optional checks, want 2 (cgroup v2, sch_fq): %+v", optional, st.Checks)
	}
}

// TestMissingCapabilities runs the real binary as an unprivileged user:
// each command must name the missing capabilities before it touches
// anything.
func TestMissingCapabilities(t *testing.T) {
	testutil.RequireRoot(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		testutil.Skip(t, "setpriv (util-linux) is not installed")
	}
	bin := filepath.Join(t.TempDir(), "ccload")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	os.Chmod(filepath.Dir(bin), 0o755)
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"attach", "theta_powertcp"}, []string{"missing CAP_BPF", "CAP_PERFMON", "CAP_NET_ADMIN", "fix:"}},
		{[]string{"clock", "run", "--peers", "198.18.0.1", "--duration", "1s"}, []string{"missing CAP_BPF", "fix:"}},
		// Fails on the required capabilities; the sch_fq probe cannot
		// make its namespace, and says so with a fix.
		{[]string{"status"}, []string{"capabilities", "missing CAP_BPF", "probe for sch_fq", "needed by:", "run ccload status as root", "required checks failed"}},
		{[]string{"status", "--json"}, []string{`"name": "sch_fq"`, `"unknown": true`, `"ok": false`}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args[:min(2, len(tt.args))], "_"), func(t *testing.T) {
			args := append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", bin}, tt.args...)
			out, err := exec.Command(setpriv, args...).CombinedOutput()
			if err == nil {
				t.Fatalf("%s as nobody succeeded:\n%s", strings.Join(tt.args, " "), out)
			}
			for _, want := range tt.want {
				if !strings.Contains(string(out), want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

// hopCLIEnv is a netns pair and a bpffs of the test's own, on which the
// CLI runs as an operator would inside the pair's first netns.
type hopCLIEnv struct {
	pair  *testbed.Pair
	iface string // the veth of pair.A
	bpffs string
}

func newHopCLIEnv(t *testing.T) *hopCLIEnv {
	t.Helper()
	p := testnet.NewPair(t)
	e := &hopCLIEnv{pair: p, bpffs: t.TempDir()}
	// A bpffs instance of our own: unmounting it drops whatever pins the
	// test leaves, and the hops with them.
	if err := unix.Mount("bpf", e.bpffs, "bpf", 0, "mode=0700"); err != nil {
		t.Fatalf("mount bpffs at %s: %v", e.bpffs, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(e.bpffs, 0); err != nil {
			t.Errorf("unmount %s: %v", e.bpffs, err)
		}
	})
	var err error
	if e.iface, err = p.A.Interface(); err != nil {
		t.Fatalf("find the veth of %s: %v", p.A.Name, err)
	}
	return e
}

// cliIn runs ccload with --bpffs set to the test's bpffs inside h.
func (e *hopCLIEnv) cliIn(t *testing.T, h *testbed.Host, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	args = append([]string{"--bpffs", e.bpffs}, args...)
	if err := h.Do(func() error {
		code, stdout, stderr = cli(args...)
		return nil
	}); err != nil {
		t.Fatalf("enter %s: %v", h.Name, err)
	}
	return code, stdout, stderr
}

// TestINTHopCLI attaches a pinned hop through the CLI, lists it, refuses
// a second one, runs a foreground hop beside nothing, and removes it
// twice, as an SRE would.
func TestINTHopCLI(t *testing.T) {
	testutil.RequireFile(t, "/sys/kernel/btf/vmlinux", "kernel BTF (CONFIG_DEBUG_INFO_BTF)")
	e := newHopCLIEnv(t)
	a, iface := e.pair.A, e.iface
	t.Cleanup(func() { e.cliIn(t, a, "int", "hop", "--iface", iface, "--off") })

	code, out, stderr := e.cliIn(t, a, "int", "hop", "--iface", iface, "--rate", "1gbit", "--buffer", "256KiB", "--ecn-threshold", "30KB")
	if code != 0 {
		t.Fatalf("attach: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"INT hop attached to " + iface, "1gbit", "buffer 262144 B", "30000 B",
		"remove it with: ccload int hop --iface " + iface + " --off"} {
		if !strings.Contains(out, want) {
			t.Errorf("attach says %q, lacking %q", out, want)
		}
	}

	var status struct {
		Enabled bool `json:"enabled"`
		Hops    []struct {
			Iface        string `json:"iface"`
			Method       string `json:"method"`
			Attached     bool   `json:"attached"`
			Rate         string `json:"rate"`
			BufferBytes  uint32 `json:"buffer_bytes"`
			ECNThreshold uint32 `json:"ecn_threshold_bytes"`
			Stats        struct {
				Packets uint64 `json:"packets"`
			} `json:"stats"`
		} `json:"hops"`
	}
	code, out, stderr = e.cliIn(t, a, "int", "status", "--json")
	if code != 0 {
		t.Fatalf("int status --json: exit %d: %s", code, stderr)
	}
	if err := json.Unmarshal([]byte(out), &status); err != nil {
		t.Fatalf("int status --json is not JSON: %v\n%s", err, out)
	}
	if len(status.Hops) != 1 || status.Hops[0].Iface != iface || !status.Hops[0].Attached || status.Hops[0].Rate != "1gbit" ||
		status.Hops[0].BufferBytes != 256<<10 || status.Hops[0].ECNThreshold != 30000 || status.Hops[0].Method == "" {
		t.Errorf("int status --json: %s", out)
	}
	code, out, _ = e.cliIn(t, a, "int", "status")
	if code != 0 || !strings.Contains(out, "INT hops in this network namespace") || !strings.Contains(out, iface) {
		t.Errorf("int status: exit %d:\n%s", code, out)
	}
	code, out, _ = e.cliIn(t, e.pair.B, "int", "status", "--json")
	if code != 0 || !strings.Contains(out, `"hops": []`) {
		t.Errorf("int status in the other netns lists hops: exit %d:\n%s", code, out)
	}

	code, _, stderr = e.cliIn(t, a, "int", "hop", "--iface", iface, "--rate", "1gbit")
	if code != 1 || !strings.Contains(stderr, "already attached") || !strings.Contains(stderr, "fix: remove it first: ccload int hop --iface "+iface+" --off") {
		t.Errorf("second attach: exit %d:\n%s", code, stderr)
	}
	code, _, stderr = e.cliIn(t, a, "int", "hop", "--iface", iface, "--rate", "1gbit", "--foreground", "--duration", "1s")
	if code != 1 || !strings.Contains(stderr, "--off") {
		t.Errorf("foreground hop beside the pinned one: exit %d:\n%s", code, stderr)
	}

	for i, want := range []string{"INT hop removed from " + iface, "no INT hop on " + iface} {
		code, out, stderr = e.cliIn(t, a, "int", "hop", "--iface", iface, "--off")
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("--off #%d: exit %d, %q (stderr %q), want %q", i+1, code, out, stderr, want)
		}
	}
	if left, _ := os.ReadDir(filepath.Join(e.bpffs, "ccload", "hop")); len(left) != 0 {
		t.Errorf("--off left pins: %v", left)
	}

	// --duration implies --foreground: JSON lines, then the hop is gone.
	code, out, stderr = e.cliIn(t, a, "int", "hop", "--iface", iface, "--rate", "1gbit", "--duration", "1500ms", "--json")
	if code != 0 {
		t.Fatalf("foreground hop: exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var s struct {
		Packets *uint64 `json:"packets"`
	}
	if len(lines) == 0 || json.Unmarshal([]byte(lines[0]), &s) != nil || s.Packets == nil {
		t.Errorf("foreground hop printed %q, want JSON lines of counters", out)
	}
	code, out, _ = e.cliIn(t, a, "int", "status", "--json")
	if code != 0 || !strings.Contains(out, `"hops": []`) {
		t.Errorf("the foreground hop left a pinned hop: exit %d:\n%s", code, out)
	}
}
