package clocksync

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"strings"
)

// PeerSet is whom an agent may exchange probes with: addresses it probes
// from the start, and prefixes whose agents it answers and may learn of
// (when one probes it, or appears in a peer's edges) and then probe too.
type PeerSet struct {
	// Addrs are the addresses given one by one, and those of prefixes
	// small enough to list (up to maxExpanded addresses).
	Addrs []netip.Addr
	// Prefixes are all the prefixes given, small ones included.
	Prefixes []netip.Prefix
	// Explicit are the addresses given one by one: the agent warns when
	// one of them stays silent.
	Explicit []netip.Addr
}

// maxExpanded is the largest prefix, in addresses, whose addresses are
// all probe candidates. A larger one (a /16 of a datacenter) only admits
// the agents that turn up in it.
const maxExpanded = 256

// Contains reports whether a is in the set.
func (s PeerSet) Contains(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range s.Prefixes {
		if p.Contains(a) {
			return true
		}
	}
	for _, b := range s.Addrs {
		if a == b {
			return true
		}
	}
	return false
}

// ParsePeers reads --peers: a comma-separated list of addresses,
// prefixes (CIDR) and files that list more of them, one per line, with #
// comments. It fails when the list names no address or prefix at all.
func ParsePeers(list string) (PeerSet, error) {
	var s PeerSet
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if err := s.add(item, true); err != nil {
			return PeerSet{}, err
		}
	}
	if len(s.Addrs) == 0 && len(s.Prefixes) == 0 {
		return PeerSet{}, fmt.Errorf("--peers %q names no peer: give addresses (198.18.1.2), prefixes (198.18.0.0/16) or a file that lists them", list)
	}
	return s, nil
}

func (s *PeerSet) add(item string, fileOK bool) error {
	if a, err := netip.ParseAddr(item); err == nil {
		if a.Zone() != "" {
			return fmt.Errorf("peer %q: zoned addresses are not supported", item)
		}
		s.Addrs = append(s.Addrs, a.Unmap())
		s.Explicit = append(s.Explicit, a.Unmap())
		return nil
	}
	if p, err := netip.ParsePrefix(item); err == nil {
		p = p.Masked()
		s.Prefixes = append(s.Prefixes, p)
		bits := p.Addr().BitLen() - p.Bits()
		if bits <= 8 && 1<<bits <= maxExpanded {
			for a, n := p.Addr(), 0; p.Contains(a) && n < maxExpanded; a, n = a.Next(), n+1 {
				if usableHost(p, a) {
					s.Addrs = append(s.Addrs, a.Unmap())
				}
			}
		}
		return nil
	}
	if !fileOK {
		return fmt.Errorf("%q is neither an address nor a prefix", item)
	}
	return s.addFile(item)
}

// usableHost leaves out an IPv4 prefix's network and broadcast addresses.
func usableHost(p netip.Prefix, a netip.Addr) bool {
	if !a.Is4() || p.Bits() >= 31 {
		return true
	}
	if a == p.Addr() {
		return false
	}
	last := p.Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(last[0])<<24 | uint32(last[1])<<16 | uint32(last[2])<<8 | uint32(last[3]) | host
	return a != netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func (s *PeerSet) addFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("peer %q is not an address, a prefix or a readable file: %w", path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text, _, _ := strings.Cut(sc.Text(), "#")
		for _, item := range strings.FieldsFunc(text, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
			if err := s.add(item, false); err != nil {
				return fmt.Errorf("%s:%d: %w", path, line, err)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
}
