package qdisc

import (
	"errors"
	"fmt"
	"net"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Direction is the side of an interface a program runs on.
type Direction int

const (
	// Egress runs the program on packets the interface sends.
	Egress Direction = iota
	// Ingress runs the program on packets the interface receives.
	Ingress
)

// String returns "egress" or "ingress".
func (d Direction) String() string {
	switch d {
	case Egress:
		return "egress"
	case Ingress:
		return "ingress"
	}
	return fmt.Sprintf("Direction(%d)", int(d))
}

// tcxAttachType returns the TCX attach type of d.
func (d Direction) tcxAttachType() ebpf.AttachType {
	if d == Ingress {
		return ebpf.AttachTCXIngress
	}
	return ebpf.AttachTCXEgress
}

// Method is how a program is attached to an interface.
type Method int

const (
	// MethodAuto picks MethodTCX where the kernel has TCX (6.6+) and
	// MethodClsact elsewhere.
	MethodAuto Method = iota
	// MethodTCX attaches through a TCX link. It needs no qdisc.
	MethodTCX
	// MethodClsact attaches a direct-action cls_bpf filter under a
	// clsact qdisc, which it adds if the interface has none.
	MethodClsact
)

// String returns "auto", "tcx" or "clsact".
func (m Method) String() string {
	switch m {
	case MethodAuto:
		return "auto"
	case MethodTCX:
		return "tcx"
	case MethodClsact:
		return "clsact"
	}
	return fmt.Sprintf("Method(%d)", int(m))
}

// MarshalText writes the method as String does, so that JSON shows "tcx"
// rather than a number.
func (m Method) MarshalText() ([]byte, error) {
	if m < MethodAuto || m > MethodClsact {
		return nil, fmt.Errorf("invalid tc attach method %d", int(m))
	}
	return []byte(m.String()), nil
}

// UnmarshalText reads what MarshalText writes: auto, tcx or clsact.
func (m *Method) UnmarshalText(b []byte) error {
	for _, c := range []Method{MethodAuto, MethodTCX, MethodClsact} {
		if string(b) == c.String() {
			*m = c
			return nil
		}
	}
	return fmt.Errorf("unknown tc attach method %q: want auto, tcx or clsact", b)
}

// DefaultPriority is the cls_bpf filter priority (tc's "pref") used with
// MethodClsact when AttachOptions.Priority is 0. It is unusual enough not
// to collide with filters of other tools, which tc numbers from 49152
// (0xc000) down.
const DefaultPriority = 0xcc0f

// AttachOptions says where and how Attach attaches a program.
type AttachOptions struct {
	// Direction is Egress (the default) or Ingress.
	Direction Direction
	// Method is MethodAuto (the default), MethodTCX or MethodClsact.
	Method Method
	// Priority is the cls_bpf filter's priority with MethodClsact; lower
	// runs first. 0 means DefaultPriority. Two programs attached to one
	// side of one interface by clsact need different priorities. TCX
	// ignores it and runs the program after those attached before.
	Priority uint16
}

// Attachment is one tc program attached to one side of one interface.
type Attachment struct {
	iface  string
	dir    Direction
	method Method
	tcx    link.Link     // MethodTCX
	filter *clsactFilter // MethodClsact
	// prog is this attachment's own handle on the program with
	// MethodClsact, which Pin pins: the filter's kernel reference is not
	// an object bpffs can hold.
	prog *ebpf.Program
	// pinned is the path Pin pinned the link or the program at, or "".
	pinned string
}

// Attach attaches prog, a SchedCLS program written for direct-action mode
// (it returns a TC_ACT_* verdict), to iface, an interface of the calling
// thread's network namespace. With MethodAuto it tries TCX first and
// falls back to clsact when the kernel has no TCX.
//
// The kernel holds its own reference to prog: closing prog does not detach
// it; Close does.
func Attach(iface string, prog *ebpf.Program, opts AttachOptions) (*Attachment, error) {
	if err := opts.validate(prog); err != nil {
		return nil, fmt.Errorf("attach tc program to %s: %w", iface, err)
	}
	a := &Attachment{iface: iface, dir: opts.Direction}

	if opts.Method == MethodAuto || opts.Method == MethodTCX {
		ifi, err := net.InterfaceByName(iface)
		if err != nil {
			return nil, fmt.Errorf("attach tc program: find interface %s: %w", iface, err)
		}
		l, err := link.AttachTCX(link.TCXOptions{
			Interface: ifi.Index,
			Program:   prog,
			Attach:    opts.Direction.tcxAttachType(),
		})
		if err == nil {
			a.method, a.tcx = MethodTCX, l
			return a, nil
		}
		if opts.Method == MethodTCX || !errors.Is(err, ebpf.ErrNotSupported) {
			return nil, fmt.Errorf("attach tc program to %s %s with tcx: %w", iface, opts.Direction, err)
		}
	}

	prio := opts.Priority
	if prio == 0 {
		prio = DefaultPriority
	}
	own, err := prog.Clone()
	if err != nil {
		return nil, fmt.Errorf("attach tc program to %s %s with clsact: duplicate the program's handle: %w", iface, opts.Direction, err)
	}
	f, err := attachClsact(iface, prog, opts.Direction, prio)
	if err != nil {
		own.Close()
		return nil, fmt.Errorf("attach tc program to %s %s with clsact: %w", iface, opts.Direction, err)
	}
	a.method, a.filter, a.prog = MethodClsact, f, own
	return a, nil
}

func (o AttachOptions) validate(prog *ebpf.Program) error {
	if o.Direction != Egress && o.Direction != Ingress {
		return fmt.Errorf("invalid direction %s", o.Direction)
	}
	if o.Method < MethodAuto || o.Method > MethodClsact {
		return fmt.Errorf("invalid method %s", o.Method)
	}
	if prog == nil {
		return errors.New("no program")
	}
	if prog.Type() != ebpf.SchedCLS {
		return fmt.Errorf("program type is %s, want %s", prog.Type(), ebpf.SchedCLS)
	}
	return nil
}

// Method returns how the program was attached: MethodTCX or MethodClsact.
func (a *Attachment) Method() Method {
	return a.method
}

// Direction returns the side of the interface the program runs on.
func (a *Attachment) Direction() Direction {
	return a.dir
}

// Interface returns the name of the interface.
func (a *Attachment) Interface() string {
	return a.iface
}

// Close detaches the program: it removes the pin Pin made, then closes
// the TCX link, or deletes the cls_bpf filter and then the clsact qdisc if
// no filter is left on it. It is idempotent, and does nothing after
// Release.
func (a *Attachment) Close() error {
	err := a.unpin()
	if a.tcx != nil {
		if cerr := a.tcx.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("detach tcx program from %s %s: %w", a.iface, a.dir, cerr))
		}
		a.tcx = nil
	}
	if a.filter != nil {
		err = errors.Join(err, a.filter.close())
		a.filter = nil
	}
	if a.prog != nil {
		a.prog.Close()
		a.prog = nil
	}
	return err
}
