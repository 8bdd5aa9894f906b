package main

import (
	"errors"
	"fmt"
	"testing"
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
