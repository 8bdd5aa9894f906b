package testbed

import (
	"fmt"
	"math"
	"net/netip"
	"strings"
	"testing"
)

func TestHTBClassParams(t *testing.T) {
	tests := []struct {
		name    string
		rate    uint64 // bits/s
		rate32  uint32
		rate64  uint64 // 0: not set
		ticks   uint32
		quantum uint32
	}{
		// burst = rate*1ms + 1600 B; ticks = burst/rate in ns, >>6.
		// 1 Gbit/s: 126600 B -> 1012800 ns -> 15825 ticks.
		{"1G", 1e9, 125_000_000, 0, 15825, maxQuantum},
		// 10 Mbit/s: 2850 B -> 2280000 ns -> 35625 ticks; quantum 125000.
		{"10M", 10e6, 1_250_000, 0, 35625, 125_000},
		// 8 kbit/s: 1601 B -> 1.601 s -> 25015625 ticks; quantum clamped up.
		{"8k", 8000, 1000, 0, 25_015_625, minQuantum},
		// 100 Gbit/s needs rate64: 12501600 B -> 1000128 ns -> 15627 ticks.
		{"100G", 100e9, math.MaxUint32, 12_500_000_000, 15627, maxQuantum},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newHTBClassParams(tt.rate)
			if p.opt.Rate.Rate != tt.rate32 || p.opt.Ceil.Rate != tt.rate32 {
				t.Errorf("rate/ceil = %d/%d, want %d", p.opt.Rate.Rate, p.opt.Ceil.Rate, tt.rate32)
			}
			var rate64 uint64
			if p.rate64 != nil {
				rate64 = *p.rate64
			}
			if rate64 != tt.rate64 {
				t.Errorf("rate64 = %d, want %d", rate64, tt.rate64)
			}
			if p.opt.Buffer != tt.ticks || p.opt.Cbuffer != tt.ticks {
				t.Errorf("buffer/cbuffer = %d/%d ticks, want %d", p.opt.Buffer, p.opt.Cbuffer, tt.ticks)
			}
			if p.opt.Quantum != tt.quantum {
				t.Errorf("quantum = %d, want %d", p.opt.Quantum, tt.quantum)
			}
			if p.opt.Rate.Linklayer != tcLinklayerEthernet {
				t.Errorf("linklayer = %d, want ethernet", p.opt.Rate.Linklayer)
			}
		})
	}
}

func TestNamer(t *testing.T) {
	tests := []struct {
		prefix  string
		wantErr bool
	}{
		{"", false},
		{"bench-", false},
		{"a.b_c-1", false},
		{".hidden", true},
		{"has/slash", true},
		{"has space", true},
		{strings.Repeat("x", maxPrefixLen+1), true},
	}
	for _, tt := range tests {
		t.Run(tt.prefix, func(t *testing.T) {
			n, err := newNamer(tt.prefix)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("newNamer(%q) succeeded", tt.prefix)
				}
				return
			}
			if err != nil {
				t.Fatalf("newNamer(%q): %v", tt.prefix, err)
			}
			want := tt.prefix
			if want == "" {
				want = DefaultPrefix
			}
			if ns := n.netns("rtr"); !strings.HasPrefix(ns, want) {
				t.Errorf("netns name %q lacks prefix %q", ns, want)
			}
			// The longest interface role must fit IFNAMSIZ.
			name, err := n.iface("r249")
			if err != nil || len(name) > maxIfnameLen || !ourIfname.MatchString(name) {
				t.Errorf("iface(r249) = %q, %v", name, err)
			}
		})
	}

	a, _ := newNamer("")
	b, _ := newNamer("")
	if a.tag == b.tag {
		t.Errorf("two namers share tag %q", a.tag)
	}
}

func TestAddressing(t *testing.T) {
	v4 := netip.MustParsePrefix("198.18.0.0/15")
	v6 := netip.MustParsePrefix("fd00::/8")

	tests := []struct {
		name         string
		sub          subnet
		host         byte
		want4, want6 string
	}{
		{"access 0 router", accessSubnet(0), 1, "198.18.0.1/24", "fd00:18::1/64"},
		{"access 0 host", accessSubnet(0), 2, "198.18.0.2/24", "fd00:18::2/64"},
		{"access 249 host", accessSubnet(249), 2, "198.18.249.2/24", "fd00:18:f9::2/64"},
		{"bottleneck router", bottleneckSubnet(), 1, "198.19.0.1/24", "fd00:19::1/64"},
		{"bottleneck receiver", bottleneckSubnet(), 2, "198.19.0.2/24", "fd00:19::2/64"},
		{"router link 1 upstream", routerSubnet(1), 1, "198.19.1.1/24", "fd00:19:1::1/64"},
		{"router link 1 downstream", routerSubnet(1), 2, "198.19.1.2/24", "fd00:19:1::2/64"},
		{"cross 0 host", crossSubnet(0), 2, "198.19.16.2/24", "fd00:19:10::2/64"},
		{"cross 239 host", crossSubnet(maxCrossSenders - 1), 2, "198.19.255.2/24", "fd00:19:ff::2/64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got4, got6 := tt.sub.host(tt.host)
			if got4.String() != tt.want4 || got6.String() != tt.want6 {
				t.Errorf("host(%d) = %s, %s; want %s, %s", tt.host, got4, got6, tt.want4, tt.want6)
			}
			if !v4.Contains(got4.Addr()) || !v6.Contains(got6.Addr()) {
				t.Errorf("%s, %s outside 198.18.0.0/15 or fd00::/8", got4, got6)
			}
		})
	}
}

// TestAddressPlanDisjoint checks that no two links of the plan share a
// subnet, that they all lie in the permitted ranges, and that the route
// toward the senders covers exactly the access links.
func TestAddressPlanDisjoint(t *testing.T) {
	v4 := netip.MustParsePrefix("198.18.0.0/15")
	v6 := netip.MustParsePrefix("fd00::/8")
	all := map[string]subnet{"last hop": bottleneckSubnet()}
	for i := range maxSenders {
		all[fmt.Sprintf("access %d", i)] = accessSubnet(i)
	}
	for k := 1; k < firstCrossNet; k++ {
		all[fmt.Sprintf("router link %d", k)] = routerSubnet(k)
	}
	for j := range maxCrossSenders {
		all[fmt.Sprintf("cross %d", j)] = crossSubnet(j)
	}
	seen4 := map[netip.Prefix]string{}
	seen6 := map[netip.Prefix]string{}
	senders := allAccessSubnets()
	for name, s := range all {
		if !v4.Contains(s.v4.Addr()) || !v6.Contains(s.v6.Addr()) {
			t.Errorf("%s: %s, %s outside the permitted ranges", name, s.v4, s.v6)
		}
		if other, ok := seen4[s.v4]; ok {
			t.Errorf("%s and %s share %s", name, other, s.v4)
		}
		if other, ok := seen6[s.v6]; ok {
			t.Errorf("%s and %s share %s", name, other, s.v6)
		}
		seen4[s.v4], seen6[s.v6] = name, name
		isAccess := strings.HasPrefix(name, "access")
		if senders.v4.Contains(s.v4.Addr()) != isAccess || senders.v6.Contains(s.v6.Addr()) != isAccess {
			t.Errorf("%s (%s, %s): inside the senders' route %s, %s: %v, want %v",
				name, s.v4, s.v6, senders.v4, senders.v6, !isAccess, isAccess)
		}
	}
}
