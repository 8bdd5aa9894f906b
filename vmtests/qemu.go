package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

const (
	markerBooted = "CCLOAD-VMTEST booted"
	markerDone   = "CCLOAD-VMTEST done"
)

// errNoBoot means the guest printed nothing from /init in time.
var errNoBoot = errors.New("guest did not reach /init")

// errLockup means the guest's kernel reported a CPU stuck for lockupKill
// or more (its soft-lockup watchdog), and the guest was stopped: a
// kernel whose CPU has not scheduled for minutes does not finish, and
// waiting for the deadline would only spend the run's time.
var errLockup = errors.New("guest locked up")

// lockupKill is how long the guest's watchdog must report a CPU stuck
// before the guest is stopped. Under TCG a loaded host delays a vCPU for
// seconds now and then (the watchdog's threshold is 20 s); minutes mean
// the kernel will not come back.
const lockupKill = 120 * time.Second

// lockupReport matches a soft-lockup report of the kernel's watchdog,
// "watchdog: BUG: soft lockup - CPU#1 stuck for 44s! [kworker/1:3:1403]".
var lockupReport = regexp.MustCompile(`soft lockup - CPU#\d+ stuck for (\d+)s!`)

// lockupStuck returns how long a soft-lockup report in line says its CPU
// has been stuck.
func lockupStuck(line string) (time.Duration, bool) {
	m := lockupReport.FindStringSubmatch(line)
	if m == nil {
		return 0, false
	}
	secs, err := strconv.Atoi(m[1])
	if err != nil {
		return 0, false
	}
	return time.Duration(secs) * time.Second, true
}

// bootVM runs the guest until it powers off, the deadline passes, or (when
// bootTimeout > 0) /init has not started in bootTimeout. It returns the
// console output, every line of which also goes to console, and how long
// the guest took to start /init (0 if it never did).
func bootVM(ctx context.Context, k *kernel, initrd, accel string, timeout, bootTimeout time.Duration, console io.Writer) (string, time.Duration, error) {
	args := []string{
		"-m", "2048", "-smp", "2", "-nographic", "-no-reboot", "-nic", "none",
		"-kernel", k.vmlinuz(), "-initrd", initrd,
		"-append", "console=ttyS0 panic=-1 loglevel=4",
	}
	switch accel {
	case "kvm":
		args = append(args, "-accel", "kvm", "-cpu", "host")
	default:
		args = append(args, "-accel", "tcg,thread=multi", "-cpu", "max")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", args...)
	cmd.Stdin = nil
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", 0, err
	}
	cmd.Stderr = cmd.Stdout
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return "", 0, fmt.Errorf("start qemu (apt-get install qemu-system-x86): %w", err)
	}

	// initAfter is written before booted is closed and read after;
	// lockedUp is written before readDone is closed and read after.
	var initAfter time.Duration
	var lockedUp bool
	booted := make(chan struct{})
	var out strings.Builder
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		seen := false
		for sc.Scan() {
			line := strings.TrimRight(sc.Text(), "\r")
			out.WriteString(line + "\n")
			fmt.Fprintln(console, line)
			if !seen && strings.Contains(line, markerBooted) {
				seen = true
				initAfter = time.Since(start)
				close(booted)
			}
			if d, ok := lockupStuck(line); ok && d >= lockupKill {
				lockedUp = true
				cancel()
			}
		}
	}()

	var bootErr error
	if bootTimeout > 0 {
		select {
		case <-booted:
		case <-readDone:
		case <-time.After(bootTimeout):
			bootErr = errNoBoot
			cancel()
		}
	}
	<-readDone
	werr := cmd.Wait()
	text := out.String()
	switch {
	case lockedUp:
		return text, initAfter, fmt.Errorf("%w: its kernel reported a CPU stuck for %v or more (soft lockup)", errLockup, lockupKill)
	case bootErr != nil:
		return text, 0, fmt.Errorf("%w in %v (if the host is only slow, raise --boot-timeout)", bootErr, bootTimeout)
	case !strings.Contains(text, markerBooted):
		return text, 0, fmt.Errorf("%w (qemu: %v)", errNoBoot, werr)
	case ctx.Err() == context.DeadlineExceeded && !strings.Contains(text, markerDone):
		return text, initAfter, fmt.Errorf("guest hung: no result after %v", timeout)
	case !strings.Contains(text, markerDone):
		return text, initAfter, fmt.Errorf("guest stopped before finishing (qemu: %v)", werr)
	}
	return text, initAfter, nil
}

// kvmWorks reports a cached verdict on whether KVM boots guests here.
func kvmVerdict(cache string) (known, works bool) {
	b, err := os.ReadFile(cache + "/kvm-verdict-" + hostRelease())
	if err != nil {
		return false, false
	}
	return true, strings.TrimSpace(string(b)) == "works"
}

func saveKVMVerdict(cache string, works bool) {
	v := "broken"
	if works {
		v = "works"
	}
	os.WriteFile(cache+"/kvm-verdict-"+hostRelease(), []byte(v+"\n"), 0o644)
}

func hostRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}
