// Package pin is the one place where ccload builds a set of bpffs pins
// that must appear whole or not at all: a CC's link and maps, the INT
// sockops program's link and maps, an INT hop's attachments and maps. It
// also holds what keeps those sets consistent across processes: the lock
// on the pin root (Lock), the cleanup of what dead processes left
// (CleanStale) and the crash tests' kill points (KillPoint).
//
// A Stage is a private directory below the pin root, named
// staging-<label>-<random>, where <random> is 16 hex digits. Pins go there
// first; Commit renames the directory to its final name in one step, so
// no reader ever sees half of a set, and the rename fails when another
// process made the final directory first. Until Commit, Abort removes the
// pins and then undoes, in reverse order, what the caller registered with
// OnAbort (closing a link, unregistering a CC). Pins go first because
// dropping the last reference to a link through its pin defers the release
// to a kernel worker, while closing the caller's descriptor afterwards
// releases it synchronously.
//
// The process that builds a stage holds flock(LOCK_EX) on the stage's
// directory until Commit or Abort. That is how the liveness of a stage is
// told, whatever PID namespace its owner runs in (a PID means nothing
// across them: the daemon runs in a container, the CLI on the host): the
// kernel drops the lock when the owner dies, so a stage whose lock can be
// taken belongs to a dead process, and CleanStale removes it.
package pin

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// stagePrefix starts the name of every stage directory.
const stagePrefix = "staging-"

// Stage is a pin set under construction. Its zero value is not usable;
// make one with NewStage.
type Stage struct {
	dir      string
	final    string
	lock     *os.File // the stage's directory, flocked while we build it
	undo     []func()
	finished bool // committed or aborted
}

// NewStage creates the staging directory for a pin set that Commit will
// move to final, and locks it (see the package doc). root is the pin
// root, label names what is staged (a CC's name, "int", a hop's key); it
// must not contain '.', which bpffs refuses. NewStage creates root when
// it is missing.
func NewStage(root, label, final string) (*Stage, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", root, err)
	}
	// A name is taken only by a live stage or a dead one that CleanStale
	// has not removed yet, and a stage can vanish between our mkdir and
	// our flock when CleanStale takes it for a dead one's: both are rare,
	// and a new name is the answer to each.
	var errs []error
	for range 4 {
		dir := filepath.Join(root, stagePrefix+label+"-"+randomSuffix())
		s, err := lockNewStage(dir)
		if err == nil {
			s.final = final
			KillPoint("stage-created")
			return s, nil
		}
		errs = append(errs, err)
		if !errors.Is(err, os.ErrExist) && !errors.Is(err, errStageTaken) {
			break
		}
	}
	return nil, fmt.Errorf("stage %s in %s: %w", label, root, errors.Join(errs...))
}

// errStageTaken says that a new stage directory was removed before we
// locked it.
var errStageTaken = errors.New("the new stage was removed before it could be locked")

// lockNewStage makes the directory dir and takes its flock. It checks,
// once locked, that dir is still the directory it made: CleanStale may
// take a directory that is not locked yet for a dead process's and
// remove it.
func lockNewStage(dir string) (*Stage, error) {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	f, err := os.Open(dir)
	if err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	if err := flock(f, unix.LOCK_EX); err != nil {
		f.Close()
		_ = os.Remove(dir)
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	var held, now unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &held); err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", dir, err)
	}
	if err := unix.Stat(dir, &now); err != nil || now.Ino != held.Ino || now.Dev != held.Dev {
		f.Close()
		return nil, fmt.Errorf("%s: %w", dir, errStageTaken)
	}
	return &Stage{dir: dir, lock: f}, nil
}

// flock calls flock(2) on f, again when a signal interrupts it.
func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// randomSuffix returns 16 hex digits from the system's random source.
func randomSuffix() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b[:])
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
	KillPoint("stage-maps-pinned")
	return nil
}

// OnAbort registers f to run when the stage is aborted, after its pins are
// removed and before the functions registered earlier.
func (s *Stage) OnAbort(f func()) { s.undo = append(s.undo, f) }

// Commit moves the stage to its final directory and lets go of its lock.
// When the rename fails the stage is unchanged, and Abort still removes
// it; an error that wraps os.ErrExist (or ENOTEMPTY) means another process
// committed first.
func (s *Stage) Commit() error {
	if err := os.Rename(s.dir, s.final); err != nil {
		return fmt.Errorf("move pins into %s: %w", s.final, err)
	}
	s.finished = true
	KillPoint("stage-committed")
	// The lock went with the directory to its final name, where nothing
	// looks for it; closing our descriptor drops it.
	s.lock.Close()
	return nil
}

// Abort removes the stage's pins and runs what OnAbort registered, newest
// first; then it lets go of the stage's lock. It does nothing after
// Commit, so that `defer stage.Abort()` follows every NewStage.
func (s *Stage) Abort() {
	if s.finished {
		return
	}
	s.finished = true
	_ = os.RemoveAll(s.dir)
	for i := len(s.undo) - 1; i >= 0; i-- {
		s.undo[i]()
	}
	s.lock.Close()
}
