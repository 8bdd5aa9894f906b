package pin

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/kernel"
)

// Lock is ccload's one lock on a pin root: every command that changes
// ccload's state (the CLI's and each reconcile pass of the daemon) holds
// it for the whole operation, so two of them never interleave.
//
// It is a flock(2) on the pin root directory itself. flock works on bpffs
// directories, and it locks the inode, not a path or a process: a CLI on
// the host and a daemon in a container that bind-mounts the host's
// /sys/fs/bpf contend for the same lock whatever their mount or PID
// namespaces. The kernel drops it when the holder dies, so a kill -9
// never leaves it held.
type Lock struct {
	f *os.File
}

// ErrLockTimeout is wrapped by AcquireLock's error when another process
// held the lock for the whole wait.
var ErrLockTimeout = errors.New("lock timeout")

// AcquireLock takes the lock on root (creating root when it is missing),
// waiting up to wait for another holder to finish; wait <= 0 tries once.
func AcquireLock(root string, wait time.Duration) (*Lock, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", root, err)
	}
	f, err := os.Open(root)
	if err != nil {
		return nil, fmt.Errorf("open %s to lock it: %w", root, err)
	}
	deadline := time.Now().Add(wait)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &Lock{f: f}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", root, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, kernel.NewError(kernel.KindUnknown,
				fmt.Sprintf("wait for it to finish, or wait longer (ccload --lock-wait); `fuser -v %s` names the holder", root),
				ErrLockTimeout, "another ccload command, or the daemon, held the lock on %s for all of %v", root, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Release gives the lock back. It is safe to call on a nil Lock and more
// than once.
func (l *Lock) Release() {
	if l == nil || l.f == nil {
		return
	}
	_ = l.f.Close() // closing the last descriptor releases the flock
	l.f = nil
}
