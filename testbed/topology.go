package testbed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// topology tracks everything one Pair or Dumbbell created, so that it can be
// torn down after a partial construction failure as well as by Close.
type topology struct {
	mu     sync.Mutex
	closed bool
	hosts  []*Host
	links  []ownedLink
}

// ownedLink is one end of a veth pair created by the topology; deleting it
// deletes the pair.
type ownedLink struct {
	host *Host
	name string
}

// addHost creates a host and records it for teardown.
func (t *topology) addHost(ctx context.Context, name string) (*Host, error) {
	h, err := newHost(ctx, name)
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

// close deletes all links and then all hosts, in reverse order of creation.
// It is idempotent; only the first call does any work.
func (t *topology) close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true

	var errs []error
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
	t.links, t.hosts = nil, nil
	return errors.Join(errs...)
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
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("add default routes via %s: %w", name, err)
	}
	nl, err := h.handle()
	if err != nil {
		return err
	}
	link, err := nl.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find %s in netns %s: %w", name, h.Name, err)
	}
	for _, gw := range gateways {
		dst := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		if gw.Is6() {
			dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		}
		route := &netlink.Route{
			LinkIndex: link.Attrs().Index,
			Dst:       prefixToIPNet(dst),
			Gw:        net.IP(gw.AsSlice()),
		}
		if err := nl.RouteAdd(route); err != nil {
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
