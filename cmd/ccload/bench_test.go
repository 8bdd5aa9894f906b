package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/bench"
	"github.com/ccload/ccload/internal/testutil"
)

// benchProcess is `ccload bench --scenario longflow --cc theta_powertcp
// --control-plane-runs 0` and args, as a process of this test binary
// (selfAsCLI) that is killed if it runs past three minutes; it returns
// the binary's path too.
func benchProcess(t *testing.T, args ...string) (string, *exec.Cmd) {
	t.Helper()
	bin, env := selfAsCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	c := exec.CommandContext(ctx, bin, append([]string{"bench", "--scenario", "longflow", "--cc", "theta_powertcp",
		"--control-plane-runs", "0"}, args...)...)
	c.Env = env
	return bin, c
}

// TestSpin runs one spinner of `bench --keep-cpus-awake` as a process and
// checks that it spins at SCHED_IDLE on the CPU it was given, and that it
// stops on SIGTERM. It needs no privilege: any process may lower its own
// policy.
func TestSpin(t *testing.T) {
	bin, env := selfAsCLI(t)
	cpu := 0
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, bin, bench.SpinArgs(cpu)...)
	c.Env = env
	var stderr testutil.Buffer
	c.Stderr = &stderr
	if err := c.Start(); err != nil {
		t.Fatalf("start the spinner: %v", err)
	}
	defer func() { _ = c.Process.Kill(); _ = c.Wait() }()

	var (
		cpus unix.CPUSet
		ok   bool
	)
	for deadline := time.Now().Add(10 * time.Second); !ok && time.Now().Before(deadline); {
		tid, found, err := bench.SpinningThread(c.Process.Pid)
		if err != nil {
			t.Fatalf("find the spinning thread: %v; stderr:\n%s", err, stderr.String())
		}
		if ok = found && unix.SchedGetaffinity(tid, &cpus) == nil; !ok {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if !ok {
		t.Fatalf("no thread of the spinner runs at SCHED_IDLE after 10s; stderr:\n%s", stderr.String())
	}
	if cpus.Count() != 1 || !cpus.IsSet(cpu) {
		t.Errorf("the spinning thread may run on %d CPUs (CPU %d: %v), want CPU %d alone", cpus.Count(), cpu, cpus.IsSet(cpu), cpu)
	}
	if err := c.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM the spinner: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the spinner exited with %v after SIGTERM; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Errorf("the spinner still runs 10s after SIGTERM")
	}
}

// TestBenchKeepCPUsAwake runs a quick longflow bench with
// --keep-cpus-awake as a process, as a user would, and checks that the
// results say so, that the per-ACK cost was still measured, and that no
// spinner outlives the bench.
func TestBenchKeepCPUsAwake(t *testing.T) {
	testutil.RequireRoot(t)
	bin, c := benchProcess(t, "--quick", "--keep-cpus-awake", "--json")
	var stdout, stderr testutil.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		t.Fatalf("bench: %v; stderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "keeping") || !strings.Contains(stderr.String(), "SCHED_IDLE spinner") {
		t.Errorf("progress does not say the CPUs were kept awake:\n%s", stderr.String())
	}
	var res bench.Results
	if err := json.Unmarshal([]byte(stdout.String()), &res); err != nil {
		t.Fatalf("decode the results: %v\n%s", err, stdout.String())
	}
	if !res.Machine.CPUsKeptAwake {
		t.Errorf("results: machine %+v, want cpus_kept_awake", res.Machine)
	}
	if len(res.CCs) != 1 || len(res.CCs[0].Runs) != 1 || res.CCs[0].Runs[0].Cost == nil {
		t.Fatalf("results: want one run of theta_powertcp with its per-ACK cost, got %+v", res.CCs)
	}

	if left := spinners(t, bin); len(left) > 0 {
		t.Errorf("spinners outlived the bench: processes %v", left)
	}
}

// spinners are the processes of bin running `spin`.
func spinners(t *testing.T, bin string) []int {
	t.Helper()
	procs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("list processes: %v", err)
	}
	var pids []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if len(args) > 1 && args[0] == bin && args[1] == bench.SpinCommand {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestBenchKeepCPUsAwakeSpinnerKilled kills a spinner while the bench
// runs: the bench must fail and say so, since its costs were no longer
// all measured on awake CPUs, and leave no spinner behind.
func TestBenchKeepCPUsAwakeSpinnerKilled(t *testing.T) {
	testutil.RequireRoot(t)
	bin, c := benchProcess(t, "--quick", "--keep-cpus-awake")
	var out testutil.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Start(); err != nil {
		t.Fatalf("start the bench: %v", err)
	}
	// Kill one once the bench says they all spin, so that the kill falls
	// in the run and not in their start.
	var pids []int
	for deadline := time.Now().Add(time.Minute); len(pids) == 0 && time.Now().Before(deadline); {
		if strings.Contains(out.String(), "keeping") {
			pids = spinners(t, bin)
		}
		if len(pids) == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if len(pids) == 0 {
		_ = c.Process.Kill()
		_ = c.Wait()
		t.Fatalf("no spinner appeared within a minute; output:\n%s", out.String())
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatalf("kill spinner %d: %v", pids[0], err)
	}
	err := c.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(out.String(), "exited before the bench was done") {
		t.Errorf("bench after a spinner was killed: %v, want exit 1 naming the spinner; output:\n%s", err, out.String())
	}
	if left := spinners(t, bin); len(left) > 0 {
		t.Errorf("spinners outlived the bench: processes %v", left)
	}
}

// TestBenchStopsOnClosedPipe runs `ccload bench | head -1`: when the
// reader goes away, the bench must end its run and remove its netns,
// pins and CCs, not die on SIGPIPE with them in place.
func TestBenchStopsOnClosedPipe(t *testing.T) {
	testutil.RequireRoot(t)
	netnsBefore, _ := os.ReadDir("/run/netns")
	_, c := benchProcess(t, "--duration", "20s")
	var stderr testutil.Buffer
	c.Stderr = &stderr
	stdout, err := c.StdoutPipe()
	if err != nil {
		t.Fatalf("stdout pipe: %v", err)
	}
	if err := c.Start(); err != nil {
		t.Fatalf("start the bench: %v", err)
	}
	// Should the bench fail to clean up, the test does: its pin root (which
	// unregisters its CCs) and the netns that appeared while it ran.
	t.Cleanup(func() {
		_ = os.RemoveAll(fmt.Sprintf("/sys/fs/bpf/ccload-bench-%d", c.Process.Pid))
		after, _ := os.ReadDir("/run/netns")
		for _, ns := range after {
			if !slices.ContainsFunc(netnsBefore, func(e os.DirEntry) bool { return e.Name() == ns.Name() }) {
				if out, err := exec.Command("ip", "netns", "del", ns.Name()).CombinedOutput(); err != nil {
					t.Errorf("remove netns %s the bench left: %v %s", ns.Name(), err, out)
				}
			}
		}
	})
	// Leave once the run has begun: its netns, hop and CC are in place.
	lines := bufio.NewScanner(stdout)
	for lines.Scan() && !strings.HasPrefix(lines.Text(), "[1/1]") {
	}
	if !strings.HasPrefix(lines.Text(), "[1/1]") {
		t.Fatalf("the bench ended before its run began: %v; stderr:\n%s", lines.Err(), stderr.String())
	}
	start := time.Now()
	if err := stdout.Close(); err != nil {
		t.Fatalf("close the pipe: %v", err)
	}
	err = c.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("bench after its reader left: %v, want exit 1 (a signal means it died without cleaning up); stderr:\n%s", err, stderr.String())
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("the bench took %v to stop after its reader left", d)
	}
	if _, err := os.Stat(fmt.Sprintf("/sys/fs/bpf/ccload-bench-%d", c.Process.Pid)); !os.IsNotExist(err) {
		t.Errorf("the bench's pin root is still there (%v)", err)
	}
	if testutil.Registered(t, "theta_powertcp") {
		t.Errorf("theta_powertcp is still registered after the bench")
	}
	netnsAfter, _ := os.ReadDir("/run/netns")
	if len(netnsAfter) > len(netnsBefore) {
		t.Errorf("netns left behind: %d before the bench, %d after", len(netnsBefore), len(netnsAfter))
	}
}

func TestApplySenderRate(t *testing.T) {
	tests := []struct {
		in        string
		rate      uint64
		unlimited bool
		err       string
	}{
		{in: ""},
		{in: "none", unlimited: true},
		{in: "100mbit", rate: 100_000_000},
		{in: "1gbit", rate: 1_000_000_000},
		{in: "0", err: "needs a unit"},
		{in: "0mbit", err: "above 0"},
		{in: "fast", err: "want a rate such as 100mbit, or none"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var cfg bench.OnRampConfig
			err := applySenderRate(&cfg, tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "--sender-rate") {
					t.Fatalf("applySenderRate(%q) = %v, want an error naming --sender-rate and containing %q", tt.in, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.SenderRateBps != tt.rate || cfg.UnlimitedSenders != tt.unlimited {
				t.Errorf("applySenderRate(%q): rate %d, unlimited %v; want %d, %v", tt.in, cfg.SenderRateBps, cfg.UnlimitedSenders, tt.rate, tt.unlimited)
			}
		})
	}
}
