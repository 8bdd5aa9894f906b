package qdisc

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	tc "github.com/florianl/go-tc"

	"github.com/ccload/ccload/internal/pin"
)

// In-place replacement of a pinned attachment: a newer ccload swaps its
// build of a tc program in for the one attached, with no moment when the
// interface runs neither.
//
// Kill points are named tc-replace-<side>-<step>, the side being egress
// or ingress, so that a command that swaps both sides passes each once.
//
// With TCX the pinned link is updated (BPF_LINK_UPDATE): one atomic step
// (kill point "updated"); the link and its pin stay.
//
// With clsact the pin holds the program, and the program's ID is how the
// cls_bpf filter is found again (see DetachPinned). The swap takes three
// steps, each followed by a kill point:
//
//  1. pin the new program at ReplacingPin(path) ("pinned");
//  2. replace the program of the filter that runs the pinned one, in place
//     (RTM_NEWTFILTER on the same parent, priority and handle, without
//     NLM_F_EXCL; cls_bpf swaps the program under RCU) ("swapped");
//  3. rename ReplacingPin(path) over path, which drops the old program's
//     pin ("renamed").
//
// A process killed between steps 1 and 3 leaves both pins. Which of the
// two programs a filter runs tells which side of step 2 it died on, and
// RecoverReplace finishes the swap (rename) or undoes it (remove the new
// pin). Until then, path holds a program that no filter may run:
// recovery must call RecoverReplace before it inspects or detaches what
// is pinned at path, or it would take the attachment for one whose filter
// was removed. ReplacePinned calls it itself first.

// replacingSuffix ends the name of the pin of a program being swapped in;
// bpffs refuses '.' in names.
const replacingSuffix = "_next"

// ReplacingPin is where ReplacePinned pins, with clsact, the program it
// is swapping in for the one pinned at path.
func ReplacingPin(path string) string { return path + replacingSuffix }

// ReplacePinned swaps prog, a SchedCLS program written for direct-action
// mode, in for the program of the attachment that Attachment.Pin pinned
// at path, on side dir of iface in the calling thread's network
// namespace. The attachment stays the same one: a TCX link keeps its ID,
// a cls_bpf filter its priority and handle. Afterwards the pin at path
// identifies the new program's attachment, as Pin made it.
//
// It refuses, and changes nothing, when path holds something else, a link
// attached to another interface or direction, or a program that no filter
// on iface and dir runs. The caller holds the pin root's Lock. See the
// comment above for the steps and what a kill between them leaves.
func ReplacePinned(iface string, dir Direction, path string, prog *ebpf.Program) error {
	if prog == nil || prog.Type() != ebpf.SchedCLS {
		return fmt.Errorf("replace the tc program pinned at %s: the new program is not a tc one", path)
	}
	if _, err := RecoverReplace(iface, dir, path); err != nil {
		return fmt.Errorf("replace the tc program pinned at %s: finish an earlier replacement: %w", path, err)
	}
	lnk, old, err := openPinned(path)
	if err != nil {
		return fmt.Errorf("replace the tc program pinned at %s: %w", path, err)
	}
	if lnk != nil {
		return replaceLink(lnk, iface, dir, path, prog)
	}
	return replaceFilter(old, iface, dir, path, prog)
}

// replaceLink updates the TCX link lnk, pinned at path, to run prog.
func replaceLink(lnk link.Link, iface string, dir Direction, path string, prog *ebpf.Program) error {
	defer lnk.Close()
	info, err := tcxInfo(lnk, dir, path)
	if err != nil {
		return err
	}
	ifi, err := LookupInterface(iface)
	if err != nil {
		return err
	}
	if ifi == nil || uint32(ifi.Index) != info.TCX().Ifindex {
		return fmt.Errorf("replace the program of the tcx link pinned at %s: it is attached to interface index %d, not to %s; refusing to touch it", path, info.TCX().Ifindex, iface)
	}
	if err := lnk.Update(prog); err != nil {
		return fmt.Errorf("replace the program of the tcx link pinned at %s on %s %s: %w", path, iface, dir, err)
	}
	pin.KillPoint("tc-replace-" + dir.String() + "-updated")
	return nil
}

// replaceFilter swaps prog in for old, pinned at path, in the cls_bpf
// filters of iface's side dir that run old.
func replaceFilter(old *ebpf.Program, iface string, dir Direction, path string, prog *ebpf.Program) (err error) {
	defer old.Close()
	oldID, err := clsProgramID(old, path)
	if err != nil {
		return err
	}
	dev, err := openNetdev(iface)
	if err != nil {
		return fmt.Errorf("replace the program pinned at %s: %w", path, err)
	}
	defer dev.close()
	fs, err := dev.filtersOf(dir, oldID)
	if err != nil {
		return fmt.Errorf("replace the program pinned at %s: %w", path, err)
	}
	if len(fs) == 0 {
		return fmt.Errorf("replace the program pinned at %s: no filter on %s %s runs it (program %d); refusing to attach it anew", path, iface, dir, oldID)
	}

	next := ReplacingPin(path)
	own, err := prog.Clone() // pin a handle of our own: prog's pin path would go stale
	if err != nil {
		return fmt.Errorf("duplicate the new program's handle: %w", err)
	}
	defer own.Close()
	if err := own.Pin(next); err != nil {
		return fmt.Errorf("pin the new program at %s: %w", next, err)
	}
	pin.KillPoint("tc-replace-" + dir.String() + "-pinned")

	done, revert := 0, true
	defer func() {
		if err == nil || !revert {
			return
		}
		// Put the old program back where the new one went in, then
		// drop the new pin: the attachment is as it was.
		for _, f := range fs[:done] {
			err = errors.Join(err, dev.replaceFilterProgram(dir, f, old))
		}
		if rerr := os.Remove(next); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}()
	for _, f := range fs {
		if err := dev.replaceFilterProgram(dir, f, prog); err != nil {
			return fmt.Errorf("replace the program of the bpf filter pref %d on %s %s: %w", f.Info>>16, iface, dir, err)
		}
		done++
	}
	revert = false
	pin.KillPoint("tc-replace-" + dir.String() + "-swapped")
	if err := os.Rename(next, path); err != nil {
		// The filters run the new program; RecoverReplace moves the pin.
		return fmt.Errorf("move the pin of the new program %s to %s: %w", next, path, err)
	}
	pin.KillPoint("tc-replace-" + dir.String() + "-renamed")
	return nil
}

// replaceFilterProgram makes the cls_bpf filter f, listed by bpfFilters
// on side dir, run prog in direct-action mode. The filter keeps its
// parent, priority, protocol and handle.
func (d *netdev) replaceFilterProgram(dir Direction, f tc.Object, prog *ebpf.Program) error {
	fd := uint32(prog.FD())
	flags := uint32(tc.BpfActDirect)
	name := "ccload"
	if info, err := prog.Info(); err == nil && info.Name != "" {
		name = info.Name
	}
	obj := &tc.Object{
		Msg:       d.msg(f.Handle, clsactFilterParent(dir), f.Info),
		Attribute: tc.Attribute{Kind: "bpf", BPF: &tc.Bpf{FD: &fd, Name: &name, Flags: &flags}},
	}
	err := d.tc.Filter().Replace(obj)
	runtime.KeepAlive(prog)
	return err
}

// RecoverReplace finishes or undoes a clsact ReplacePinned of the
// attachment pinned at path that a killed process left (see the comment
// above ReplacePinned): when a filter on side dir of iface runs the
// program pinned at ReplacingPin(path), the swap happened and that pin
// moves over path; otherwise it is removed. It reports whether there was
// one. It runs in the network namespace of iface, under the pin root's
// Lock.
func RecoverReplace(iface string, dir Direction, path string) (bool, error) {
	next := ReplacingPin(path)
	if _, err := os.Lstat(next); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	swapped, err := runsPinned(iface, dir, next)
	if err != nil {
		return true, fmt.Errorf("recover the replacement of %s: %w", path, err)
	}
	if swapped {
		if err := os.Rename(next, path); err != nil {
			return true, fmt.Errorf("recover the replacement of %s: move the new program's pin in: %w", path, err)
		}
		return true, nil
	}
	if err := os.Remove(next); err != nil && !errors.Is(err, os.ErrNotExist) {
		return true, fmt.Errorf("recover the replacement of %s: remove the new program's pin: %w", path, err)
	}
	return true, nil
}

// runsPinned reports whether a cls_bpf filter on side dir of iface runs
// the program pinned at path. A pin that holds no tc program, or an
// interface that is gone, runs nothing.
func runsPinned(iface string, dir Direction, path string) (bool, error) {
	prog, err := ebpf.LoadPinnedProgram(path, nil)
	if err != nil {
		return false, nil
	}
	defer prog.Close()
	id, err := clsProgramID(prog, path)
	if err != nil {
		return false, nil
	}
	ifi, err := LookupInterface(iface)
	if err != nil || ifi == nil {
		return false, err
	}
	dev, err := openNetdev(iface)
	if err != nil {
		return false, err
	}
	defer dev.close()
	fs, err := dev.filtersOf(dir, id)
	if err != nil {
		return false, err
	}
	return len(fs) > 0, nil
}
