package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/metrics/promtest"
	"github.com/ccload/ccload/testbed"
)

// daemonEnv runs the real ccload binary, the daemon and the CLI, inside a
// network namespace of the test's own and on a bpffs of its own, as an SRE
// would on a host.
type daemonEnv struct {
	bin, bpffs, config string
	env                []string // makes bin run as ccload
	ns, peer           *testbed.Host
	metrics            string // the daemon's --metrics-addr, in ns
}

func newDaemonEnv(t *testing.T) *daemonEnv {
	t.Helper()
	testutil.RequireKernelCC(t, "theta_powertcp", "bpf_dctcp", "hpcc")
	p := testnet.NewPair(t)
	e := &daemonEnv{ns: p.A, peer: p.B, bpffs: t.TempDir(), metrics: "127.0.0.1:19810"}
	e.bin, e.env = selfAsCLI(t)
	if err := unix.Mount("bpf", e.bpffs, "bpf", 0, "mode=0700"); err != nil {
		t.Fatalf("mount bpffs at %s: %v", e.bpffs, err)
	}
	e.config = filepath.Join(t.TempDir(), "config.yaml")
	t.Cleanup(func() {
		// Whatever the test left: reset, then drop the bpffs, which
		// unregisters anything reset could not.
		if out, err := e.cmd(context.Background(), "reset").CombinedOutput(); err != nil {
			t.Errorf("reset: %v\n%s", err, out)
		}
		if err := unix.Unmount(e.bpffs, 0); err != nil {
			t.Errorf("unmount %s: %v", e.bpffs, err)
		}
	})
	return e
}

func (e *daemonEnv) cmd(ctx context.Context, args ...string) *exec.Cmd {
	args = append([]string{"--bpffs", e.bpffs}, args...)
	var c *exec.Cmd
	if e.ns == nil {
		c = exec.CommandContext(ctx, e.bin, args...)
	} else {
		c = e.ns.Command(ctx, e.bin, args...)
	}
	c.Env = e.env
	return c
}

// cli runs a ccload command in the namespace and fails the test if it
// fails.
func (e *daemonEnv) cli(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := e.cmd(ctx, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ccload %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (e *daemonEnv) writeConfig(t *testing.T, text string) {
	t.Helper()
	// Replace the file in one step, as kubelet swaps a ConfigMap.
	tmp := e.config + ".new"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, e.config); err != nil {
		t.Fatal(err)
	}
}

// ccState is one CC of `ccload list --json`.
type ccState struct {
	Name     string            `json:"name"`
	Attached bool              `json:"attached"`
	Params   map[string]string `json:"params"`
}

func (e *daemonEnv) list(t *testing.T) map[string]ccState {
	t.Helper()
	var list struct {
		CCs []ccState `json:"ccs"`
	}
	if err := json.Unmarshal([]byte(e.cli(t, "list", "--json")), &list); err != nil {
		t.Fatalf("decode ccload list --json: %v", err)
	}
	out := map[string]ccState{}
	for _, c := range list.CCs {
		out[c.Name] = c
	}
	return out
}

// daemon is a running `ccload daemon`.
type daemonProc struct {
	cmd  *exec.Cmd
	log  *testutil.Buffer
	done chan error
}

func (e *daemonEnv) startDaemon(t *testing.T, extra ...string) *daemonProc {
	t.Helper()
	args := append([]string{"daemon", "--config", e.config, "--metrics-addr", e.metrics}, extra...)
	d := &daemonProc{cmd: e.cmd(context.Background(), args...), log: &testutil.Buffer{}, done: make(chan error, 1)}
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start the daemon: %v", err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			_ = d.cmd.Process.Kill()
			<-d.done
		}
	})
	return d
}

// stop sends SIGTERM and waits for the daemon to exit.
func (d *daemonProc) stop(t *testing.T) {
	t.Helper()
	// nsenter passes the signal on to the daemon it runs.
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM the daemon: %v", err)
	}
	select {
	case err := <-d.done:
		if err != nil {
			t.Fatalf("the daemon exited with %v:\n%s", err, d.log)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the daemon did not stop within 30 s of SIGTERM:\n%s", d.log)
	}
}

// get fetches path from the daemon's endpoint inside the namespace.
func (e *daemonEnv) get(path string) (int, string, error) {
	var code int
	var body string
	do := func(f func() error) error { return f() }
	if e.ns != nil {
		do = e.ns.Do
	}
	err := do(func() error {
		// Dialled on this goroutine, whose thread is in the namespace.
		conn, err := net.DialTimeout("tcp", e.metrics, 2*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "GET %s HTTP/1.0\r\nHost: ccload\r\n\r\n", path)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		code, body = resp.StatusCode, string(b)
		return err
	})
	return code, body, err
}

// waitUntil polls cond every 100 ms for up to 30 s.
func (d *daemonProc) waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 300; i++ {
		if cond() {
			return
		}
		select {
		case err := <-d.done:
			t.Fatalf("the daemon exited (%v) while waiting until %s:\n%s", err, what, d.log)
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("not %s after 30 s; daemon log:\n%s", what, d.log)
}

func (e *daemonEnv) waitReady(t *testing.T, d *daemonProc) {
	t.Helper()
	d.waitUntil(t, "ready", func() bool {
		code, _, err := e.get("/readyz")
		return err == nil && code == http.StatusOK
	})
}

func (e *daemonEnv) netnsDefault(t *testing.T) string {
	t.Helper()
	var def string
	if err := e.ns.Do(func() error {
		b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
		def = strings.TrimSpace(string(b))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return def
}

// watchRegistered reads tcp_available_congestion_control every
// millisecond until the returned function is called, which returns how
// many reads lacked name.
func watchRegistered(name string) (missed func() int) {
	stop, done := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				done <- n
				return
			default:
			}
			if !registered(name) {
				n++
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return func() int {
		close(stop)
		return <-done
	}
}

func registered(name string) bool {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	return err == nil && strings.Contains(" "+strings.TrimSpace(string(b))+" ", " "+name+" ")
}

// TestDaemon runs the daemon as a fleet would: it attaches what its
// config names, puts back what is changed or removed by hand, leaves the
// CLI's own state alone, follows a changed config, survives a restart
// without registering anything again, and leaves everything pinned when
// it stops.
func TestDaemon(t *testing.T) {
	e := newDaemonEnv(t)
	iface, err := e.ns.Interface()
	if err != nil {
		t.Fatal(err)
	}
	config := `ccs:
  - name: theta_powertcp
    params:
      base_rtt: 20us
      host_bw: 1gbit
  - name: bpf_dctcp
default: theta_powertcp
int:
  peers: [198.18.0.0/15]
  slots: 1
hops:
  - iface: ` + iface + `
    rate: 1gbit
reconcile-interval: 1h
clock:
  peers: [` + e.peer.Addr.String() + `]
  port: 3199
`
	e.writeConfig(t, config)

	plan := e.cli(t, "daemon", "--config", e.config, "--dry-run")
	for _, want := range []string{"attach theta_powertcp", "attach bpf_dctcp", "default theta_powertcp", "int-enable int", "nothing was changed"} {
		if !strings.Contains(plan, want) {
			t.Errorf("--dry-run says:\n%s\nlacking %q", plan, want)
		}
	}
	if registered("theta_powertcp") {
		t.Fatal("--dry-run registered theta_powertcp")
	}

	d := e.startDaemon(t)
	e.waitReady(t, d)
	ccs := e.list(t)
	if !ccs["theta_powertcp"].Attached || !ccs["bpf_dctcp"].Attached {
		t.Fatalf("after the first reconcile: %+v", ccs)
	}
	if got := ccs["theta_powertcp"].Params["base_rtt"]; got != "20us" {
		t.Errorf("base_rtt is %s, config says 20us", got)
	}
	if def := e.netnsDefault(t); def != "theta_powertcp" {
		t.Errorf("the namespace's default CC is %s", def)
	}
	if !strings.Contains(e.cli(t, "int", "status"), "198.18.0.0/15") {
		t.Error("INT is not enabled for 198.18.0.0/15")
	}
	if !strings.Contains(d.log.String(), "clock agent on UDP [::]:3199") {
		t.Errorf("the clock agent did not start:\n%s", d.log)
	}

	// Drift, a CC detached by hand, and a CC of the CLI's own.
	e.cli(t, "set", "theta_powertcp", "base_rtt=50us")
	e.cli(t, "detach", "bpf_dctcp")
	e.cli(t, "attach", "hpcc")
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	d.waitUntil(t, "reconciled after SIGHUP", func() bool {
		ccs := e.list(t)
		return ccs["bpf_dctcp"].Attached && ccs["theta_powertcp"].Params["base_rtt"] == "20us"
	})
	if !e.list(t)["hpcc"].Attached {
		t.Error("the daemon removed hpcc, which the CLI attached and the config does not name")
	}

	// A changed config: bpf_dctcp goes, hpcc (the CLI's) stays.
	e.writeConfig(t, strings.Replace(config, "  - name: bpf_dctcp\n", "", 1))
	d.waitUntil(t, "bpf_dctcp detached after the config dropped it", func() bool { return !e.list(t)["bpf_dctcp"].Attached })
	if !e.list(t)["hpcc"].Attached {
		t.Error("the daemon removed hpcc after a config change")
	}

	// A broken config is refused and the last good one kept.
	e.writeConfig(t, config+"onramp: [{iface: lo, peers: [10.0.0.0/8], max-pause: soon}]\n")
	d.waitUntil(t, "unready with a broken config", func() bool {
		code, body, err := e.get("/readyz")
		return err == nil && code == http.StatusServiceUnavailable && strings.Contains(body, "onramp[0].max-pause")
	})
	if !e.list(t)["theta_powertcp"].Attached {
		t.Error("a broken config removed theta_powertcp")
	}
	e.writeConfig(t, strings.Replace(config, "  - name: bpf_dctcp\n", "", 1))
	e.waitReady(t, d)

	_, metrics, err := e.get("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ccload_reconcile_runs_total", `ccload_reconcile_actions_total{kind="attach"}`, "ccload_config_valid 1"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if code, _, err := e.get("/healthz"); err != nil || code != http.StatusOK {
		t.Errorf("/healthz: %d %v", code, err)
	}

	// Restart: nothing may leave tcp_available_congestion_control, and
	// the new daemon registers nothing again.
	missed := watchRegistered("theta_powertcp")
	d.stop(t)
	if !registered("theta_powertcp") {
		t.Fatal("theta_powertcp left the kernel when the daemon stopped")
	}
	d2 := e.startDaemon(t)
	e.waitReady(t, d2)
	if missing := missed(); missing > 0 {
		t.Errorf("theta_powertcp was missing from tcp_available_congestion_control %d times across the restart", missing)
	}
	if strings.Contains(d2.log.String(), "reconcile: attach") {
		t.Errorf("the restarted daemon attached again:\n%s", d2.log)
	}
	if def := e.netnsDefault(t); def != "theta_powertcp" {
		t.Errorf("after the restart the default CC is %s", def)
	}

	// A newer build (the DaemonSet rolled a new image): the CC, the INT
	// sockops program and the hop are swapped in place, and the CC's name
	// never leaves the kernel.
	missed = watchRegistered("theta_powertcp")
	d2.stop(t)
	up := e.startDaemon(t, "--build-version", "7")
	e.waitReady(t, up)
	if missing := missed(); missing > 0 && slices.Contains(testutil.Registrations(t), kernel.RegLink) {
		t.Errorf("theta_powertcp was missing %d times across the upgrade, on a kernel with struct_ops links", missing)
	}
	for _, want := range []string{"reconcile: upgrade theta_powertcp",
		"reconcile: int-enable int: the sockops program was built from another object", "reconcile: hop-upgrade " + iface} {
		if !strings.Contains(up.log.String(), want) {
			t.Errorf("the newer daemon's log lacks %q:\n%s", want, up.log)
		}
	}
	if gens := e.cli(t, "list", "--json"); !strings.Contains(gens, `"generation": 2`) {
		t.Errorf("ccload list shows no generation 2 after the upgrade:\n%s", gens)
	}
	up.stop(t)

	// --cleanup-on-exit: SIGTERM removes what ccload owns.
	d3 := e.startDaemon(t, "--cleanup-on-exit")
	e.waitReady(t, d3)
	d3.stop(t)
	if registered("theta_powertcp") || registered("hpcc") {
		t.Errorf("--cleanup-on-exit left CCs registered: %s", d3.log)
	}
	if def := e.netnsDefault(t); def == "theta_powertcp" {
		t.Error("--cleanup-on-exit left the default naming a detached CC")
	}
}

// TestDaemonBadConfig: a daemon started with a broken config exits at once
// with the file, line and key.
func TestDaemonBadConfig(t *testing.T) {
	e := newDaemonEnv(t)
	e.writeConfig(t, "ccs:\n  - name: theta_powertcp\n    params:\n      gamma: 7\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := e.cmd(ctx, "daemon", "--config", e.config, "--metrics-addr", "").CombinedOutput()
	if err == nil {
		t.Fatalf("the daemon accepted a broken config:\n%s", out)
	}
	for _, want := range []string{e.config + ":4: ccs[0].params.gamma", "fix:"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the error says:\n%s\nlacking %q", out, want)
		}
	}
	if registered("theta_powertcp") {
		t.Error("a broken config registered theta_powertcp")
	}
}

// TestDaemonOnRamp: the daemon turns On-Ramp on for an interface its config
// names, with an INT hop beside it, and off again when the config drops
// them. It needs sch_fq, so it runs in the vmtests guests.
func TestDaemonOnRamp(t *testing.T) {
	e := newDaemonEnv(t)
	iface, err := e.ns.Interface()
	if err != nil {
		t.Fatal(err)
	}
	config := `ccs:
  - name: theta_powertcp
reconcile-interval: 1h
`
	e.writeConfig(t, config+`onramp:
  - iface: `+iface+`
    peers: [198.18.0.0/15]
    threshold: 200us
hops:
  - iface: `+iface+`
    rate: 1gbit
`)
	d := e.startDaemon(t)
	d.waitUntil(t, "reconciled", func() bool {
		_, body, err := e.get("/readyz")
		return err == nil && (strings.HasPrefix(body, "ok") || strings.Contains(body, "CONFIG_NET_SCH_FQ"))
	})
	if _, body, _ := e.get("/readyz"); strings.Contains(body, "CONFIG_NET_SCH_FQ") {
		testutil.SkipKernelLacks(t, "sch_fq")
	}
	var st []struct {
		Iface    string `json:"iface"`
		Attached bool   `json:"attached"`
		Settings struct {
			ThresholdNs uint64 `json:"threshold_ns"`
		} `json:"settings"`
	}
	if err := json.Unmarshal([]byte(e.cli(t, "onramp", "status", "--json")), &st); err != nil {
		t.Fatalf("decode onramp status --json: %v", err)
	}
	if len(st) != 1 || st[0].Iface != iface || !st[0].Attached || st[0].Settings.ThresholdNs != 200_000 {
		t.Fatalf("On-Ramp after the first reconcile: %+v", st)
	}
	if !strings.Contains(e.cli(t, "int", "status"), iface) {
		t.Errorf("the INT hop on %s is not listed", iface)
	}

	// A newer build swaps On-Ramp's and the hop's programs in place.
	d.stop(t)
	d = e.startDaemon(t, "--build-version", "7")
	e.waitReady(t, d)
	for _, want := range []string{"reconcile: onramp-enable " + iface + ": On-Ramp was built from another object",
		"reconcile: hop-upgrade " + iface} {
		if !strings.Contains(d.log.String(), want) {
			t.Errorf("the newer daemon's log lacks %q:\n%s", want, d.log)
		}
	}

	e.writeConfig(t, config)
	d.waitUntil(t, "On-Ramp and the hop removed after the config dropped them", func() bool {
		return strings.TrimSpace(e.cli(t, "onramp", "status", "--json")) == "[]" && !strings.Contains(e.cli(t, "int", "status"), iface)
	})
	d.stop(t)
}

// TestDaemonOnRampObserve: the daemon runs On-Ramp in observe mode from
// its config, on any kernel (it needs no fq: this host has none). Turning
// the pauses on in the config needs sch_fq: on a kernel without it the
// daemon reports the missing module and leaves On-Ramp observing; on one
// with it, On-Ramp pauses on fq. Dropping On-Ramp from the config removes it.
func TestDaemonOnRampObserve(t *testing.T) {
	e := newDaemonEnv(t)
	iface, err := e.ns.Interface()
	if err != nil {
		t.Fatal(err)
	}
	config := `ccs:
  - name: theta_powertcp
reconcile-interval: 1h
`
	onrampConfig := func(observe bool) string {
		return fmt.Sprintf("onramp:\n  - iface: %s\n    peers: [198.18.0.0/15]\n    threshold: 200us\n    observe: %v\n", iface, observe)
	}
	type status struct {
		Iface    string `json:"iface"`
		Attached bool   `json:"attached"`
		Qdisc    *struct {
			Kind string `json:"kind"`
		} `json:"qdisc"`
		Settings struct {
			Observe bool `json:"observe"`
		} `json:"settings"`
	}
	read := func() []status {
		t.Helper()
		var st []status
		if err := json.Unmarshal([]byte(e.cli(t, "onramp", "status", "--json")), &st); err != nil {
			t.Fatalf("decode onramp status --json: %v", err)
		}
		return st
	}
	e.writeConfig(t, config+onrampConfig(true))
	d := e.startDaemon(t)
	e.waitReady(t, d)
	if st := read(); len(st) != 1 || st[0].Iface != iface || !st[0].Attached || !st[0].Settings.Observe || st[0].Qdisc != nil {
		t.Fatalf("On-Ramp after the first reconcile, observing: %+v", st)
	}

	e.writeConfig(t, config+onrampConfig(false))
	d.waitUntil(t, "the pauses on, or the missing sch_fq reported", func() bool {
		_, body, err := e.get("/readyz")
		if err != nil {
			return false
		}
		if strings.Contains(body, "CONFIG_NET_SCH_FQ") {
			return true
		}
		st := read()
		return len(st) == 1 && !st[0].Settings.Observe
	})
	st := read()
	if _, body, _ := e.get("/readyz"); strings.Contains(body, "CONFIG_NET_SCH_FQ") {
		if len(st) != 1 || !st[0].Attached || !st[0].Settings.Observe {
			t.Errorf("without sch_fq, On-Ramp should keep observing: %+v", st)
		}
	} else if len(st) != 1 || !st[0].Attached || st[0].Qdisc == nil || !strings.HasSuffix(st[0].Qdisc.Kind, "fq") {
		t.Errorf("On-Ramp with the pauses on: %+v; want attached, on fq", st)
	}

	e.writeConfig(t, config)
	d.waitUntil(t, "On-Ramp removed after the config dropped it", func() bool {
		return strings.TrimSpace(e.cli(t, "onramp", "status", "--json")) == "[]"
	})
	d.stop(t)
}

// TestDaemonPrometheus points a real Prometheus server (Debian's
// prometheus package) at a daemon in this network namespace and gets a
// ccload_ series back with a non-zero value; promtool checks what the
// daemon serves.
func TestDaemonPrometheus(t *testing.T) {
	testutil.RequireKernelCC(t, "theta_powertcp")
	e := &daemonEnv{bpffs: t.TempDir(), metrics: "127.0.0.1:0"}
	e.bin, e.env = selfAsCLI(t)
	if err := unix.Mount("bpf", e.bpffs, "bpf", 0, "mode=0700"); err != nil {
		t.Fatalf("mount bpffs at %s: %v", e.bpffs, err)
	}
	t.Cleanup(func() {
		if out, err := e.cmd(context.Background(), "reset").CombinedOutput(); err != nil {
			t.Errorf("reset: %v\n%s", err, out)
		}
		if err := unix.Unmount(e.bpffs, 0); err != nil {
			t.Errorf("unmount %s: %v", e.bpffs, err)
		}
	})
	e.config = filepath.Join(t.TempDir(), "config.yaml")
	// Nothing host-wide beyond the CC itself: no default, no INT.
	e.writeConfig(t, "ccs:\n  - name: theta_powertcp\n")
	d := e.startDaemon(t)
	var addr string
	d.waitUntil(t, "serving", func() bool {
		for _, line := range strings.Split(d.log.String(), "\n") {
			if _, a, ok := strings.Cut(line, "/readyz on "); ok {
				addr = strings.TrimSpace(a)
				return true
			}
		}
		return false
	})
	e.metrics = addr
	d.waitUntil(t, "ready", func() bool {
		code, _, err := e.get("/readyz")
		return err == nil && code == http.StatusOK
	})

	_, text, err := e.get("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if promtool, err := exec.LookPath("promtool"); err != nil {
		testutil.Skip(t, "promtool is not installed (Debian package prometheus)")
	} else {
		check := exec.Command(promtool, "check", "metrics")
		check.Stdin = strings.NewReader(text)
		if out, err := check.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	}

	srv := promtest.Run(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, q := range []string{`ccload_cc_attached{cc="theta_powertcp"}`, "ccload_reconcile_runs_total"} {
		v, err := srv.Wait(ctx, q, func(v float64) bool { return v > 0 })
		if err != nil {
			t.Fatalf("Prometheus never returned %s > 0: %v\n%s", q, err, srv.Log())
		}
		t.Logf("Prometheus: %s = %g", q, v)
	}
	d.stop(t)
}
