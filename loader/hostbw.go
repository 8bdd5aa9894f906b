package loader

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/ccload/ccload/internal/units"
)

// fallbackHostBW is used for host_bw=auto when no interface reports a speed.
const fallbackHostBW = 10_000_000_000

// autoParam resolves parameters whose value is "auto".
func (l *Loader) autoParam(p ParamSpec) (uint64, string, error) {
	if p.Unit != UnitBandwidth {
		return 0, "", fmt.Errorf("%s has no automatic value", p.Name)
	}
	iface, mbps, err := defaultRouteSpeed()
	if err == nil && mbps > 0 {
		return mbps * 1_000_000, fmt.Sprintf("%s=auto: %s reports %d Mbit/s", p.Name, iface, mbps), nil
	}
	why := "no default route"
	if iface != "" {
		why = iface + " reports no link speed"
	}
	return fallbackHostBW, fmt.Sprintf("%s=auto: %s; using %s (set %s=... to override)",
		p.Name, why, units.FormatBandwidth(fallbackHostBW), p.Name), nil
}

// defaultRouteSpeed returns the interface of the IPv4 (else IPv6) default
// route and its speed in Mbit/s, as ethtool reports it through sysfs.
func defaultRouteSpeed() (string, uint64, error) {
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := netlink.RouteList(nil, family)
		if err != nil {
			return "", 0, fmt.Errorf("list routes: %w", err)
		}
		for _, r := range routes {
			if r.Dst != nil && !r.Dst.IP.IsUnspecified() {
				continue
			}
			lnk, err := netlink.LinkByIndex(r.LinkIndex)
			if err != nil {
				continue
			}
			name := lnk.Attrs().Name
			b, err := os.ReadFile("/sys/class/net/" + name + "/speed")
			if err != nil {
				return name, 0, nil
			}
			v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil || v <= 0 {
				return name, 0, nil
			}
			return name, uint64(v), nil
		}
	}
	return "", 0, fmt.Errorf("no default route")
}
