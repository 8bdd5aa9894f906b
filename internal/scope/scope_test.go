package scope

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/testutil"
)

func TestNormalize(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   []string
		want []string
	}{
		{"none", nil, nil},
		{"masked", []string{"198.18.1.7/15", "fd00::1/8"}, []string{"198.18.0.0/15", "fd00::/8"}},
		{"v4-mapped prefix is IPv4", []string{"::ffff:198.18.0.0/111", "::ffff:10.1.2.3/128"}, []string{"198.18.0.0/15", "10.1.2.3/32"}},
		{"short v4-mapped prefix stays IPv6", []string{"::ffff:0.0.0.0/80"}, []string{"::/80"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var in []netip.Prefix
			for _, s := range tt.in {
				in = append(in, netip.MustParsePrefix(s))
			}
			kept := slices.Clone(in)
			out, err := Normalize(in)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range out {
				got = append(got, p.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Normalize(%v) = %v, want %v", tt.in, got, tt.want)
			}
			if !slices.Equal(in, kept) {
				t.Errorf("Normalize changed its argument to %v", in)
			}
		})
	}
	_, err := Normalize([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), {}})
	if !kernel.IsKind(err, kernel.KindBadParam) || kernel.FixOf(err) == "" {
		t.Errorf("Normalize of an invalid prefix = %v, want a bad-parameter error with a fix", err)
	}
}

// TestKeyLayout checks that the keys are struct lpm_v4 and lpm_v6 of
// bpf/include/scope.h, with the address bytes in network order.
func TestKeyLayout(t *testing.T) {
	if n := binary.Size(V4Key{}); n != 8 {
		t.Errorf("V4Key is %d bytes, want 8 (struct lpm_v4)", n)
	}
	if n := binary.Size(V6Key{}); n != 20 {
		t.Errorf("V6Key is %d bytes, want 20 (struct lpm_v6)", n)
	}
	b, err := binary.Append(nil, binary.NativeEndian, v4Key(netip.MustParsePrefix("198.18.0.0/15")))
	if err != nil {
		t.Fatal(err)
	}
	if want := append(binary.NativeEndian.AppendUint32(nil, 15), 198, 18, 0, 0); !slices.Equal(b, want) {
		t.Errorf("key of 198.18.0.0/15 is % x, want % x", b, want)
	}
	b, err = binary.Append(nil, binary.NativeEndian, v6Key(netip.MustParsePrefix("fd00:1::/32")))
	if err != nil {
		t.Fatal(err)
	}
	want := append(binary.NativeEndian.AppendUint32(nil, 32), 0xfd, 0, 0, 1)
	if want = append(want, make([]byte, 12)...); !slices.Equal(b, want) {
		t.Errorf("key of fd00:1::/32 is % x, want % x", b, want)
	}
	for _, s := range []string{"198.18.0.0/15", "0.0.0.0/0", "10.1.2.3/32"} {
		if p := netip.MustParsePrefix(s); v4Prefix(v4Key(p)) != p {
			t.Errorf("%s reads back as %s", p, v4Prefix(v4Key(p)))
		}
	}
	for _, s := range []string{"fd00::/8", "::/0", "2001:db8::1/128"} {
		if p := netip.MustParsePrefix(s); v6Prefix(v6Key(p)) != p {
			t.Errorf("%s reads back as %s", p, v6Prefix(v6Key(p)))
		}
	}
}

// newTries makes a pair of tries as SCOPE_MAPS declares them.
func newTries(t *testing.T) (v4, v6 *ebpf.Map) {
	t.Helper()
	trie := func(keySize uint32) *ebpf.Map {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.LPMTrie, KeySize: keySize, ValueSize: 1,
			MaxEntries: 256, Flags: 1 /* BPF_F_NO_PREALLOC */})
		if err != nil {
			t.Fatalf("create an LPM trie: %v", err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	return trie(8), trie(20)
}

// TestWriteRead fills a pair of tries, replaces their contents, and checks
// what the kernel looks up in them.
func TestWriteRead(t *testing.T) {
	testutil.RequireRoot(t)
	v4, v6 := newTries(t)
	read := func() []string {
		t.Helper()
		got, err := Read(v4, v6)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		return got
	}
	peers, err := Normalize([]netip.Prefix{netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("::ffff:192.0.2.0/120")})
	if err != nil {
		t.Fatal(err)
	}
	if err := Write(v4, v6, peers); err != nil {
		t.Fatal(err)
	}
	if got, want := read(), []string{"10.0.0.0/8", "192.0.2.0/24", "198.18.0.0/15", "fd00::/8"}; !slices.Equal(got, want) {
		t.Errorf("Read = %v, want %v", got, want)
	}
	// Look up hosts as scope_has does: a /32 or /128 key.
	var v uint8
	for addr, want := range map[string]bool{"198.19.255.1": true, "198.20.0.1": false, "192.0.2.9": true,
		"fd12::3": true, "fe80::1": false} {
		a := netip.MustParseAddr(addr)
		var err error
		if a.Is4() {
			err = v4.Lookup(v4Key(netip.PrefixFrom(a, 32)), &v)
		} else {
			err = v6.Lookup(v6Key(netip.PrefixFrom(a, 128)), &v)
		}
		if got := err == nil; got != want {
			t.Errorf("%s in scope: %v (%v), want %v", addr, got, err, want)
		}
	}

	if err := Write(v4, v6, []netip.Prefix{netip.MustParsePrefix("2001:db8::/32")}); err != nil {
		t.Fatal(err)
	}
	if got, want := read(), []string{"2001:db8::/32"}; !slices.Equal(got, want) {
		t.Errorf("Read after a second Write = %v, want %v", got, want)
	}
	if err := Write(v4, v6, nil); err != nil {
		t.Fatal(err)
	}
	if got := read(); len(got) != 0 {
		t.Errorf("Read after writing no peers = %v, want none", got)
	}
}
