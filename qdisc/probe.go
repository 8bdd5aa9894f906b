package qdisc

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/kernel"
)

// ProbeFQ tells whether this kernel has sch_fq, without touching any
// interface in use: it installs fq at the root of the loopback device of
// a network namespace made for the probe, and removes it again. The
// namespace goes away with the probe. Where sch_fq is a module, the
// kernel loads it then, as `ccload onramp enable` would have it do.
//
// It returns nil when fq could be installed; an error of kind
// kernel.KindKernelTooOld that wraps ErrNoFQ, with the fix, when the
// kernel has no sch_fq; and any other error when the probe could not tell
// (no CAP_SYS_ADMIN to make the namespace, say).
func ProbeFQ() error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread, in the probe's namespace, exits
		// with this goroutine, and the namespace with it.
		runtime.LockOSThread()
		errc <- probeFQHere()
	}()
	return <-errc
}

// probeFQHere is ProbeFQ on the calling thread, which it moves into a new
// network namespace: call it only on a locked thread that exits after.
func probeFQHere() error {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("probe for sch_fq: make a network namespace for the probe: %w", err)
	}
	q, err := InstallFQ("lo", FQConfig{})
	if errors.Is(err, ErrNoFQ) {
		return kernel.NewError(kernel.KindKernelTooOld, noFQFix, err, "this kernel has no fq qdisc (CONFIG_NET_SCH_FQ)")
	}
	if err != nil {
		return fmt.Errorf("probe for sch_fq: %w", err)
	}
	if err := q.Close(); err != nil {
		return fmt.Errorf("probe for sch_fq: %w", err)
	}
	return nil
}
