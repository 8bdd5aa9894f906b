package pin

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The stage is plain directories; pins need a bpffs, and are tested where
// they are made (loader, telemetry/sockops, telemetry/hop). These tests
// check the directory protocol on any file system.

func TestStageCommit(t *testing.T) {
	root := t.TempDir()
	final := filepath.Join(root, "cc")
	s, err := NewStage(root, "cc", final)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(s.Path("")), "staging-cc-") {
		t.Errorf("stage at %s, want staging-cc-<pid>", s.Path(""))
	}
	if err := os.WriteFile(s.Path("params"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	aborted := false
	s.OnAbort(func() { aborted = true })
	if err := s.Commit(); err != nil {
		t.Fatal(err)
	}
	s.Abort() // a no-op after Commit
	if aborted {
		t.Error("Abort after Commit ran the undo functions")
	}
	if _, err := os.Stat(filepath.Join(final, "params")); err != nil {
		t.Errorf("committed pin missing: %v", err)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 1 {
		t.Errorf("root holds %v, want only the final directory", entries)
	}
}

func TestStageAbort(t *testing.T) {
	root := t.TempDir()
	s, err := NewStage(root, "int", filepath.Join(root, "int"))
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	s.OnAbort(func() { order = append(order, "first registered") })
	s.OnAbort(func() {
		if _, err := os.Stat(s.Path("")); err == nil {
			t.Error("an undo function ran before the pins were removed")
		}
		order = append(order, "last registered")
	})
	s.Abort()
	s.Abort() // once only
	if want := []string{"last registered", "first registered"}; !reflect.DeepEqual(order, want) {
		t.Errorf("undo order %v, want %v", order, want)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("root holds %v after Abort, want nothing", entries)
	}
}

func TestStageCommitRefusesExisting(t *testing.T) {
	root := t.TempDir()
	final := filepath.Join(root, "hop")
	if err := os.MkdirAll(filepath.Join(final, "tc_egress"), 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := NewStage(root, "hop", final)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.Path("hop_config"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(); err == nil {
		t.Fatal("Commit over a directory another process committed succeeded")
	}
	s.Abort()
	if entries, _ := os.ReadDir(root); len(entries) != 1 || entries[0].Name() != "hop" {
		t.Errorf("root holds %v, want only the other process's directory", entries)
	}
}
