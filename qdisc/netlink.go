package qdisc

import (
	"errors"
	"fmt"
	"net"

	tc "github.com/florianl/go-tc"
	"golang.org/x/sys/unix"
)

// netdev is one interface of the calling thread's network namespace, with
// an rtnetlink socket opened in that namespace. The socket stays bound to
// the namespace, so its methods work from any goroutine.
type netdev struct {
	name    string
	ifindex uint32
	tc      *tc.Tc
}

// openNetdev looks up iface in the calling thread's network namespace and
// opens a traffic-control socket there.
func openNetdev(iface string) (*netdev, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, fmt.Errorf("find interface %s: %w", iface, err)
	}
	tcnl, err := tc.Open(&tc.Config{})
	if err != nil {
		return nil, fmt.Errorf("open rtnetlink socket for %s: %w", iface, err)
	}
	return &netdev{name: iface, ifindex: uint32(ifi.Index), tc: tcnl}, nil
}

// close closes the socket. It is idempotent.
func (d *netdev) close() error {
	if d == nil || d.tc == nil {
		return nil
	}
	err := d.tc.Close()
	d.tc = nil
	if err != nil {
		return fmt.Errorf("close rtnetlink socket for %s: %w", d.name, err)
	}
	return nil
}

// msg returns a tcmsg header for this interface.
func (d *netdev) msg(handle, parent, info uint32) tc.Msg {
	return tc.Msg{Family: unix.AF_UNSPEC, Ifindex: d.ifindex, Handle: handle, Parent: parent, Info: info}
}

// qdiscs lists the qdiscs of this interface.
func (d *netdev) qdiscs() ([]tc.Object, error) {
	all, err := d.tc.Qdisc().Get()
	if err != nil {
		return nil, fmt.Errorf("list qdiscs of %s: %w", d.name, err)
	}
	var out []tc.Object
	for _, q := range all {
		if q.Ifindex == d.ifindex {
			out = append(out, q)
		}
	}
	return out, nil
}

// findQdisc returns the qdisc of this interface with the given kind,
// handle and parent, or nil.
func (d *netdev) findQdisc(kind string, handle, parent uint32) (*tc.Object, error) {
	qs, err := d.qdiscs()
	if err != nil {
		return nil, err
	}
	for i := range qs {
		if qs[i].Kind == kind && qs[i].Handle == handle && qs[i].Parent == parent {
			return &qs[i], nil
		}
	}
	return nil, nil
}

// rootQdisc returns the root qdisc of this interface, or nil when it has
// none that netlink lists.
func (d *netdev) rootQdisc() (*tc.Object, error) {
	qs, err := d.qdiscs()
	if err != nil {
		return nil, err
	}
	for i := range qs {
		if qs[i].Parent == tc.HandleRoot {
			return &qs[i], nil
		}
	}
	return nil, nil
}

// filters lists the filters attached at parent. A missing parent (no
// clsact qdisc) or interface yields no filters.
func (d *netdev) filters(parent uint32) ([]tc.Object, error) {
	m := d.msg(0, parent, 0)
	fs, err := d.tc.Filter().Get(&m)
	if err != nil {
		if errGone(err) || errors.Is(err, unix.EINVAL) {
			return nil, nil
		}
		return nil, fmt.Errorf("list filters of %s at %s: %w", d.name, handleString(parent), err)
	}
	return fs, nil
}

// handleString formats a tc handle the way tc(8) does: "major:minor" in
// hex, "major:" for minor 0, and "root" for TC_H_ROOT.
func handleString(h uint32) string {
	switch {
	case h == tc.HandleRoot:
		return "root"
	case h&0xffff == 0:
		return fmt.Sprintf("%x:", h>>16)
	default:
		return fmt.Sprintf("%x:%x", h>>16, h&0xffff)
	}
}
