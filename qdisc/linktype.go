package qdisc

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/kernel"
)

// RequireEthernet returns an error unless the packets of iface, in the
// calling thread's network namespace, start with an Ethernet header at tc:
// the link type is Ethernet (veth, bridges, bonds, VLANs, physical NICs)
// or loopback, which has one too. Programs that parse Ethernet frames, the
// INT hop and On-Ramp, would read the packets of a layer-3 device
// (WireGuard, tun, ipip, GRE, SIT) from the wrong offset and act on none
// of them, so those who attach them check first. user names the program
// for the error.
func RequireEthernet(iface, user string) error {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("open rtnetlink socket for %s: %w", iface, err)
	}
	defer h.Close()
	l, err := h.LinkByName(iface)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return lookupError(iface, unix.ENODEV)
		}
		return fmt.Errorf("read the link type of %s: %w", iface, err)
	}
	switch t := l.Attrs().EncapType; t {
	case "ether", "loopback":
		return nil
	default:
		return kernel.NewError(kernel.KindBadParam,
			"attach it to an Ethernet interface the traffic crosses: the tunnel's underlay, a veth or the NIC",
			nil, "%s is a layer-3 device (link type %s, no Ethernet header); %s parses Ethernet frames and would act on none of its packets",
			iface, t, user)
	}
}
