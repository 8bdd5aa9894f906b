package pin

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ccload/ccload/internal/kernel"
)

func TestLock(t *testing.T) {
	root := filepath.Join(t.TempDir(), "ccload")
	held, err := AcquireLock(root, 0)
	if err != nil {
		t.Fatal(err)
	}
	// flock works per open file: a second AcquireLock contends with the
	// first even in the same process, as another process's would.
	if l, err := AcquireLock(root, 0); !errors.Is(err, ErrLockTimeout) {
		l.Release()
		t.Fatalf("AcquireLock while held = %v, want ErrLockTimeout", err)
	}
	if l, err := AcquireLock(root, 50*time.Millisecond); !errors.Is(err, ErrLockTimeout) {
		l.Release()
		t.Fatalf("AcquireLock with a wait while held = %v, want ErrLockTimeout", err)
	} else if !strings.Contains(err.Error(), "held the lock on "+root) || kernel.FixOf(err) == "" {
		t.Errorf("the timeout says %q (fix %q), want who held what, and a fix", err, kernel.FixOf(err))
	}

	got := make(chan error, 1)
	go func() {
		l, err := AcquireLock(root, time.Minute)
		l.Release()
		got <- err
	}()
	held.Release()
	held.Release() // twice is fine
	if err := <-got; err != nil {
		t.Errorf("AcquireLock waiting for a release: %v", err)
	}
	var none *Lock
	none.Release()
}
