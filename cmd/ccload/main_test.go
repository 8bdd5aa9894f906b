package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ccload/ccload/internal/testutil"
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

func requireNotRegistered(t *testing.T, name string) {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range strings.Fields(string(b)) {
		if n == name {
			t.Fatalf("%s is already registered; detach it before running the tests", name)
		}
	}
}

// TestLifecycleJSON drives the whole cycle through the CLI with --json,
// as a config-management tool would.
func TestLifecycleJSON(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/sys/kernel/btf/vmlinux", "kernel BTF (CONFIG_DEBUG_INFO_BTF)")
	requireNotRegistered(t, "theta_powertcp")
	t.Cleanup(func() { cli("detach", "theta_powertcp") })

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

// TestMissingCapabilities runs the real binary as an unprivileged user.
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
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
		bin, "attach", "theta_powertcp")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("attach as nobody succeeded:\n%s", out)
	}
	for _, want := range []string{"missing CAP_BPF", "CAP_PERFMON", "CAP_NET_ADMIN", "fix:"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
