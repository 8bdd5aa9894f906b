// Package scope fills and reads the LPM tries of bpf/include/scope.h, the
// datacenter prefixes a sockops program acts on. A program declares the
// two tries with SCOPE_MAPS(name), name_v4 and name_v6; [Write] replaces
// their contents with a list of prefixes that [Normalize] checked, and
// [Read] lists them back.
package scope

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/ccload/ccload/internal/kernel"
)

// V4Key is a key of the IPv4 trie, struct lpm_v4 of bpf/include/scope.h.
type V4Key struct {
	// Prefixlen is the prefix's length in bits.
	Prefixlen uint32
	// Addr is the address in network order, as the kernel keeps it: the
	// four address bytes read in native byte order.
	Addr uint32
}

// V6Key is a key of the IPv6 trie, struct lpm_v6 of bpf/include/scope.h.
type V6Key struct {
	// Prefixlen is the prefix's length in bits.
	Prefixlen uint32
	// Addr is the address in network order, as the kernel keeps it: each
	// word is four address bytes read in native byte order.
	Addr [4]uint32
}

// v4Key is the trie key of the IPv4 prefix p.
func v4Key(p netip.Prefix) V4Key {
	a := p.Addr().As4()
	return V4Key{Prefixlen: uint32(p.Bits()), Addr: binary.NativeEndian.Uint32(a[:])}
}

// v6Key is the trie key of the IPv6 prefix p.
func v6Key(p netip.Prefix) V6Key {
	a := p.Addr().As16()
	k := V6Key{Prefixlen: uint32(p.Bits())}
	for i := range k.Addr {
		k.Addr[i] = binary.NativeEndian.Uint32(a[4*i:])
	}
	return k
}

// v4Prefix is the prefix that the IPv4 trie key k stands for.
func v4Prefix(k V4Key) netip.Prefix {
	var a [4]byte
	binary.NativeEndian.PutUint32(a[:], k.Addr)
	return netip.PrefixFrom(netip.AddrFrom4(a), int(k.Prefixlen))
}

// v6Prefix is the prefix that the IPv6 trie key k stands for.
func v6Prefix(k V6Key) netip.Prefix {
	var a [16]byte
	for i, w := range k.Addr {
		binary.NativeEndian.PutUint32(a[4*i:], w)
	}
	return netip.PrefixFrom(netip.AddrFrom16(a), int(k.Prefixlen))
}

// Normalize checks peers and returns them as Write wants them, in a new
// slice (nil for nil): a v4-mapped prefix (::ffff:198.18.0.0/111) becomes
// the IPv4 one it maps (198.18.0.0/15), and every prefix is masked
// (198.18.1.7/15 becomes 198.18.0.0/15). An invalid prefix is an error of
// kind kernel.KindBadParam.
func Normalize(peers []netip.Prefix) ([]netip.Prefix, error) {
	if peers == nil {
		return nil, nil
	}
	out := make([]netip.Prefix, len(peers))
	for i, p := range peers {
		if !p.IsValid() {
			return nil, kernel.NewError(kernel.KindBadParam, "write prefixes like 198.18.0.0/15 or fd00::/8", nil, "invalid prefix")
		}
		// A v4-mapped prefix (::ffff:198.18.0.0/111) is an IPv4 one.
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		out[i] = p.Masked()
	}
	return out, nil
}

// Write replaces the contents of the tries v4 and v6 with peers, which
// Normalize returned: IPv4 prefixes go to v4, the others to v6. Readers
// see the tries emptied before they are filled again.
func Write(v4, v6 *ebpf.Map, peers []netip.Prefix) error {
	var k4 V4Key
	var k6 V6Key
	var v uint8
	var keys4 []V4Key
	for iter := v4.Iterate(); iter.Next(&k4, &v); {
		keys4 = append(keys4, k4)
	}
	var keys6 []V6Key
	for iter := v6.Iterate(); iter.Next(&k6, &v); {
		keys6 = append(keys6, k6)
	}
	for _, k := range keys4 {
		_ = v4.Delete(k)
	}
	for _, k := range keys6 {
		_ = v6.Delete(k)
	}
	one := uint8(1)
	for _, p := range peers {
		var err error
		if p.Addr().Is4() {
			err = v4.Put(v4Key(p), one)
		} else {
			err = v6.Put(v6Key(p), one)
		}
		if err != nil {
			return fmt.Errorf("add peer prefix %s: %w", p, err)
		}
	}
	return nil
}

// Read lists the prefixes in the tries v4 and v6, IPv4 first, as
// netip.Prefix.String writes them ("198.18.0.0/15"). When iterating a
// trie fails it returns the prefixes read so far with the error.
func Read(v4, v6 *ebpf.Map) ([]string, error) {
	var peers []string
	var k4 V4Key
	var v uint8
	iter := v4.Iterate()
	for iter.Next(&k4, &v) {
		peers = append(peers, v4Prefix(k4).String())
	}
	if err := iter.Err(); err != nil {
		return peers, fmt.Errorf("read the IPv4 peer prefixes: %w", err)
	}
	var k6 V6Key
	iter = v6.Iterate()
	for iter.Next(&k6, &v) {
		peers = append(peers, v6Prefix(k6).String())
	}
	if err := iter.Err(); err != nil {
		return peers, fmt.Errorf("read the IPv6 peer prefixes: %w", err)
	}
	return peers, nil
}

// ParsePrefixes reads prefixes as users write them (198.18.0.0/15,
// fd00::/8), with surrounding spaces allowed.
func ParsePrefixes(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, p := range list {
		pfx, err := netip.ParsePrefix(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("prefix %q: %w", p, err)
		}
		out = append(out, pfx)
	}
	return out, nil
}
