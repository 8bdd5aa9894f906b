package main

// The CLI's side of ccload's one lock (pin.Lock). Every command that
// changes ccload's state holds the lock on the pin root for its whole
// run, so that two commands, or a command and a reconcile pass of the
// daemon (which takes the lock for each pass itself), never interleave.
// Holding it, a command first runs the recovery sweep (package recovery),
// which cleans up what an earlier command left when it was killed.
//
// Not locked, and why:
//   - list, status, int status, onramp status, clock status, trace and
//     version only read;
//   - int hop --foreground (or --duration) pins nothing, and runs until
//     stopped: holding the lock so long would stall every other command;
//   - clock run runs until stopped too, and holds a lock of its own on
//     its namespace's clock map (package clocksync);
//   - demo and bench run for minutes; they attach and detach CCs one
//     call at a time through the loader, each call all or nothing;
//   - daemon locks each reconcile pass, and reset takes the lock itself.

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
	"github.com/ccload/ccload/internal/recovery"
)

// defaultLockWait is how long a command waits for the lock by default.
const defaultLockWait = 30 * time.Second

// lockedCommands are the paths, below ccload, of the commands that hold
// the lock.
func lockedCommands() []string {
	return []string{"attach", "set", "detach", "int enable", "int disable", "int hop", "onramp enable", "onramp disable"}
}

// lockCommands makes every command of lockedCommands hold the lock, and
// run the recovery sweep, around its RunE. It panics on a path that names
// no command: a bug that TestLockedCommands catches.
func lockCommands(root *cobra.Command, a *app) {
	for _, path := range lockedCommands() {
		c, _, err := root.Find(strings.Fields(path))
		if err != nil || c.CommandPath() != "ccload "+path || c.RunE == nil {
			panic(fmt.Sprintf("ccload: no command %q to lock", path))
		}
		run := c.RunE
		c.RunE = func(c *cobra.Command, args []string) error {
			if !pinsState(c) {
				return run(c, args)
			}
			release, err := a.lockAndRecover(c)
			if err != nil {
				return fmt.Errorf("%s: %w", strings.TrimPrefix(c.CommandPath(), "ccload "), err)
			}
			defer release()
			return run(c, args)
		}
	}
}

// pinsState reports whether c, as its flags ask, changes what is pinned:
// all locked commands but a foreground INT hop.
func pinsState(c *cobra.Command) bool {
	if c.CommandPath() != "ccload int hop" {
		return true
	}
	fg, _ := c.Flags().GetBool("foreground")
	d, _ := c.Flags().GetDuration("duration")
	return !fg && d <= 0
}

// lockAndRecover takes the lock on the pin root, waiting up to
// --lock-wait, and runs the recovery sweep; release gives the lock back.
// Without the capabilities to change anything the command fails with its
// own error before it changes anything, so it runs without the lock.
// What the sweep removed, and a sweep that failed, are reported on
// stderr; the command runs all the same, so that a part the sweep cannot
// mend does not block the others.
func (a *app) lockAndRecover(c *cobra.Command) (release func(), err error) {
	if kernel.CheckCaps() != nil {
		return func() {}, nil
	}
	notes, err := pin.EnsureLasting(a.host, "ccload's pins",
		"run ccload in the host's mount namespace, with the host's /sys/fs/bpf: enter a network namespace with nsenter --net=/run/netns/NS, not ip netns exec")
	if err != nil {
		return nil, err
	}
	stderr := c.ErrOrStderr()
	for _, n := range notes {
		fmt.Fprintf(stderr, "note: %s\n", n)
	}
	lock, err := pin.AcquireLock(a.host.PinRoot(), a.lockWait)
	if err != nil {
		return nil, err
	}
	done, err := recovery.Run(a.host)
	for _, d := range done {
		fmt.Fprintf(stderr, "note: after a ccload command that did not finish: %s\n", d)
	}
	if err != nil {
		fmt.Fprintf(stderr, "warning: cleaning up after a ccload command that did not finish: %v\n", err)
	}
	return lock.Release, nil
}
