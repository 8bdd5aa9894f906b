package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// topology tracks everything one Pair, Dumbbell or Chain created, so that
// it can be torn down after a partial construction failure (or a panic
// during construction) as well as by Close.
type topology struct {
	// steer makes each host steer every flow to one CPU
	// (DumbbellConfig.SteerFlows); set before the first host is added.
	steer   bool
	mu      sync.Mutex
	closed  bool
	hosts   []*Host
	links   []ownedLink
	closers []ownedCloser
}

// ownedCloser is what an EgressFunc returned for one interface; close
// closes it before any link is deleted.
type ownedCloser struct {
	c     io.Closer
	where string // "IFACE in netns NAME", for errors
}

// ownedLink is one end of a veth pair created by the topology; deleting it
// deletes the pair.
type ownedLink struct {
	host *Host
	name string
}

// addHost creates a host and records it for teardown.
func (t *topology) addHost(ctx context.Context, name string) (*Host, error) {
	h, err := newHost(ctx, name, t.steer)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.hosts = append(t.hosts, h)
	return h, nil
}

// addVeth creates a veth pair with end aName in a and end bName in b, and
// brings both ends up. The pair is created from inside a's namespace with
// its peer placed directly into b's, so it never exists in the initial
// namespace.
func (t *topology) addVeth(ctx context.Context, a *Host, aName string, b *Host, bName string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("create veth %s: %w", aName, err)
	}
	anl, err := a.handle()
	if err != nil {
		return err
	}
	bns, err := b.nsFd()
	if err != nil {
		return err
	}

	attrs := netlink.NewLinkAttrs() // TxQLen -1: keep the kernel default
	attrs.Name = aName
	veth := &netlink.Veth{
		LinkAttrs:     attrs,
		PeerName:      bName,
		PeerTxQLen:    -1,
		PeerNamespace: netlink.NsFd(bns),
	}
	if err := anl.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s (netns %s) <-> %s (netns %s): %w", aName, a.Name, bName, b.Name, err)
	}
	t.mu.Lock()
	t.links = append(t.links, ownedLink{host: a, name: aName})
	t.mu.Unlock()

	for _, end := range []ownedLink{{a, aName}, {b, bName}} {
		if err := end.host.setLinkUp(end.name); err != nil {
			return err
		}
	}
	return nil
}

// attachEgress runs fn, when set, on interface iface of h and records the
// closer it returns, so that close closes it before deleting any link.
func (t *topology) attachEgress(ctx context.Context, fn EgressFunc, h *Host, iface string) error {
	if fn == nil {
		return nil
	}
	where := fmt.Sprintf("%s in netns %s", iface, h.Name)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("attach egress shim to %s: %w", where, err)
	}
	c, err := fn(ctx, h, iface)
	if err != nil {
		return fmt.Errorf("egress shim on %s failed (the topology was torn down; fix the shim or its configuration): %w", where, err)
	}
	if c == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closers = append(t.closers, ownedCloser{c: c, where: where})
	return nil
}

// close closes the egress shims' closers, then deletes all links and then
// all hosts, each in reverse order of creation. It is idempotent; only the
// first call does any work.
func (t *topology) close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true

	var errs []error
	// Shims see their interfaces and namespaces intact while they detach.
	for i := len(t.closers) - 1; i >= 0; i-- {
		if err := t.closers[i].c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close egress shim on %s: %w", t.closers[i].where, err))
		}
	}
	// Deleting links first makes them disappear synchronously; namespace
	// destruction, which would also remove them, is asynchronous.
	for i := len(t.links) - 1; i >= 0; i-- {
		if err := t.links[i].host.deleteLink(t.links[i].name); err != nil {
			errs = append(errs, err)
		}
	}
	for i := len(t.hosts) - 1; i >= 0; i-- {
		if err := t.hosts[i].close(); err != nil {
			errs = append(errs, err)
		}
	}
	t.closers, t.links, t.hosts = nil, nil, nil
	return errors.Join(errs...)
}

// link joins a and b with a veth pair whose ends are named after roles aRole
// and bRole, and assigns a host 1 and b host 2 of sub. It returns the
// interface names.
func (t *topology) link(ctx context.Context, nm namer, a *Host, aRole string, b *Host, bRole string, sub subnet) (ifA, ifB string, err error) {
	if ifA, err = nm.iface(aRole); err != nil {
		return "", "", err
	}
	if ifB, err = nm.iface(bRole); err != nil {
		return "", "", err
	}
	if err := t.addVeth(ctx, a, ifA, b, ifB); err != nil {
		return "", "", err
	}
	a4, a6 := sub.host(1)
	b4, b6 := sub.host(2)
	if err := a.addAddrs(ctx, ifA, a4, a6); err != nil {
		return "", "", err
	}
	if err := b.addAddrs(ctx, ifB, b4, b6); err != nil {
		return "", "", err
	}
	return ifA, ifB, nil
}

// attachLeaf joins leaf to router over sub (router host 1, leaf host 2),
// gives leaf default routes via the router and makes the link's addresses
// the leaf's primary ones. It returns the router's and the leaf's
// interface names.
func (t *topology) attachLeaf(ctx context.Context, nm namer, router *Host, routerRole string, leaf *Host, leafRole string, sub subnet) (ifRouter, ifLeaf string, err error) {
	ifRouter, ifLeaf, err = t.link(ctx, nm, router, routerRole, leaf, leafRole, sub)
	if err != nil {
		return "", "", err
	}
	r4, r6 := sub.host(1)
	l4, l6 := sub.host(2)
	if err := leaf.addDefaultRoutes(ctx, ifLeaf, r4.Addr(), r6.Addr()); err != nil {
		return "", "", err
	}
	leaf.Addr, leaf.Addr6 = l4.Addr(), l6.Addr()
	return ifRouter, ifLeaf, nil
}

// addRouter creates a host that forwards IPv4 and IPv6.
func (t *topology) addRouter(ctx context.Context, name string) (*Host, error) {
	r, err := t.addHost(ctx, name)
	if err != nil {
		return nil, err
	}
	err = r.setSysctls(
		sysctl{"net/ipv4/ip_forward", "1"},
		sysctl{"net/ipv6/conf/all/forwarding", "1"},
	)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// setLinkUp brings up interface name.
func (h *Host) setLinkUp(name string) error {
	nl, err := h.handle()
	if err != nil {
		return err
	}
	link, err := nl.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find %s in netns %s: %w", name, h.Name, err)
	}
	if err := nl.LinkSetUp(link); err != nil {
		return fmt.Errorf("set %s up in netns %s: %w", name, h.Name, err)
	}
	return nil
}

// deleteLink deletes interface name; a missing interface is not an error.
func (h *Host) deleteLink(name string) error {
	nl, err := h.handle()
	if err != nil {
		return err
	}
	link, err := nl.LinkByName(name)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return nil
		}
		return fmt.Errorf("find %s in netns %s: %w", name, h.Name, err)
	}
	if err := nl.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete %s in netns %s: %w", name, h.Name, err)
	}
	return nil
}

// addAddrs assigns prefixes (address plus subnet length) to interface name.
// Addresses are added with IFA_F_NODAD so IPv6 is usable immediately.
func (h *Host) addAddrs(ctx context.Context, name string, prefixes ...netip.Prefix) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("add addresses to %s: %w", name, err)
	}
	nl, err := h.handle()
	if err != nil {
		return err
	}
	link, err := nl.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find %s in netns %s: %w", name, h.Name, err)
	}
	for _, p := range prefixes {
		addr := &netlink.Addr{IPNet: prefixToIPNet(p), Flags: unix.IFA_F_NODAD}
		if err := nl.AddrAdd(link, addr); err != nil {
			return fmt.Errorf("add address %s to %s in netns %s: %w", p, name, h.Name, err)
		}
	}
	return nil
}

// addDefaultRoutes installs a default route via each gateway, out of
// interface name.
func (h *Host) addDefaultRoutes(ctx context.Context, name string, gateways ...netip.Addr) error {
	routes := make([]route, 0, len(gateways))
	for _, gw := range gateways {
		dst := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		if gw.Is6() {
			dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		}
		routes = append(routes, route{dst: dst, gw: gw})
	}
	return h.addRoutes(ctx, name, routes...)
}

// route is a destination prefix reached via a gateway.
type route struct {
	dst netip.Prefix
	gw  netip.Addr
}

// addRoutes installs routes out of interface name.
func (h *Host) addRoutes(ctx context.Context, name string, routes ...route) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("add routes via %s: %w", name, err)
	}
	nl, err := h.handle()
	if err != nil {
		return err
	}
	link, err := nl.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find %s in netns %s: %w", name, h.Name, err)
	}
	for _, r := range routes {
		dst, gw := r.dst, r.gw
		nr := &netlink.Route{
			LinkIndex: link.Attrs().Index,
			Dst:       prefixToIPNet(dst),
			Gw:        net.IP(gw.AsSlice()),
		}
		if err := nl.RouteAdd(nr); err != nil {
			return fmt.Errorf("add route %s via %s dev %s in netns %s: %w", dst, gw, name, h.Name, err)
		}
	}
	return nil
}

func prefixToIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{
		IP:   net.IP(p.Addr().AsSlice()),
		Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen()),
	}
}
