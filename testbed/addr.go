package testbed

import "net/netip"

// Addressing plan.
//
// Every veth link gets its own IPv4 /24 out of 198.18.0.0/15 and its own
// IPv6 /64 out of fd00::/8. The third IPv4 octet and the third IPv6 group
// carry the same number (written in hex in the IPv6 address):
//
//	access link i (sender i, or the single link of a Pair), 0 <= i < 250:
//	    198.18.i.0/24          fd00:18:i::/64
//	last-hop link (the router next to the receiver -> receiver):
//	    198.19.0.0/24          fd00:19::/64
//	router link k (router k -> router k+1 of a Chain), 1 <= k < 16:
//	    198.19.k.0/24          fd00:19:k::/64
//	cross access link j (cross sender j of a Chain), 0 <= j < 240:
//	    198.19.(16+j).0/24     fd00:19:(16+j)::/64
//
// On access, cross access and last-hop links the router (or Pair.A) is
// host 1 and the other end host 2, so senders, cross senders and the
// receiver are always .2 (::2). On router link k, router k is host 1 and
// router k+1 host 2.
//
// The senders' access links together are 198.18.0.0/16 and fd00:18::/32;
// a Chain's second router reaches them through that one route per family.
// Addresses may repeat across topology instances; they live in disjoint
// network namespaces.

// maxSenders bounds DumbbellConfig.Senders and ChainConfig.Senders; one
// access /24 per sender must fit into 198.18.0.0/16.
const maxSenders = 250

// maxCrossSenders bounds ChainConfig.CrossSenders: cross access links use
// the third octets 16 to 255 of 198.19.0.0/16.
const maxCrossSenders = 240

// Third octets (and IPv6 groups) within 198.19.0.0/16 and fd00:19::/32.
const (
	lastHopNet    = 0  // the link toward the receiver
	firstCrossNet = 16 // cross access link 0; link j is 16+j
)

// subnet is one link's IPv4 and IPv6 prefix.
type subnet struct {
	v4 netip.Prefix
	v6 netip.Prefix
}

// linkSubnet returns the subnet numbered n in 198.(18+hi).n.0/24 and
// fd00:(18+hi):n::/64; hi is 0 for access links and 1 for the rest.
func linkSubnet(hi, n byte) subnet {
	return subnet{
		v4: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18 + hi, n, 0}), 24),
		v6: netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0x00, 0x00, 0x18 + hi, 0x00, n}), 64),
	}
}

// accessSubnet returns the subnet of access link i (0 <= i <= 255).
func accessSubnet(i int) subnet {
	return linkSubnet(0, byte(i))
}

// bottleneckSubnet returns the subnet of the last-hop link, from the router
// next to the receiver to the receiver.
func bottleneckSubnet() subnet {
	return linkSubnet(1, lastHopNet)
}

// routerSubnet returns the subnet of router link k (1 <= k <= 15), from
// router k to router k+1.
func routerSubnet(k int) subnet {
	return linkSubnet(1, byte(k))
}

// crossSubnet returns the subnet of cross access link j (0 <= j < 240).
func crossSubnet(j int) subnet {
	return linkSubnet(1, byte(firstCrossNet+j))
}

// allAccessSubnets is the union of all access links, the route a Chain's
// second router needs toward the senders.
func allAccessSubnets() subnet {
	return subnet{
		v4: netip.MustParsePrefix("198.18.0.0/16"),
		v6: netip.MustParsePrefix("fd00:18::/32"),
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
