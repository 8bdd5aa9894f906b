package testbed

import "net/netip"

// Addressing plan.
//
// Every veth link gets its own IPv4 /24 out of 198.18.0.0/15 and its own
// IPv6 /64 out of fd00::/8:
//
//	access link i (sender i, or the single link of a Pair):
//	    198.18.i.0/24      fd00:18:i::/64
//	bottleneck link (router -> receiver):
//	    198.19.0.0/24      fd00:19::/64
//
// On each link the router (or Pair.A) is host 1 and the other end host 2.
// Addresses may repeat across topology instances; they live in disjoint
// network namespaces.

// maxSenders bounds DumbbellConfig.Senders; one access /24 per sender must
// fit into 198.18.0.0/16.
const maxSenders = 250

// subnet is one link's IPv4 and IPv6 prefix.
type subnet struct {
	v4 netip.Prefix
	v6 netip.Prefix
}

// accessSubnet returns the subnet of access link i (0 <= i <= 255).
func accessSubnet(i int) subnet {
	return subnet{
		v4: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i), 0}), 24),
		v6: netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0x00, 0x00, 0x18, 0x00, byte(i)}), 64),
	}
}

// bottleneckSubnet returns the subnet of the router -> receiver link.
func bottleneckSubnet() subnet {
	return subnet{
		v4: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, 0, 0}), 24),
		v6: netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0x00, 0x00, 0x19}), 64),
	}
}

// host returns host number n of the subnet as prefixes carrying the subnet's
// length, ready to be assigned to an interface.
func (s subnet) host(n byte) (v4, v6 netip.Prefix) {
	a4 := s.v4.Addr().As4()
	a4[3] = n
	a6 := s.v6.Addr().As16()
	a6[15] = n
	return netip.PrefixFrom(netip.AddrFrom4(a4), s.v4.Bits()),
		netip.PrefixFrom(netip.AddrFrom16(a6), s.v6.Bits())
}
