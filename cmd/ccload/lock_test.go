package main

import (
	"io"
	"strings"
	"testing"

	"github.com/ccload/ccload/internal/kernel"
)

// TestLockedCommands checks that every command that changes state holds
// the lock (newRootCmd panics on a path that names no command), and that a
// foreground INT hop, which pins nothing, does not.
func TestLockedCommands(t *testing.T) {
	root := newRootCmd(&app{host: kernel.DefaultHost(), out: io.Discard})
	for _, path := range lockedCommands() {
		c, _, err := root.Find(strings.Fields(path))
		if err != nil || c.CommandPath() != "ccload "+path {
			t.Fatalf("no command %q", path)
		}
		if path != "int hop" && !pinsState(c) {
			t.Errorf("%s does not take the lock", path)
		}
	}
	hopCmd, _, _ := root.Find([]string{"int", "hop"})
	for _, tt := range []struct {
		flag, value string
		locks       bool
	}{
		{"off", "true", true},
		{"foreground", "true", false},
		{"duration", "5s", false},
	} {
		c, _, _ := newRootCmd(&app{host: kernel.DefaultHost(), out: io.Discard}).Find([]string{"int", "hop"})
		if err := c.Flags().Set(tt.flag, tt.value); err != nil {
			t.Fatal(err)
		}
		if got := pinsState(c); got != tt.locks {
			t.Errorf("int hop --%s=%s takes the lock: %v, want %v", tt.flag, tt.value, got, tt.locks)
		}
	}
	if !pinsState(hopCmd) {
		t.Error("int hop (pinned) does not take the lock")
	}
}
