package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// On a virtual machine an idle vCPU halts, and the hypervisor may run
// something else on its core until the next interrupt. Every ACK that
// wakes such a vCPU then runs the CC's program, and the kernel's TCP code
// around it, on cold caches, and the per-ACK cost the bench reports is as
// much the wake-up as the program. A busy server's CPUs don't halt.
// Config.KeepCPUsAwake measures that case: one spinner process per CPU,
// at SCHED_IDLE, keeps every CPU out of idle while yielding to anything
// else that wants it, the bench's own threads and softirqs included.
//
// The spinners are processes of their own (`ccload spin`, SpinArgs), not
// goroutines: a spinning goroutine would hold one of the Go scheduler's Ps
// and take turns with the bench's own goroutines, whatever its thread's
// Linux policy.

// SpinCommand is the hidden ccload subcommand that runs Spin.
const SpinCommand = "spin"

// SpinArgs are the arguments of exe that run one spinner on cpu.
func SpinArgs(cpu int) []string { return []string{SpinCommand, "--cpu", strconv.Itoa(cpu)} }

// Spin keeps cpu busy at SCHED_IDLE until ctx ends: the body of one
// spinner process. It returns an error if it cannot pin itself to cpu or
// lower its policy, so that it never spins at normal priority.
func Spin(ctx context.Context, cpu int) error {
	allowed, err := allowedCPUs()
	if err != nil {
		return err
	}
	if !slices.Contains(allowed, cpu) {
		return fmt.Errorf("CPU %d is not one this process may run on (%v)", cpu, allowed)
	}
	// The thread stays locked when Spin returns: its policy and CPU must
	// not pass to other goroutines (the process exits right after).
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin the spinner to CPU %d: %w", cpu, err)
	}
	if err := unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}, 0); err != nil {
		return fmt.Errorf("set the spinner on CPU %d to SCHED_IDLE: %w", cpu, err)
	}
	done := ctx.Done()
	for {
		select {
		case <-done:
			return nil
		default:
		}
	}
}

// spinnerStartWait bounds how long keepCPUsAwake waits for a spinner to
// report that it runs at SCHED_IDLE.
const spinnerStartWait = 5 * time.Second

// allowedCPUs are the CPUs this process may run on, in order: the ones
// to keep awake (a container's cpuset may leave out some of the host's).
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("read the CPUs this process may run on: %w", err)
	}
	var cpus []int
	for cpu := range len(set) * 64 {
		if set.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	if len(cpus) == 0 {
		return nil, errors.New("this process may run on no CPU")
	}
	return cpus, nil
}

// keepCPUsAwake starts one spinner (exe spin --cpu N) on each of cpus and returns
// a function that stops them all, and fails if one of them died before
// it. It checks that each one runs at SCHED_IDLE before it returns; on any
// failure it stops those it started. The spinners die with the bench if
// it is killed (Pdeathsig). Pdeathsig fires when the thread that started
// a child exits, and the Go runtime ends threads of its own accord (the
// netns code ends the ones it cannot switch back), so the spinners are
// started from a thread locked to a goroutine that lives until stop.
func keepCPUsAwake(exe string, cpus []int) (stop func() error, err error) {
	started := make(chan error, 1)
	stopping := make(chan chan error)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cmds, err := startSpinners(exe, cpus)
		started <- err
		if err != nil {
			return
		}
		reply := <-stopping
		reply <- stopSpinners(cmds)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	var once sync.Once
	var stopErr error
	return func() error {
		once.Do(func() {
			reply := make(chan error)
			stopping <- reply
			stopErr = <-reply
		})
		return stopErr
	}, nil
}

// startSpinners starts the spinners and waits until each spins at
// SCHED_IDLE; on failure it stops those it started.
func startSpinners(exe string, cpus []int) ([]*exec.Cmd, error) {
	var cmds []*exec.Cmd
	for _, cpu := range cpus {
		c := exec.Command(exe, SpinArgs(cpu)...)
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		c.Stderr = os.Stderr
		if err := c.Start(); err != nil {
			return nil, errors.Join(fmt.Errorf("start the spinner for CPU %d (%s): %w", cpu, exe, err), killSpinners(cmds))
		}
		cmds = append(cmds, c)
	}
	for i, c := range cmds {
		if err := waitIdlePolicy(c); err != nil {
			return nil, errors.Join(fmt.Errorf("spinner for CPU %d: %w", cpus[i], err), killSpinners(cmds))
		}
	}
	return cmds, nil
}

// stopSpinners kills the spinners and reaps them. It fails if one had
// exited before: the CPUs were then not all kept awake to the end.
func stopSpinners(cmds []*exec.Cmd) error {
	var errs []error
	for _, c := range cmds {
		if exited(c.Process.Pid) {
			errs = append(errs, fmt.Errorf("the spinner %q (process %d) exited before the bench was done: its CPU was not kept awake to the end", strings.Join(c.Args[1:], " "), c.Process.Pid))
		}
	}
	return errors.Join(append(errs, killSpinners(cmds))...)
}

// killSpinners kills the spinners and reaps them.
func killSpinners(cmds []*exec.Cmd) error {
	var errs []error
	for _, c := range cmds {
		if err := c.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			errs = append(errs, fmt.Errorf("stop the spinner %q (process %d): %w", strings.Join(c.Args[1:], " "), c.Process.Pid, err))
		}
		_ = c.Wait() // killed: its exit status says only that
	}
	return errors.Join(errs...)
}

// exited reports whether process pid, a child not yet reaped, has exited.
func exited(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	_, after, ok := strings.Cut(string(stat), ") ")
	return err != nil || !ok || strings.HasPrefix(after, "Z")
}

// SpinningThread is a thread of process pid that runs at SCHED_IDLE, as
// a spinner's does once it spins; ok is false while there is none.
func SpinningThread(pid int) (tid int, ok bool, err error) {
	tids, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, false, fmt.Errorf("read the threads of process %d: %w", pid, err)
	}
	for _, t := range tids {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if attr, err := unix.SchedGetAttr(tid, 0); err == nil && attr.Policy == unix.SCHED_IDLE {
			return tid, true, nil
		}
	}
	return 0, false, nil
}

// waitIdlePolicy waits until some thread of c's process runs at
// SCHED_IDLE, or the process exits, or spinnerStartWait passes.
func waitIdlePolicy(c *exec.Cmd) error {
	deadline := time.Now().Add(spinnerStartWait)
	for time.Now().Before(deadline) {
		if exited(c.Process.Pid) {
			return fmt.Errorf("it exited before it spun (%s %s wrote why above)", c.Path, SpinCommand)
		}
		if _, ok, err := SpinningThread(c.Process.Pid); err != nil || ok {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("no thread of process %d runs at SCHED_IDLE after %v", c.Process.Pid, spinnerStartWait)
}
