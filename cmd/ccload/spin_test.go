package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/bench"
	"github.com/ccload/ccload/internal/testutil"
)

func TestSpinUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args   []string
		stderr []string
	}{
		{[]string{"spin"}, []string{"--cpu -1", "give 0 to"}},
		{[]string{"spin", "--cpu", "100000"}, []string{"--cpu 100000", "give 0 to"}},
		{[]string{"bench", "--scenario", "onramp", "--keep-cpus-awake"}, []string{"--keep-cpus-awake", "not --scenario onramp"}},
		{[]string{"bench", "--scenario", "clock", "--keep-cpus-awake"}, []string{"--keep-cpus-awake", "not --scenario clock"}},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, _, stderr := cli(tt.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
			}
			for _, want := range tt.stderr {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
		})
	}
}

// spinThread is the thread of process pid that runs at SCHED_IDLE, and
// the CPUs it may run on; ok is false while there is none.
func spinThread(pid int) (cpus unix.CPUSet, ok bool) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return cpus, false
	}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		if attr, err := unix.SchedGetAttr(tid, 0); err != nil || attr.Policy != unix.SCHED_IDLE {
			continue
		}
		if unix.SchedGetaffinity(tid, &cpus) == nil {
			return cpus, true
		}
	}
	return cpus, false
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
		if cpus, ok = spinThread(c.Process.Pid); !ok {
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
	bin, env := selfAsCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, bin, "bench", "--scenario", "longflow", "--quick", "--cc", "theta_powertcp",
		"--keep-cpus-awake", "--control-plane-runs", "0", "--json")
	c.Env = env
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

	// The bench stops its spinners (and Pdeathsig would, had it died): no process of this binary
	// running `spin` may be left.
	procs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("list processes: %v", err)
	}
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
			t.Errorf("spinner %d (%q) outlived the bench", pid, args)
		}
	}
}
