package main

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestBootFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		text string
		err  error
		tag  string
	}{
		{"success", "CCLOAD-VMTEST booted\nCCLOAD-VMTEST done\n", nil, ""},
		{"panic", "CCLOAD-VMTEST booted\nKernel panic - not syncing: Fatal exception\n", errors.New("guest stopped before finishing"), "panic"},
		{"no /init in time", "SeaBIOS\nBooting from ROM...\n", fmt.Errorf("%w in 5m0s", errNoBoot), "noboot"},
		{"qemu died before /init", "", fmt.Errorf("%w (qemu: exit status 1)", errNoBoot), "noboot"},
		{"panic before /init", "Kernel panic - not syncing: VFS\n", fmt.Errorf("%w in 5m0s", errNoBoot), "panic"},
		{"a test hung", "CCLOAD-VMTEST booted\n", errors.New("guest hung: no result after 20m0s"), ""},
		{"locked up", "CCLOAD-VMTEST booted\nwatchdog: BUG: soft lockup - CPU#0 stuck for 122s!\n", fmt.Errorf("%w: stuck", errLockup), "lockup"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tag, what := bootFailure(tc.text, tc.err)
			if tag != tc.tag {
				t.Fatalf("bootFailure = %q, want %q", tag, tc.tag)
			}
			if (tag == "") != (what == "") {
				t.Fatalf("bootFailure = %q, %q: a tag needs its text and no tag none", tag, what)
			}
		})
	}
}

func TestLockupStuck(t *testing.T) {
	for _, tc := range []struct {
		line string
		want time.Duration
		ok   bool
	}{
		{"[  380.871118] watchdog: BUG: soft lockup - CPU#0 stuck for 44s! [kworker/0:1:17]", 44 * time.Second, true},
		{"[ 1040.982144] watchdog: BUG: soft lockup - CPU#1 stuck for 659s! [kworker/1:3:1403]", 659 * time.Second, true},
		{"[  355.402210] rcu: INFO: rcu_preempt self-detected stall on CPU", 0, false},
		{"watchdog: BUG: soft lockup - CPU#1 stuck for s! [x]", 0, false},
		{"watchdog: BUG: soft lockup - CPU#1 stuck for -3s! [x]", 0, false},
		{"--- PASS: TestSoftLockup (0.00s)", 0, false},
	} {
		got, ok := lockupStuck(tc.line)
		if got != tc.want || ok != tc.ok {
			t.Errorf("lockupStuck(%q) = %v, %v; want %v, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}
