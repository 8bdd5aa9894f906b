package pin

// Cleaning up after processes that died mid-stage. A stage whose owner
// died holds pins that nothing will ever commit: CleanStale finds such
// stages by their lock (see the package doc) and removes them. Removing
// a pin undoes what it held once no descriptor holds it too, and a dead
// process holds none: a pinned struct_ops link unregisters its CC, a TCX
// or cgroup link detaches its program. Two things outlive their pins, and
// a Cleaner must undo them first: a struct_ops map registered without a
// link (UnregisterStructOps), and a cls_bpf filter, which stays in the
// kernel by itself (the caller that knows the interface detaches it).

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// StaleStage is the stage of a dead process, as CleanStale hands it to
// each Cleaner before removing it.
type StaleStage struct {
	// Dir is the stage's directory.
	Dir string
	// Label is the label its owner gave NewStage.
	Label string
}

// A Cleaner undoes in the kernel, for one stale stage, what removing the
// stage's pins would not undo. It looks at the stage's label and does
// nothing for stages that are not its own. An error keeps the stage for a
// later try: its pins may be the only way to find what is left.
type Cleaner func(StaleStage) error

// CleanStale removes the stages directly below root whose owner is dead,
// running every cleaner on each one first, and returns the directories it
// removed. A stage that a live process holds is never touched, whatever
// its PID namespace. A root that does not exist has no stages.
func CleanStale(root string, cleaners ...Cleaner) (removed []string, err error) {
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the stages in %s: %w", root, err)
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), stagePrefix) {
			continue
		}
		dir := filepath.Join(root, e.Name())
		gone, err := cleanIfStale(dir, cleaners)
		if err != nil {
			errs = append(errs, err)
		}
		if gone {
			removed = append(removed, dir)
		}
	}
	return removed, errors.Join(errs...)
}

// cleanIfStale removes the stage dir if its owner is dead, holding its
// lock meanwhile so that no one else takes it.
func cleanIfStale(dir string, cleaners []Cleaner) (bool, error) {
	f, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil // committed or aborted since we listed it
	}
	if err != nil {
		return false, fmt.Errorf("open the stage %s: %w", dir, err)
	}
	defer f.Close()
	if err := flock(f, unix.LOCK_EX|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
		return false, nil // its owner lives
	} else if err != nil {
		return false, fmt.Errorf("lock the stage %s: %w", dir, err)
	}
	// Locked: the owner is dead, or has not locked its new stage yet, in
	// which case it finds it gone (lockNewStage) and makes another.
	s := StaleStage{Dir: dir, Label: stageLabel(filepath.Base(dir))}
	for _, c := range cleaners {
		if err := c(s); err != nil {
			return false, fmt.Errorf("clean up the stage %s of a dead process: %w", dir, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return false, fmt.Errorf("remove the stage %s of a dead process: %w", dir, err)
	}
	return true, nil
}

// stageLabel returns the label of the stage directory called name:
// staging-<label>-<random>. The random part has no '-'.
func stageLabel(name string) string {
	label := strings.TrimPrefix(name, stagePrefix)
	if i := strings.LastIndexByte(label, '-'); i >= 0 {
		return label[:i]
	}
	return label
}

// UnregisterStructOps is the Cleaner for struct_ops maps registered
// without a link (the only way before 6.4): such a map stays registered
// with nothing holding it, until its key 0 is deleted, so removing its pin
// would leave the registration orphaned. It deletes key 0 of every
// struct_ops map pinned in the stage that was made without BPF_F_LINK.
func UnregisterStructOps(s StaleStage) error {
	entries, err := os.ReadDir(s.Dir)
	if err != nil {
		return fmt.Errorf("list %s: %w", s.Dir, err)
	}
	var errs []error
	for _, e := range entries {
		path := filepath.Join(s.Dir, e.Name())
		m, err := ebpf.LoadPinnedMap(path, nil)
		if err != nil {
			continue // a link, a program, a directory
		}
		info, err := m.Info()
		if err == nil && m.Type() == ebpf.StructOpsMap && info.Flags&unix.BPF_F_LINK == 0 {
			err = m.Delete(uint32(0))
			if errors.Is(err, ebpf.ErrKeyNotExist) || errors.Is(err, unix.EINPROGRESS) {
				err = nil // never registered, or being unregistered
			}
		}
		m.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("unregister the struct_ops map pinned at %s: %w", path, err))
		}
	}
	return errors.Join(errs...)
}

// IfaceStageCleaner returns the Cleaner of the stages labelled
// prefix+<IfaceKey>: those of a per-interface pin set (an INT hop's,
// On-Ramp's). For each, it runs detach(iface, dir) in the interface's
// network namespace (InNetns), with the interface's name now and the
// stage's directory; detach undoes what the stage's pins would leave
// attached (a cls_bpf filter). A namespace that is gone took the
// interface, and all attached to it, along: nothing is left to detach.
// Stages with other labels are not its own.
func IfaceStageCleaner(prefix string, detach func(iface, dir string) error) Cleaner {
	return func(s StaleStage) error {
		rest, ok := strings.CutPrefix(s.Label, prefix)
		if !ok {
			return nil
		}
		k, ok := ParseIfaceKey(rest)
		if !ok {
			return nil
		}
		err := InNetns(k.Netns, func() error { return detach(IfaceNow(k), s.Dir) })
		if err != nil && !errors.Is(err, ErrNetnsGone) {
			return fmt.Errorf("detach what the stage of %s holds: %w", k, err)
		}
		return nil
	}
}

// ErrNetnsGone is wrapped by InNetns's error when no network namespace
// with the given inode number can be found.
var ErrNetnsGone = errors.New("network namespace not found")

// InNetns runs f on a thread in the network namespace whose inode number
// is ns (as CurrentNetns returns it): on the calling thread when that is
// its namespace, else on a new locked thread that enters the namespace
// found among the named ones (/run/netns) and those of the host's
// processes. A namespace found in neither, which has no process or name
// left to keep it, yields an error that wraps ErrNetnsGone; the
// interfaces it had are gone with it.
func InNetns(ns uint64, f func() error) error {
	cur, err := CurrentNetns()
	if err != nil {
		return err
	}
	if cur == ns {
		return f()
	}
	path, err := findNetns(ns)
	if err != nil {
		return err
	}
	target, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w", path, err)
	}
	defer target.Close()
	done := make(chan error, 1)
	go func() {
		// The thread stays locked if it cannot go back: the runtime
		// ends a locked thread with its goroutine, so no other goroutine
		// runs in the wrong namespace.
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			done <- fmt.Errorf("open this thread's network namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("enter network namespace %s: %w", path, err)
			return
		}
		ferr := f()
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- ferr
	}()
	return <-done
}

// findNetns returns a path that opens the network namespace with inode
// number ns.
func findNetns(ns uint64) (string, error) {
	var candidates []string
	if named, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range named {
			candidates = append(candidates, filepath.Join("/run/netns", e.Name()))
		}
	}
	if procs, err := os.ReadDir("/proc"); err == nil {
		for _, e := range procs {
			if _, err := strconv.Atoi(e.Name()); err == nil {
				candidates = append(candidates, filepath.Join("/proc", e.Name(), "ns", "net"))
			}
		}
	}
	for _, path := range candidates {
		var st unix.Stat_t
		if unix.Stat(path, &st) == nil && st.Ino == ns {
			return path, nil
		}
	}
	return "", fmt.Errorf("network namespace with inode %d: %w", ns, ErrNetnsGone)
}
