package qdisc

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/cilium/ebpf"
	tc "github.com/florianl/go-tc"
	"github.com/florianl/go-tc/core"
	"golang.org/x/sys/unix"
)

const (
	// clsactHandle and clsactParent are where clsact lives: handle
	// "ffff:", parent ffff:fff1 (TC_H_CLSACT, the same as TC_H_INGRESS).
	clsactHandle = tc.HandleRoot &^ 0xffff
	clsactParent = tc.HandleIngress
	// filterHandle is the cls_bpf handle of a filter within its
	// priority; filters are told apart by their priority.
	filterHandle = 1
)

// clsactFilterParent returns the parent of filters on side d of clsact:
// ffff:fff2 for ingress, ffff:fff3 for egress.
func clsactFilterParent(d Direction) uint32 {
	if d == Ingress {
		return core.BuildHandle(tc.HandleRoot, tc.HandleMinIngress)
	}
	return core.BuildHandle(tc.HandleRoot, tc.HandleMinEgress)
}

// clsactFilter is a program attached as a direct-action cls_bpf filter,
// "tc filter add dev IFACE egress pref PRIO handle 1 bpf da fd FD".
type clsactFilter struct {
	dev    *netdev
	dir    Direction
	parent uint32
	prio   uint16
	// added is set once the kernel accepted the filter: only then is the
	// filter at (parent, prio, handle) this one, and close deletes it.
	added bool
}

// attachClsact adds a clsact qdisc to iface unless it has one, and
// attaches prog as a direct-action filter at priority prio on side dir.
// On error it removes what it added.
func attachClsact(iface string, prog *ebpf.Program, dir Direction, prio uint16) (_ *clsactFilter, err error) {
	dev, err := openNetdev(iface)
	if err != nil {
		return nil, err
	}
	f := &clsactFilter{dev: dev, dir: dir, parent: clsactFilterParent(dir), prio: prio}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.close())
		}
	}()

	qd := &tc.Object{Msg: dev.msg(clsactHandle, clsactParent, 0), Attribute: tc.Attribute{Kind: "clsact"}}
	if err := dev.tc.Qdisc().Add(qd); err != nil && !errors.Is(err, unix.EEXIST) {
		if errUnknownKind(err) {
			return nil, fmt.Errorf("add clsact qdisc: %w: %w", ErrNoClsact, err)
		}
		return nil, fmt.Errorf("add clsact qdisc: %w", err)
	}

	fd := uint32(prog.FD())
	flags := uint32(tc.BpfActDirect)
	name := "ccload"
	if info, err := prog.Info(); err == nil && info.Name != "" {
		name = info.Name
	}
	filter := &tc.Object{
		Msg: f.msg(),
		Attribute: tc.Attribute{Kind: "bpf", BPF: &tc.Bpf{
			FD:    &fd,
			Name:  &name,
			Flags: &flags,
		}},
	}
	err = dev.tc.Filter().Add(filter)
	runtime.KeepAlive(prog)
	switch {
	case err == nil:
		f.added = true
		return f, nil
	case errors.Is(err, unix.EEXIST):
		return nil, fmt.Errorf("add bpf filter: a filter with priority %d handle %d exists already: %w", prio, filterHandle, err)
	case errUnknownKind(err):
		return nil, fmt.Errorf("add bpf filter: %w: %w", ErrNoClsBPF, err)
	}
	return nil, fmt.Errorf("add bpf filter: %w", err)
}

// msg is the tcmsg header that names this filter.
func (f *clsactFilter) msg() tc.Msg {
	return f.dev.msg(filterHandle, f.parent, core.FilterInfo(f.prio, unix.ETH_P_ALL))
}

// close deletes the filter if it was added and is still there, then the
// clsact qdisc if no filter is left on either side, then closes the
// socket. It is idempotent.
func (f *clsactFilter) close() error {
	if f.dev.tc == nil {
		return nil
	}
	err := f.remove()
	return errors.Join(err, f.dev.close())
}

func (f *clsactFilter) remove() error {
	d := f.dev
	present := false
	if f.added {
		var err error
		if present, err = f.present(); err != nil {
			return err
		}
	}
	if present {
		del := &tc.Object{Msg: f.msg(), Attribute: tc.Attribute{Kind: "bpf"}}
		if err := d.tc.Filter().Delete(del); err != nil && !errGone(err) {
			return fmt.Errorf("delete bpf filter from %s %s: %w", d.name, f.dir, err)
		}
	}

	return d.removeEmptyClsact()
}

// release closes the socket and leaves the filter attached. It is
// idempotent.
func (f *clsactFilter) release() error {
	return f.dev.close()
}

// removeEmptyClsact deletes the clsact qdisc of this interface if it has
// one and no filter is left on either side of it.
func (d *netdev) removeEmptyClsact() error {
	q, err := d.findQdisc("clsact", clsactHandle, clsactParent)
	if err != nil || q == nil {
		return err
	}
	for _, dir := range []Direction{Ingress, Egress} {
		fs, err := d.filters(clsactFilterParent(dir))
		if err != nil || len(fs) > 0 {
			return err
		}
	}
	qd := &tc.Object{Msg: d.msg(clsactHandle, clsactParent, 0), Attribute: tc.Attribute{Kind: "clsact"}}
	if err := d.tc.Qdisc().Delete(qd); err != nil && !errGone(err) {
		return fmt.Errorf("delete clsact qdisc from %s: %w", d.name, err)
	}
	return nil
}

// present reports whether the filter is attached.
func (f *clsactFilter) present() (bool, error) {
	fs, err := f.dev.filters(f.parent)
	if err != nil {
		return false, err
	}
	want := f.msg()
	for _, o := range fs {
		if o.Kind == "bpf" && o.Handle == want.Handle && o.Info == want.Info {
			return true, nil
		}
	}
	return false, nil
}

// RemoveStaleFilter deletes the cls_bpf filter at priority prio on side
// dir of iface's clsact qdisc if the program it runs is named name. A
// process that attached a program by clsact (kernels before 6.6) and died
// without detaching it leaves such a filter, and a new attach at the same
// priority fails with EEXIST until it is gone. A filter at prio that runs
// another program is left alone. It reports whether it deleted one.
func RemoveStaleFilter(iface string, dir Direction, prio uint16, name string) (bool, error) {
	d, err := openNetdev(iface)
	if err != nil {
		return false, err
	}
	defer d.close()
	fs, err := d.bpfFilters(dir, func(b *tc.Bpf, p uint16) bool {
		return p == prio && b.Name != nil && *b.Name == name
	})
	if err != nil || len(fs) == 0 {
		return false, err
	}
	if err := d.deleteFilter(dir, fs[0]); err != nil {
		return false, fmt.Errorf("delete the stale %s filter from %s %s: %w", name, iface, dir, err)
	}
	return true, nil
}
