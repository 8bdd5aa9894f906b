package sockops

import (
	"encoding/binary"
	"net/netip"
	"os"
	"slices"
	"testing"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/scope"
	"github.com/ccload/ccload/internal/testutil"
)

func TestNormalize(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		peers []string
		slots int
		every uint32
		bad   bool
	}{
		{name: "defaults", cfg: Config{Cgroup: "/x", Peers: []netip.Prefix{netip.MustParsePrefix("198.18.1.7/15")}},
			peers: []string{"198.18.0.0/15"}, slots: defaultSlots, every: 1},
		{name: "v4-mapped prefix is IPv4", cfg: Config{Cgroup: "/x", Peers: []netip.Prefix{netip.MustParsePrefix("::ffff:198.18.0.0/111")}},
			peers: []string{"198.18.0.0/15"}, slots: defaultSlots, every: 1},
		{name: "IPv6 kept", cfg: Config{Cgroup: "/x", Slots: 2, Every: 4, Peers: []netip.Prefix{netip.MustParsePrefix("fd00::1/8")}},
			peers: []string{"fd00::/8"}, slots: 2, every: 4},
		{name: "too many slots", cfg: Config{Cgroup: "/x", Slots: 5}, bad: true},
		{name: "invalid prefix", cfg: Config{Cgroup: "/x", Peers: []netip.Prefix{{}}}, bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			err := cfg.normalize()
			if tt.bad {
				if !kernel.IsKind(err, kernel.KindBadParam) || kernel.FixOf(err) == "" {
					t.Fatalf("normalize(%+v) = %v, want a bad-parameter error with a fix", tt.cfg, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range cfg.Peers {
				got = append(got, p.String())
			}
			if !slices.Equal(got, tt.peers) || cfg.Slots != tt.slots || cfg.Every != tt.every {
				t.Errorf("normalize = peers %v slots %d every %d; want %v, %d, %d", got, cfg.Slots, cfg.Every, tt.peers, tt.slots, tt.every)
			}
		})
	}
}

// TestScopeKeys checks that internal/scope's keys, which fill the peer
// tries, have the layout of the generated struct lpm_v4 and lpm_v6.
func TestScopeKeys(t *testing.T) {
	for _, tt := range []struct{ generated, scope any }{
		{intSockopsLpmV4{}, scope.V4Key{}},
		{intSockopsLpmV6{}, scope.V6Key{}},
	} {
		if g, s := binary.Size(tt.generated), binary.Size(tt.scope); g != s || g <= 0 {
			t.Errorf("%T is %d bytes, %T %d", tt.generated, g, tt.scope, s)
		}
	}
}

// TestEnableDisable enables INT, reconfigures it, shares the store with a
// second holder, and disables it: nothing may be left pinned.
func TestEnableDisable(t *testing.T) {
	testutil.RequireRoot(t)
	host := testutil.Host(t)
	n := New(host)
	peers := []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("fd00::/8")}
	st, err := n.Enable(Config{Peers: peers, Every: 2})
	if err != nil {
		t.Fatalf("enable: %v (fix: %s)", err, kernel.FixOf(err))
	}
	t.Cleanup(func() { n.Disable() })
	slices.Sort(st.Peers)
	if !st.Enabled || !slices.Equal(st.Peers, []string{"198.18.0.0/15", "fd00::/8"}) || st.Every != 2 || st.Slots != defaultSlots {
		t.Fatalf("status after enable: %+v", st)
	}
	if _, ok := st.Stats["forward_parsed"]; !ok {
		t.Errorf("status has no counters: %+v", st)
	}

	st, err = n.Enable(Config{Peers: peers[:1], TSOOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Peers, []string{"198.18.0.0/15"}) || !st.TSOOnly || st.Every != 1 {
		t.Fatalf("status after re-enable: %+v", st)
	}

	// A CC holds the store too: disabling INT must keep it for the CC.
	spec, err := loadIntSockops()
	if err != nil {
		t.Fatal(err)
	}
	m, err := n.Store().Acquire("powertcp", spec.Maps[intSockopsMapIntStore])
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	if holders, _ := n.Store().Holders(); !slices.Equal(holders, []string{"int", "powertcp"}) {
		t.Errorf("holders %v, want int and powertcp", holders)
	}
	if was, err := n.Disable(); err != nil || !was {
		t.Fatalf("disable = %v, %v", was, err)
	}
	if holders, _ := n.Store().Holders(); !slices.Equal(holders, []string{"powertcp"}) {
		t.Errorf("holders after disable %v, want powertcp", holders)
	}
	if err := n.Store().Release("powertcp"); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(host.PinRoot()); len(left) != 0 {
		t.Errorf("pins left after the last holder: %v", left)
	}
	if was, err := n.Disable(); err != nil || was {
		t.Errorf("second disable = %v, %v; want false, nil", was, err)
	}
}

// TestParseFormatTag checks the tagging policies as users write them, and
// that FormatTag writes back what ParseTag read.
func TestParseFormatTag(t *testing.T) {
	for _, tc := range []struct {
		in      string
		every   uint32
		tsoOnly bool
		out     string // FormatTag's; "" for an input that must fail
	}{
		{"every", 1, false, "every"},
		{"nth=1", 1, false, "every"},
		{"nth=4", 4, false, "nth=4"},
		{"tso-head", 1, true, "tso-head"},
		{"nth=0", 0, false, ""},
		{"nth=-2", 0, false, ""},
		{"nth=", 0, false, ""},
		{"all", 0, false, ""},
	} {
		t.Run(tc.in, func(t *testing.T) {
			every, tsoOnly, err := ParseTag(tc.in)
			if tc.out == "" {
				if err == nil {
					t.Fatalf("ParseTag(%q) = %d, %v; want an error", tc.in, every, tsoOnly)
				}
				return
			}
			if err != nil || every != tc.every || tsoOnly != tc.tsoOnly {
				t.Fatalf("ParseTag(%q) = %d, %v, %v; want %d, %v", tc.in, every, tsoOnly, err, tc.every, tc.tsoOnly)
			}
			if got := FormatTag(every, tsoOnly); got != tc.out {
				t.Errorf("FormatTag(%d, %v) = %q, want %q", every, tsoOnly, got, tc.out)
			}
		})
	}
}
