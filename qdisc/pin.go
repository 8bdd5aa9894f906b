package qdisc

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	tc "github.com/florianl/go-tc"
)

// An attachment outlives the process that made it in three steps: Attach,
// then Pin at a path on a bpf filesystem, then Release. Any process can
// later remove it with DetachPinned(iface, direction, path).
//
// What is pinned depends on the method. A TCX link exists only as long as
// something holds it, so its pin is what keeps the program attached. A
// cls_bpf filter stays in the kernel by itself; the pinned program is how
// DetachPinned finds that filter again: by the program's ID, so that it
// never removes a filter someone else added.

// Pin pins the attachment at path, a new file on a bpf filesystem: the TCX
// link with MethodTCX, the program with MethodClsact. Pinning again moves
// the pin. Close removes the pin before it detaches, so a pinned
// attachment that is closed leaves nothing behind; if the pin was moved
// or renamed by other means since, remove it first.
func (a *Attachment) Pin(path string) error {
	var err error
	switch {
	case a.tcx != nil:
		err = a.tcx.Pin(path)
	case a.prog != nil:
		err = a.prog.Pin(path)
	default:
		return fmt.Errorf("pin the tc program of %s %s at %s: the attachment was closed or released", a.iface, a.dir, path)
	}
	if err != nil {
		return fmt.Errorf("pin the tc program of %s %s (%s) at %s: %w", a.iface, a.dir, a.method, path, err)
	}
	a.pinned = path
	return nil
}

// unpin removes the pin Pin made, if any.
func (a *Attachment) unpin() error {
	if a.pinned == "" {
		return nil
	}
	var err error
	switch {
	case a.tcx != nil:
		err = a.tcx.Unpin()
	case a.prog != nil:
		err = a.prog.Unpin()
	}
	if err != nil {
		return fmt.Errorf("remove the pin %s of %s %s: %w", a.pinned, a.iface, a.dir, err)
	}
	a.pinned = ""
	return nil
}

// Release closes this process's handles on the attachment and leaves the
// program attached: a TCX link stays attached through its pin, a cls_bpf
// filter stays in the kernel whether or not it was pinned. After Release,
// Close does nothing; DetachPinned removes the attachment. A TCX link that
// is not pinned would be detached by Release, so Release refuses it with
// an error and leaves the attachment as it was.
func (a *Attachment) Release() error {
	if a.tcx != nil && a.pinned == "" {
		return fmt.Errorf("release the tc program of %s %s: its tcx link is not pinned, and releasing it would detach it; call Pin first, or Close to detach it", a.iface, a.dir)
	}
	var err error
	if a.tcx != nil {
		if cerr := a.tcx.Close(); cerr != nil {
			err = fmt.Errorf("release the tcx link of %s %s: %w", a.iface, a.dir, cerr)
		}
		a.tcx = nil
	}
	if a.filter != nil {
		err = errors.Join(err, a.filter.release())
		a.filter = nil
	}
	if a.prog != nil {
		a.prog.Close()
		a.prog = nil
	}
	a.pinned = ""
	return err
}

// PinnedAttachment describes an attachment pinned with Pin, as
// InspectPinned finds it.
type PinnedAttachment struct {
	// Method is MethodTCX for a pinned TCX link and MethodClsact for a
	// pinned program.
	Method Method
	// Attached reports whether the program still runs on the interface
	// and direction asked about. It is false when the interface was
	// deleted, or the filter was removed by other means: the pin is then
	// all that is left.
	Attached bool
	// ProgramID is the kernel's ID of the attached program.
	ProgramID ebpf.ProgramID
}

// InspectPinned reports what is pinned at path, a pin made by
// Attachment.Pin, and whether it is still attached to side dir of iface,
// an interface of the calling thread's network namespace. A missing path
// yields an error that wraps os.ErrNotExist.
func InspectPinned(iface string, dir Direction, path string) (PinnedAttachment, error) {
	var res PinnedAttachment
	lnk, prog, err := openPinned(path)
	if err != nil {
		return res, fmt.Errorf("inspect the tc attachment pinned at %s: %w", path, err)
	}
	if lnk != nil {
		defer lnk.Close()
		info, err := tcxInfo(lnk, dir, path)
		if err != nil {
			return res, err
		}
		res.Method, res.ProgramID = MethodTCX, info.Program
		if ifindex := info.TCX().Ifindex; ifindex != 0 {
			ifi, err := LookupInterface(iface)
			if err != nil {
				return res, err
			}
			res.Attached = ifi != nil && uint32(ifi.Index) == ifindex
		}
		return res, nil
	}
	defer prog.Close()
	id, err := clsProgramID(prog, path)
	if err != nil {
		return res, err
	}
	res.Method, res.ProgramID = MethodClsact, id
	ifi, err := LookupInterface(iface)
	if err != nil || ifi == nil {
		return res, err
	}
	dev, err := openNetdev(iface)
	if err != nil {
		return res, err
	}
	defer dev.close()
	fs, err := dev.filtersOf(dir, id)
	if err != nil {
		return res, err
	}
	res.Attached = len(fs) > 0
	return res, nil
}

// DetachPinned removes the attachment that Attachment.Pin pinned at path,
// on side dir of iface in the calling thread's network namespace; it works
// from any process. For a pinned TCX link it removes the pin and closes
// the link, which detaches it. For a pinned program it deletes the
// cls_bpf filters on iface and dir that run that very program (found by
// its ID; other filters stay), then the clsact qdisc if no filter is left
// on it, and then the pin. An interface that no longer exists took its
// filters and links with it: only the pin is removed.
//
// It refuses, and changes nothing, when path holds something else, a link
// attached to another interface or direction, or a program that no filter
// on iface and dir runs (InspectPinned tells that case apart: remove such
// a pin with os.Remove). A missing path yields
// an error that wraps os.ErrNotExist.
func DetachPinned(iface string, dir Direction, path string) error {
	lnk, prog, err := openPinned(path)
	if err != nil {
		return fmt.Errorf("detach the tc program pinned at %s: %w", path, err)
	}
	if lnk != nil {
		return detachPinnedLink(lnk, iface, dir, path)
	}
	return detachPinnedProgram(prog, iface, dir, path)
}

func detachPinnedLink(lnk link.Link, iface string, dir Direction, path string) error {
	defer lnk.Close()
	info, err := tcxInfo(lnk, dir, path)
	if err != nil {
		return err
	}
	if ifindex := info.TCX().Ifindex; ifindex != 0 {
		ifi, err := LookupInterface(iface)
		if err != nil {
			return err
		}
		if ifi == nil {
			return fmt.Errorf("detach the tcx link pinned at %s: it is attached to interface index %d, and this network namespace has no interface %s; run this in the network namespace it was attached in", path, ifindex, iface)
		}
		if uint32(ifi.Index) != ifindex {
			return fmt.Errorf("detach the tcx link pinned at %s: it is attached to interface index %d, not to %s (index %d); refusing to remove it", path, ifindex, iface, ifi.Index)
		}
	}
	// Unpin first, so that closing the last handle below detaches the
	// program at once.
	if err := lnk.Unpin(); err != nil {
		return fmt.Errorf("detach the tcx link pinned at %s: remove the pin: %w", path, err)
	}
	if err := lnk.Close(); err != nil {
		return fmt.Errorf("detach the tcx link pinned at %s from %s %s: %w", path, iface, dir, err)
	}
	return nil
}

func detachPinnedProgram(prog *ebpf.Program, iface string, dir Direction, path string) error {
	defer prog.Close()
	id, err := clsProgramID(prog, path)
	if err != nil {
		return err
	}
	ifi, err := LookupInterface(iface)
	if err != nil {
		return err
	}
	if ifi != nil {
		dev, err := openNetdev(iface)
		if err != nil {
			return fmt.Errorf("detach the program pinned at %s: %w", path, err)
		}
		defer dev.close()
		n, err := dev.deleteFiltersOf(dir, id)
		if err != nil {
			return fmt.Errorf("detach the program pinned at %s: %w", path, err)
		}
		if n == 0 {
			return fmt.Errorf("detach the program pinned at %s: no filter on %s %s runs it (program %d); it is attached elsewhere, or its filter was deleted by other means (then remove the pin: rm %s)", path, iface, dir, id, path)
		}
	}
	if err := prog.Unpin(); err != nil {
		return fmt.Errorf("detach the program pinned at %s: remove the pin: %w", path, err)
	}
	return nil
}

// openPinned opens the object pinned at path: a link or a program,
// exactly one of which is returned. A missing path yields an error that
// wraps os.ErrNotExist.
func openPinned(path string) (link.Link, *ebpf.Program, error) {
	if _, err := os.Lstat(path); err != nil {
		return nil, nil, err
	}
	lnk, lerr := link.LoadPinnedLink(path, nil)
	if lerr == nil {
		return lnk, nil, nil
	}
	prog, perr := ebpf.LoadPinnedProgram(path, nil)
	if perr == nil {
		return nil, prog, nil
	}
	return nil, nil, fmt.Errorf("%s is neither a pinned link nor a pinned program: %w", path, errors.Join(lerr, perr))
}

// tcxInfo reads the info of lnk and checks that it is a TCX link on
// side dir.
func tcxInfo(lnk link.Link, dir Direction, path string) (*link.Info, error) {
	info, err := lnk.Info()
	if err != nil {
		return nil, fmt.Errorf("read the link pinned at %s: %w", path, err)
	}
	tcx := info.TCX()
	if info.Type != link.TCXType || tcx == nil {
		return nil, fmt.Errorf("the link pinned at %s is not a tcx link (link type %d); refusing to touch it", path, info.Type)
	}
	if got := ebpf.AttachType(tcx.AttachType); got != dir.tcxAttachType() {
		return nil, fmt.Errorf("the tcx link pinned at %s is attached as %s, not on %s; refusing to touch it", path, got, dir)
	}
	return info, nil
}

// clsProgramID returns the ID of prog, which must be a tc program.
func clsProgramID(prog *ebpf.Program, path string) (ebpf.ProgramID, error) {
	if prog.Type() != ebpf.SchedCLS {
		return 0, fmt.Errorf("the program pinned at %s is a %s program, not a tc one; refusing to touch it", path, prog.Type())
	}
	info, err := prog.Info()
	if err != nil {
		return 0, fmt.Errorf("read the program pinned at %s: %w", path, err)
	}
	id, ok := info.ID()
	if !ok {
		return 0, fmt.Errorf("the kernel reports no ID for the program pinned at %s", path)
	}
	return id, nil
}

// LookupInterface finds the interface called name in the calling thread's
// network namespace, or returns nil (and no error) when there is none.
// Unlike net.InterfaceByName it tells "no such interface" apart from a
// failure to list them.
func LookupInterface(name string) (*net.Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list network interfaces: %w", err)
	}
	for i := range ifs {
		if ifs[i].Name == name {
			return &ifs[i], nil
		}
	}
	return nil, nil
}

// filtersOf lists the cls_bpf filters on side dir of the clsact qdisc
// that run program id.
func (d *netdev) filtersOf(dir Direction, id ebpf.ProgramID) ([]tc.Object, error) {
	return d.bpfFilters(dir, func(b *tc.Bpf, _ uint16) bool {
		return b.ID != nil && ebpf.ProgramID(*b.ID) == id
	})
}

// bpfFilters lists the cls_bpf filters on side dir of the clsact qdisc
// for whose attributes and priority match holds.
func (d *netdev) bpfFilters(dir Direction, match func(b *tc.Bpf, prio uint16) bool) ([]tc.Object, error) {
	fs, err := d.filters(clsactFilterParent(dir))
	if err != nil {
		return nil, err
	}
	var out []tc.Object
	for _, f := range fs {
		if f.Kind == "bpf" && f.BPF != nil && match(f.BPF, uint16(f.Info>>16)) {
			out = append(out, f)
		}
	}
	return out, nil
}

// deleteFilter deletes filter f, listed by bpfFilters, from side dir. A
// filter already gone is no error.
func (d *netdev) deleteFilter(dir Direction, f tc.Object) error {
	del := &tc.Object{
		Msg:       d.msg(f.Handle, clsactFilterParent(dir), f.Info),
		Attribute: tc.Attribute{Kind: "bpf"},
	}
	if err := d.tc.Filter().Delete(del); err != nil && !errGone(err) {
		return err
	}
	return nil
}

// deleteFiltersOf deletes the cls_bpf filters on side dir that run
// program id, then the clsact qdisc if that left it without filters. It
// returns how many filters it deleted.
func (d *netdev) deleteFiltersOf(dir Direction, id ebpf.ProgramID) (int, error) {
	fs, err := d.filtersOf(dir, id)
	if err != nil || len(fs) == 0 {
		return 0, err
	}
	for _, f := range fs {
		if err := d.deleteFilter(dir, f); err != nil {
			return 0, fmt.Errorf("delete the bpf filter pref %d of program %d from %s %s: %w", f.Info>>16, id, d.name, dir, err)
		}
	}
	return len(fs), d.removeEmptyClsact()
}

// Filter is a cls_bpf filter on one side of an interface's clsact qdisc.
type Filter struct {
	Prio      uint16
	Handle    uint32
	ProgramID ebpf.ProgramID
	Name      string // the program's name, as the kernel reports it
}

// Filters lists the cls_bpf filters on side dir of iface's clsact qdisc,
// in the calling thread's network namespace: none when iface has no
// clsact qdisc. Tests and status read them to tell which program a side
// runs, and by which filter.
func Filters(iface string, dir Direction) ([]Filter, error) {
	dev, err := openNetdev(iface)
	if err != nil {
		return nil, err
	}
	defer dev.close()
	fs, err := dev.bpfFilters(dir, func(*tc.Bpf, uint16) bool { return true })
	if err != nil {
		return nil, err
	}
	var out []Filter
	for _, f := range fs {
		flt := Filter{Prio: uint16(f.Info >> 16), Handle: f.Handle}
		if f.BPF.ID != nil {
			flt.ProgramID = ebpf.ProgramID(*f.BPF.ID)
		}
		if f.BPF.Name != nil {
			flt.Name = *f.BPF.Name
		}
		out = append(out, flt)
	}
	return out, nil
}
