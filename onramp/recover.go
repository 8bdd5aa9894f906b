package onramp

// Recovery after a ccload command that died. Enable and Disable pass a
// kill point (pin.KillPoint) after each of their steps; whatever step a
// process is killed after, the next command's recovery sweep (package
// recovery: pin.CleanStale with CleanStage, then Recover) leaves On-Ramp
// either complete and running or gone, on every interface.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
	"github.com/ccload/ccload/qdisc"
)

// maxStrayFilters bounds the filters CleanStage removes from one side.
const maxStrayFilters = 16

// CleanStage is the pin.Cleaner of On-Ramp's stages. For the stage of an
// Enable that died before its commit it detaches, in the interface's
// network namespace, what the stage's pins hold; then, unless the
// interface has a committed On-Ramp, the cls_bpf filters at On-Ramp's
// priority that run On-Ramp's programs with no pin: those of a process
// killed between attaching a program by clsact and pinning it (a filter
// stays in the kernel by itself; a TCX link goes with its process). The
// sockops program's stage needs nothing: its cgroup link goes with its
// pin, or with its process before it was pinned.
func (o *OnRamp) CleanStage(s pin.StaleStage) error {
	rest, ok := strings.CutPrefix(s.Label, stageLabelPrefix)
	if !ok {
		return nil
	}
	k, ok := pin.ParseIfaceKey(rest)
	if !ok {
		return nil
	}
	return pin.IfaceStageCleaner(stageLabelPrefix, func(iface, dir string) error {
		if pin.IfaceGone(k.Index) {
			return nil // its filters and links went with it
		}
		if err := qdisc.DetachPinnedSides(iface, dir); err != nil {
			return err
		}
		if kernel.Exists(o.dir(k)) {
			return nil // the filters at On-Ramp's priority are the committed set's
		}
		return removeStrayFilters(iface)
	})(s)
}

// removeStrayFilters removes from iface, an interface of the calling
// thread's network namespace, the cls_bpf filters at On-Ramp's priority
// that run On-Ramp's programs.
func removeStrayFilters(iface string) error {
	for _, side := range qdisc.Sides() {
		name := onrampProgOnrampEgress
		if side == qdisc.Ingress {
			name = onrampProgOnrampIngress
		}
		for range maxStrayFilters {
			removed, err := qdisc.RemoveStaleFilter(iface, side, Priority, name)
			if err != nil {
				return fmt.Errorf("remove the %s filter no pin holds from %s: %w", name, iface, err)
			}
			if !removed {
				break
			}
		}
	}
	return nil
}

// Recover finishes what a ccload command that died left of On-Ramp, in
// every network namespace, as the next command does before it acts. The
// caller holds pin.Lock, and has removed the stages (pin.CleanStale with
// CleanStage). Afterwards:
//   - a swap of programs that an upgrade cut short (qdisc.ReplacePinned)
//     is finished or undone;
//   - every interface's pin set is complete and its programs run, or its
//     interface or network namespace is gone (status shows the former,
//     and disable removes it); any other is detached and removed, with its
//     fq root and its hold on the sockops program;
//   - every fq record (fqroot.go) names an interface with On-Ramp: the
//     others' fq roots, if ccload installed them, go with their records;
//   - every holder of the sockops program is an interface with On-Ramp;
//   - the sockops program runs, complete, while a holder is left, and is
//     gone when none is. A sockops program that is missing while
//     interfaces have On-Ramp (an upgrade that had to attach it anew, cut
//     short) is attached again to the cgroup root.
//
// It returns what it did, in words, for a log.
func (o *OnRamp) Recover() (done []string, err error) {
	entries, err := os.ReadDir(o.root())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list On-Ramp's pins: %w", err)
	}
	var errs []error
	note := func(what []string, err error) {
		done = append(done, what...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	for _, e := range entries {
		if k, ok := pin.ParseIfaceKey(e.Name()); ok && e.IsDir() {
			note(o.recoverInstance(k))
		}
	}
	note(o.recoverFQ())
	note(o.recoverHolders())
	note(o.recoverSockops())
	o.tidy()
	return done, errors.Join(errs...)
}

// complete reports whether every pin of instance k is there: its maps and
// both sides' programs. The object record is not needed: sets made before
// the records have none.
func (o *OnRamp) complete(k pin.IfaceKey) bool {
	dir := o.dir(k)
	for name := range (&onrampObjects{}).pinned() {
		if !kernel.Exists(filepath.Join(dir, name)) {
			return false
		}
	}
	for _, side := range qdisc.Sides() {
		if !kernel.Exists(qdisc.SidePin(dir, side)) {
			return false
		}
	}
	return true
}

// recoverInstance does Recover's work for instance k.
func (o *OnRamp) recoverInstance(k pin.IfaceKey) (done []string, err error) {
	dir := o.dir(k)
	removed := false
	err = pin.InNetns(k.Netns, func() error {
		iface := pin.IfaceNow(k)
		for _, side := range qdisc.Sides() {
			fixed, err := qdisc.RecoverReplace(iface, side, qdisc.SidePin(dir, side))
			if err != nil {
				return err
			}
			if fixed {
				done = append(done, fmt.Sprintf("finished or undid the swap of On-Ramp's %s program on %s that an upgrade left half done", side, iface))
			}
		}
		if o.complete(k) {
			if pin.IfaceGone(k.Index) {
				return nil
			}
			// What cannot be inspected is left alone.
			if sides := qdisc.InspectPinnedSides(iface, dir); sides.Attached || len(sides.Problems) > 0 {
				return nil
			}
		}
		removed = true
		return o.remove(k)
	})
	if errors.Is(err, pin.ErrNetnsGone) {
		// Nothing runs in a namespace that is gone; a complete set stays,
		// as a hop's does, in case the namespace is only hidden from us.
		err = nil
		if !o.complete(k) {
			removed = true
			err = errors.Join(os.RemoveAll(dir), o.releaseSockops(k.String()))
		}
	}
	if err != nil {
		return done, fmt.Errorf("remove the On-Ramp pins %s a command left incomplete: %w", dir, err)
	}
	if removed {
		done = append(done, "removed the incomplete On-Ramp pins "+dir)
	}
	return done, nil
}

// recoverFQ removes the fq records of interfaces without On-Ramp, and the
// fq roots that On-Ramp installed on them.
func (o *OnRamp) recoverFQ() (done []string, err error) {
	entries, err := os.ReadDir(o.fqDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list On-Ramp's fq records: %w", err)
	}
	var errs []error
	for _, e := range entries {
		k, ok := pin.ParseIfaceKey(e.Name())
		if !ok {
			continue
		}
		if kernel.Exists(o.dir(k)) {
			continue
		}
		var removed bool
		err := pin.InNetns(k.Netns, func() (err error) {
			removed, err = o.dropFQ(k)
			return err
		})
		if errors.Is(err, pin.ErrNetnsGone) {
			err = os.Remove(o.fqRecord(k))
		}
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("remove the fq root On-Ramp installed on %s: %w", k.Name, err))
		case removed:
			done = append(done, fmt.Sprintf("removed the fq root qdisc that On-Ramp installed on %s, which has no On-Ramp", k.Name))
		}
	}
	return done, errors.Join(errs...)
}

// recoverHolders drops the holders of the sockops program that are no
// interface with On-Ramp.
func (o *OnRamp) recoverHolders() (done []string, err error) {
	entries, err := os.ReadDir(o.holdersDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list On-Ramp's holders: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if kernel.Exists(filepath.Join(o.root(), e.Name())) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(o.holdersDir(), e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("drop the On-Ramp holder %s: %w", e.Name(), err))
			continue
		}
		done = append(done, fmt.Sprintf("dropped %s from the holders of On-Ramp's sockops program: it has no On-Ramp", e.Name()))
	}
	return done, errors.Join(errs...)
}

// recoverSockops makes the sockops program run, complete, while a holder
// is left, and removes it when none is.
func (o *OnRamp) recoverSockops() (done []string, err error) {
	left, err := os.ReadDir(o.holdersDir())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("list On-Ramp's holders: %w", err)
	}
	exists := kernel.Exists(o.sockopsDir())
	if len(left) == 0 {
		if !exists {
			return nil, nil
		}
		if err := o.removeSockops(); err != nil {
			return nil, err
		}
		return []string{"detached On-Ramp's sockops program: no interface has On-Ramp"}, nil
	}
	if exists && !o.sockopsComplete() {
		if err := o.removeSockops(); err != nil {
			return nil, err
		}
		done = append(done, "removed the incomplete pins of On-Ramp's sockops program")
		exists = false
	}
	if !exists {
		if err := o.attachSockops(""); err != nil {
			return done, fmt.Errorf("attach On-Ramp's sockops program again: %w", err)
		}
		done = append(done, "attached On-Ramp's sockops program again, to the cgroup root: interfaces have On-Ramp, and it was missing")
	}
	return done, nil
}
