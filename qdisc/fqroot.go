package qdisc

import (
	"errors"
	"fmt"

	tc "github.com/florianl/go-tc"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/kernel"
)

// The kinds of FQRoot.Kind.
const (
	fqRootFQ   = "fq"    // fq is the root qdisc
	fqRootMQFQ = "mq+fq" // mq is the root qdisc, with an fq on every tx queue
)

// FQRoot describes the fq at the root of an interface, the qdisc that
// enforces the departure times (EDT) a tc program writes to skb->tstamp.
type FQRoot struct {
	// Iface is the interface's name.
	Iface string `json:"iface"`
	// Kind is "fq" for an fq root qdisc, or "mq+fq" for an mq root qdisc
	// with an fq under each of its tx queues.
	Kind string `json:"kind"`
	// Queues is the number of fq instances: 1 for a root fq, one per tx
	// queue under mq.
	Queues int `json:"queues"`
	// Owned says that ccload installed the root qdisc (its handle is
	// cc0f:), so that RemoveFQRoot removes it.
	Owned bool `json:"owned"`
	// Replaced names the root qdisc that EnsureFQRoot replaced because it
	// was told to, as tc(8) shows it ("htb 1:"). It is empty when
	// EnsureFQRoot replaced only the kernel's default root qdisc, or
	// nothing.
	Replaced string `json:"replaced,omitempty"`
}

// EnsureFQRoot makes sure the root of iface (an interface of the calling
// thread's netns) is fq, or mq with an fq child on every tx queue.
//
//   - A root that is fq already (whatever its handle), or mq with fq under
//     every queue, is used as it is: nothing changes, cfg is not applied,
//     and Owned says whether ccload installed it.
//   - The kernel's default root (handle 0: noqueue, pfifo_fast, fq_codel,
//     mq with the default children) is replaced: by an fq with handle
//     cc0f: on a device with one tx queue, and by an mq with handle cc0f:
//     and an fq (with cfg) under each of its classes cc0f:1 to cc0f:N on a
//     device with N > 1 tx queues. An mq with handle cc0f: that lacks fq
//     on some queue, left by an interrupted ccload, is replaced the same
//     way.
//   - Any other root qdisc (one a user installed: htb 1:, tbf, ...) is
//     refused with an error of kind kernel.KindAlreadyAttached that names
//     it, unless replace is set: then fq (or mq and fq) takes its place,
//     and Replaced names it. RemoveFQRoot later leaves the kernel's
//     default root qdisc, not the one replaced.
//
// A kernel without sch_fq yields an error of kind kernel.KindKernelTooOld
// that wraps ErrNoFQ. A failure leaves the root as it was, with one
// exception: on a device with several tx queues, a failure after fq was
// found to work in a replaced root's place (the device going away, say)
// leaves the kernel's default root qdisc instead. EnsureFQRoot does not
// lock out other programs that change the root at the same time.
func EnsureFQRoot(iface string, cfg FQConfig, replace bool) (FQRoot, error) {
	opts, err := cfg.options()
	if err != nil {
		return FQRoot{}, kernel.NewError(kernel.KindBadParam,
			"fix fq's options (a zero option keeps the kernel's default)", err,
			"bad fq options for %s", iface)
	}
	d, err := openRootDev(iface)
	if err != nil {
		return FQRoot{}, lookupError(iface, err)
	}
	defer d.close()

	st, err := d.readRoot()
	if err != nil {
		return FQRoot{}, fmt.Errorf("ensure fq at the root of %s: %w", iface, err)
	}
	if r, ok := st.fqRoot(iface); ok {
		return r, nil
	}
	var replaced string
	switch {
	case st.isDefault():
	case st.root.Kind == "mq" && st.root.Handle == fqHandle:
		// ccload's own mq, with something other than fq on some queue.
		if err := d.deleteMQ(); err != nil && !errGone(err) {
			return FQRoot{}, fmt.Errorf("remove the incomplete mq %s from %s: %w", handleString(fqHandle), iface, err)
		}
	case !replace:
		return FQRoot{}, foreignRootError(iface, describeQdisc(st.root))
	default:
		replaced = describeQdisc(st.root)
	}
	r, err := d.install(opts, replaced != "")
	if err != nil {
		return FQRoot{}, err
	}
	r.Replaced = replaced
	return r, nil
}

// InspectFQRoot reports what EnsureFQRoot would find on iface, an
// interface of the calling thread's netns, without changing anything: ok
// is true when the root is fq, or mq with fq under every queue, and the
// FQRoot describes it. When ok is false, the FQRoot holds only Iface.
func InspectFQRoot(iface string) (FQRoot, bool, error) {
	d, err := openRootDev(iface)
	if err != nil {
		return FQRoot{}, false, lookupError(iface, err)
	}
	defer d.close()
	st, err := d.readRoot()
	if err != nil {
		return FQRoot{}, false, fmt.Errorf("inspect the root qdisc of %s: %w", iface, err)
	}
	r, ok := st.fqRoot(iface)
	return r, ok, nil
}

// RemoveFQRoot removes the root qdisc of iface, an interface of the
// calling thread's netns, only if ccload installed it (handle cc0f:, kind
// fq or mq); the kernel then puts its default root qdisc back. It reports
// whether it removed one. It is idempotent, and an interface that is gone
// is no error.
func RemoveFQRoot(iface string) (bool, error) {
	d, err := openRootDev(iface)
	if err != nil {
		if errGone(err) {
			return false, nil
		}
		return false, fmt.Errorf("remove fq from the root of %s: %w", iface, err)
	}
	defer d.close()
	st, err := d.readRoot()
	if err != nil {
		return false, fmt.Errorf("remove fq from the root of %s: %w", iface, err)
	}
	if st.root == nil || st.root.Handle != fqHandle {
		return false, nil
	}
	switch st.root.Kind {
	case "fq":
		// go-tc wants fq options even to delete; empty ones send none.
		// The kernel checks the kind and handle it is sent.
		del := &tc.Object{Msg: d.msg(fqHandle, tc.HandleRoot, 0), Attribute: tc.Attribute{Kind: "fq", Fq: &tc.Fq{}}}
		err = d.tc.Qdisc().Delete(del)
	case "mq":
		err = d.deleteMQ()
	default:
		return false, nil
	}
	if err != nil {
		if errGone(err) {
			return false, nil
		}
		return false, fmt.Errorf("remove root qdisc %s %s from %s: %w", st.root.Kind, handleString(fqHandle), iface, err)
	}
	return true, nil
}

// rootDev is one interface for EnsureFQRoot and its siblings: a netdev,
// whose go-tc socket handles fq, and a vishvananda/netlink handle in the
// same netns for what go-tc cannot do: read the number of tx queues, and
// add or delete mq, a kind go-tc does not implement.
type rootDev struct {
	*netdev
	nl       *netlink.Handle
	txQueues int // IFLA_NUM_TX_QUEUES, at least 1
}

// openRootDev looks up iface in the calling thread's netns and opens the
// sockets there. An interface that does not exist yields an error
// wrapping unix.ENODEV.
func openRootDev(iface string) (*rootDev, error) {
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open rtnetlink socket for %s: %w", iface, err)
	}
	l, err := nl.LinkByName(iface)
	if err != nil {
		nl.Close()
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			err = unix.ENODEV
		}
		return nil, fmt.Errorf("find interface %s: %w", iface, err)
	}
	tcnl, err := tc.Open(&tc.Config{})
	if err != nil {
		nl.Close()
		return nil, fmt.Errorf("open rtnetlink socket for %s: %w", iface, err)
	}
	return &rootDev{
		netdev:   &netdev{name: iface, ifindex: uint32(l.Attrs().Index), tc: tcnl},
		nl:       nl,
		txQueues: max(l.Attrs().NumTxQueues, 1),
	}, nil
}

// close closes both sockets. Errors closing a netlink socket change
// nothing for the caller, so they are dropped.
func (d *rootDev) close() {
	d.nl.Close()
	_ = d.netdev.close()
}

// lookupError turns openRootDev's error into the one to return.
func lookupError(iface string, err error) error {
	if errors.Is(err, unix.ENODEV) {
		return kernel.NewError(kernel.KindBadParam,
			"check the name with `ip link` in the network namespace ccload runs in", err,
			"interface %s does not exist", iface)
	}
	return err
}

// rootState is the root qdisc of an interface and the qdiscs right under
// its classes.
type rootState struct {
	root     *tc.Object // nil when netlink lists none
	children []tc.Object
}

// readRoot lists the root qdisc and its children.
func (d *rootDev) readRoot() (rootState, error) {
	qs, err := d.qdiscs()
	if err != nil {
		return rootState{}, err
	}
	var st rootState
	for i := range qs {
		if qs[i].Parent == tc.HandleRoot {
			st.root = &qs[i]
			break
		}
	}
	if st.root == nil {
		return st, nil
	}
	// The children's parents are the root's classes, major:minor with the
	// root's major and a minor above 0. A default mq has handle 0, so its
	// children's parents are :1, :2, ...
	major := st.root.Handle &^ 0xffff
	for _, q := range qs {
		if q.Parent != tc.HandleRoot && q.Parent&^0xffff == major && q.Parent&0xffff != 0 {
			st.children = append(st.children, q)
		}
	}
	return st, nil
}

// fqRoot describes the root when it is fq, or mq with fq under every
// queue; otherwise it returns an FQRoot with only Iface, and false.
func (st rootState) fqRoot(iface string) (FQRoot, bool) {
	none := FQRoot{Iface: iface}
	if st.root == nil {
		return none, false
	}
	owned := st.root.Handle == fqHandle
	switch st.root.Kind {
	case "fq":
		return FQRoot{Iface: iface, Kind: fqRootFQ, Queues: 1, Owned: owned}, true
	case "mq":
		if len(st.children) == 0 {
			return none, false
		}
		for _, c := range st.children {
			if c.Kind != "fq" {
				return none, false
			}
		}
		return FQRoot{Iface: iface, Kind: fqRootMQFQ, Queues: len(st.children), Owned: owned}, true
	}
	return none, false
}

// isDefault reports whether the root is the kernel's default (handle 0),
// or missing.
func (st rootState) isDefault() bool {
	return st.root == nil || st.root.Handle == 0
}

// describeQdisc names a qdisc as tc(8) shows it: "htb 1:".
func describeQdisc(q *tc.Object) string {
	return fmt.Sprintf("%s %s", q.Kind, handleString(q.Handle))
}

// install puts fq at the root (one tx queue), or mq with an fq per queue.
// foreign says that the root is somebody's qdisc to replace; otherwise it
// is the kernel's default, which the kernel lets a new root take the place
// of.
func (d *rootDev) install(opts *tc.Fq, foreign bool) (FQRoot, error) {
	fq := func(handle, parent uint32) *tc.Object {
		return &tc.Object{Msg: d.msg(handle, parent, 0), Attribute: tc.Attribute{Kind: "fq", Fq: opts}}
	}
	if d.txQueues == 1 || foreign {
		add := d.tc.Qdisc().Add
		if foreign {
			// NLM_F_REPLACE: the kernel answers EEXIST without it.
			add = d.tc.Qdisc().Replace
		}
		if err := add(fq(fqHandle, tc.HandleRoot)); err != nil {
			return FQRoot{}, d.installError(err, "fq", handleString(fqHandle), "root")
		}
		if d.txQueues == 1 {
			return FQRoot{Iface: d.name, Kind: fqRootFQ, Queues: 1, Owned: true}, nil
		}
		// A multiqueue device with somebody's root: fq took that root's
		// place above, where a kernel without fq refuses it and leaves the
		// root as it was (a failure further down could only leave the
		// kernel's default). Now fq makes way for mq.
		if err := (&FQ{dev: d.netdev}).remove(); err != nil {
			return FQRoot{}, err
		}
	}

	mq := &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: int(d.ifindex), Handle: fqHandle, Parent: tc.HandleRoot},
		QdiscType:  "mq",
	}
	if err := d.nl.QdiscAdd(mq); err != nil {
		return FQRoot{}, d.installError(err, "mq", handleString(fqHandle), "root")
	}
	for i := 1; i <= d.txQueues; i++ {
		class := fqHandle | uint32(i)
		// Handle 0: the kernel picks one. Add, not Replace: the kernel
		// lets a new qdisc take the place of the default (handle 0) one
		// under the class.
		if err := d.tc.Qdisc().Add(fq(0, class)); err != nil {
			err = d.installError(err, "fq", "", handleString(class))
			if derr := d.deleteMQ(); derr != nil && !errGone(derr) {
				err = errors.Join(err, fmt.Errorf("remove the mq %s again: %w", handleString(fqHandle), derr))
			}
			return FQRoot{}, err
		}
	}
	return FQRoot{Iface: d.name, Kind: fqRootMQFQ, Queues: d.txQueues, Owned: true}, nil
}

// installError explains the kernel's refusal to add a qdisc of kind with
// handle ("" when the kernel picks it) at parent.
func (d *rootDev) installError(err error, kind, handle, parent string) error {
	what := kind
	if handle != "" {
		what += " " + handle
	}
	switch {
	case kind == "fq" && errUnknownKind(err):
		return noFQError(d.name, err)
	case errors.Is(err, unix.EEXIST):
		// Somebody changed the root since it was read.
		return fmt.Errorf("add %s at %s of %s: %s: %w", what, parent, d.name, describeRoot(d.netdev), err)
	}
	return fmt.Errorf("add %s at %s of %s: %w", what, parent, d.name, err)
}

// deleteMQ deletes the mq root qdisc with handle cc0f: and with it the
// qdiscs under it; the kernel puts its default root back. The kernel
// checks the handle, so a root that is not this one is left alone.
func (d *rootDev) deleteMQ() error {
	return d.nl.QdiscDel(&netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: int(d.ifindex), Handle: fqHandle, Parent: tc.HandleRoot},
		QdiscType:  "mq",
	})
}

// noFQError says that the kernel has no sch_fq. It wraps ErrNoFQ and err.
func noFQError(iface string, err error) error {
	return kernel.NewError(kernel.KindKernelTooOld,
		noFQFix+" (`ccload onramp enable --observe` measures without pausing, and needs no fq)",
		fmt.Errorf("%w: %w", ErrNoFQ, err),
		"this kernel has no fq qdisc (CONFIG_NET_SCH_FQ) to put at the root of %s", iface)
}

// foreignRootError refuses to replace root, somebody's root qdisc on
// iface.
func foreignRootError(iface, root string) error {
	return kernel.NewError(kernel.KindAlreadyAttached,
		fmt.Sprintf("pass --replace-qdisc to replace it with fq (`ccload onramp disable` then leaves the kernel's default root qdisc, not %s), or remove it first: tc qdisc del dev %s root; --observe measures without pausing, and keeps it", root, iface),
		nil, "root qdisc %s is installed on %s", root, iface)
}
