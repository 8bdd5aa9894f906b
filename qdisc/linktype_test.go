package qdisc

import (
	"errors"
	"strings"
	"testing"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/testutil"
)

// TestRequireEthernet: Ethernet and loopback devices pass; a layer-3 tun
// device and a missing interface get errors that name the problem.
func TestRequireEthernet(t *testing.T) {
	testutil.WithFragsTap(t, "ccl-eth0", func(func(...[]byte) error) {
		for _, ok := range []string{"ccl-eth0", "lo"} {
			if err := RequireEthernet(ok, "the program"); err != nil {
				t.Errorf("RequireEthernet(%s): %v, want nil", ok, err)
			}
		}
		tun, err := testutil.OpenTun("ccl-l3")
		if err != nil {
			t.Error(err)
			return
		}
		defer tun.Close()
		for _, tc := range []struct{ iface, want string }{
			{"ccl-l3", "ccl-l3 is a layer-3 device (link type none, no Ethernet header); the program parses Ethernet frames"},
			{"ccl-nope", "interface ccl-nope does not exist"},
		} {
			err := RequireEthernet(tc.iface, "the program")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("RequireEthernet(%s) = %v, want an error saying %q", tc.iface, err, tc.want)
			}
			if !errors.Is(err, &kernel.Error{Kind: kernel.KindBadParam}) {
				t.Errorf("RequireEthernet(%s): %v is not a bad parameter", tc.iface, err)
			}
		}
	})
}
