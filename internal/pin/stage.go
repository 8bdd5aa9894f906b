// Package pin is the one place where ccload builds a set of bpffs pins
// that must appear whole or not at all: a CC's link and maps, the INT
// sockops program's link and maps, an INT hop's attachments and maps.
//
// A Stage is a private directory below the pin root, named
// staging-<label>-<pid>. Pins go there first; Commit renames the directory
// to its final name in one step, so no reader ever sees half of a set, and
// the rename fails when another process made the final directory first.
// Until Commit, Abort removes the pins and then undoes, in reverse order,
// what the caller registered with OnAbort (closing a link, unregistering a
// CC). Pins go first because dropping the last reference to a link through
// its pin defers the release to a kernel worker, while closing the caller's
// descriptor afterwards releases it synchronously.
package pin

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
)

// Stage is a pin set under construction. Its zero value is not usable;
// make one with NewStage.
type Stage struct {
	dir      string
	final    string
	undo     []func()
	finished bool // committed or aborted
}

// NewStage creates the staging directory for a pin set that Commit will
// move to final. root is the pin root, label names what is staged (a CC's
// name, "int", a hop's key). It creates root when it is missing.
func NewStage(root, label, final string) (*Stage, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", root, err)
	}
	dir := filepath.Join(root, fmt.Sprintf("staging-%s-%d", label, os.Getpid()))
	// A directory of this name is left from an earlier process with the
	// same PID that died mid-stage: nothing in it is committed.
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("remove stale %s: %w", dir, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	return &Stage{dir: dir, final: final}, nil
}

// Path returns where the pin called name goes in the stage.
func (s *Stage) Path(name string) string { return filepath.Join(s.dir, name) }

// PinMaps pins each map of maps under its name, except those named in
// skip and the compiler's data sections (.rodata, .bss: bpffs refuses
// dots in names, and nothing reads them from outside).
func (s *Stage) PinMaps(maps map[string]*ebpf.Map, skip ...string) error {
	for name, m := range maps {
		if strings.HasPrefix(name, ".") || slices.Contains(skip, name) {
			continue
		}
		if err := m.Pin(s.Path(name)); err != nil {
			return fmt.Errorf("pin map %s: %w", name, err)
		}
	}
	return nil
}

// OnAbort registers f to run when the stage is aborted, after its pins are
// removed and before the functions registered earlier.
func (s *Stage) OnAbort(f func()) { s.undo = append(s.undo, f) }

// Commit moves the stage to its final directory. When the rename fails the
// stage is unchanged, and Abort still removes it; an error that wraps
// os.ErrExist (or ENOTEMPTY) means another process committed first.
func (s *Stage) Commit() error {
	if err := os.Rename(s.dir, s.final); err != nil {
		return fmt.Errorf("move pins into %s: %w", s.final, err)
	}
	s.finished = true
	return nil
}

// Abort removes the stage's pins and runs what OnAbort registered, newest
// first. It does nothing after Commit, so that `defer stage.Abort()`
// follows every NewStage.
func (s *Stage) Abort() {
	if s.finished {
		return
	}
	s.finished = true
	_ = os.RemoveAll(s.dir)
	for i := len(s.undo) - 1; i >= 0; i-- {
		s.undo[i]()
	}
}
