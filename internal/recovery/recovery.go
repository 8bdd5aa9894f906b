// Package recovery is the sweep that every ccload command that changes
// state runs first, holding the pin root's lock (pin.AcquireLock), and the
// daemon before each reconcile pass. A command killed at any moment leaves
// at most: stages that nothing will commit, a pin set cut short by a
// removal or an upgrade, a CC registration that only a stage held, a
// record that something holds the shared maps (internal/sharedmaps). After Run, every CC, the INT
// sockops program and every INT hop under the pin root is either gone or
// a complete, usable pin set, and no CC is registered by a stage that
// nothing will commit; On-Ramp is complete and running on an interface or
// gone from it, with its fq root (onramp.OnRamp.Recover).
package recovery

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ccload/ccload/clocksync"
	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/onramp"
	"github.com/ccload/ccload/telemetry/hop"
	"github.com/ccload/ccload/telemetry/sockops"
)

// unregisterWait bounds how long Run waits for the kernel to let go of a
// CC whose link it unpinned: the last reference to a link dropped through
// its pin is released by a kernel worker, a moment later.
const unregisterWait = 2 * time.Second

// Run cleans up, under host's pin root, what ccload commands that died
// left behind, and returns what it did, in words, for a log. The
// caller holds pin.AcquireLock on host.PinRoot(): Run takes whatever it
// finds half-built for a dead command's, except stages, whose owners it
// can tell alive (pin.CleanStale). It goes on past a failure, and returns
// every error joined.
func Run(host kernel.Host) (done []string, err error) {
	root := host.PinRoot()
	var errs []error
	note := func(what []string, err error) {
		done = append(done, what...)
		if err != nil {
			errs = append(errs, err)
		}
	}

	// Stages first: a stage may pin a CC's registration or a hop's
	// filter, which the cleaners undo, and the holders of the shared maps
	// are judged by what is committed.
	var linked []string // CCs whose stage held their struct_ops link
	ccs := ccNames()
	recordLinks := func(s pin.StaleStage) error {
		// A CC's stage is labelled with its name, and its link is
		// pinned as "link" (see the loader's package doc).
		if slices.Contains(ccs, s.Label) && kernel.Exists(filepath.Join(s.Dir, "link")) {
			linked = append(linked, s.Label)
		}
		return nil
	}
	onRamp := onramp.New(host)
	stages, err := pin.CleanStale(root, pin.UnregisterStructOps, hop.CleanStage, onRamp.CleanStage, recordLinks)
	note(prefixed("removed the stage of a command that died: ", stages), err)
	note(nil, waitUnregistered(host, linked))
	if clock, err := clocksync.Dir(host); err == nil {
		stages, err := pin.CleanStale(filepath.Dir(clock))
		note(prefixed("removed the stage of a command that died: ", stages), err)
	}

	note(loader.New(host, loader.WithSharedMaps(sockops.NewStore(host))).Recover())

	ccPinned := func(name string) bool { return kernel.Exists(filepath.Join(root, name)) }
	note(sockops.New(host).Recover(ccPinned))

	hops, err := hop.NewPins(host).Recover()
	note(prefixed("removed the incomplete INT hop ", hops), err)
	note(onRamp.Recover())
	return done, errors.Join(errs...)
}

// ccNames are the names of ccload's CCs.
func ccNames() []string {
	var names []string
	for _, cc := range loader.Builtin() {
		names = append(names, cc.Name)
	}
	return names
}

// waitUnregistered waits, up to unregisterWait, until the kernel has no CC
// of any of names, so that the command that runs next can register them
// again.
func waitUnregistered(host kernel.Host, names []string) error {
	if len(names) == 0 {
		return nil
	}
	deadline := time.Now().Add(unregisterWait)
	for {
		avail, err := kernel.ReadSysctl(host.ProcSys, "net/ipv4/tcp_available_congestion_control")
		if err != nil {
			return err
		}
		var left []string
		for _, n := range names {
			if slices.Contains(strings.Fields(avail), n) {
				left = append(left, n)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still registered %v after the stage that held it was removed; another process holds it (see `bpftool struct_ops list`)",
				strings.Join(left, ", "), unregisterWait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// prefixed returns each of items after prefix.
func prefixed(prefix string, items []string) []string {
	out := make([]string, len(items))
	for i, s := range items {
		out[i] = prefix + s
	}
	return out
}
