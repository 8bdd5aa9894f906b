package hop

import (
	"os"
	"strings"
	"testing"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/testutil"
)

// TestAttachRefusesLayer3Device: a hop asked for a device without an
// Ethernet header (tun here; WireGuard, ipip and GRE alike) is refused
// before anything is loaded or pinned, pinned or in the foreground.
func TestAttachRefusesLayer3Device(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/dev/net/tun", "the tun driver (CONFIG_TUN), for a layer-3 device")
	host := testutil.Host(t)
	l := NewPins(host)
	cfg := Config{Iface: "ccl-l3", RateBps: 1_000_000_000, BufferBytes: 1 << 20}
	testutil.InNewNetns(t, func() {
		tun, err := testutil.OpenTun(cfg.Iface)
		if err != nil {
			t.Error(err)
			return
		}
		defer tun.Close()
		for name, attach := range map[string]func() error{
			"pinned":     func() error { _, err := l.Attach(cfg); return err },
			"foreground": func() error { _, err := l.Foreground(cfg); return err },
		} {
			err := attach()
			if !kernel.IsKind(err, kernel.KindBadParam) || !strings.Contains(err.Error(), "layer-3 device") {
				t.Errorf("%s hop on a tun device: %v, want a bad parameter that names the layer-3 device", name, err)
			}
		}
	})
	hops, err := l.List()
	if err != nil || len(hops) != 0 {
		t.Errorf("after the refusals: hops %+v, %v; want none", hops, err)
	}
	if entries, err := os.ReadDir(l.root()); err == nil && len(entries) != 0 {
		t.Errorf("after the refusals %s holds %d entries, want none", l.root(), len(entries))
	}
}
