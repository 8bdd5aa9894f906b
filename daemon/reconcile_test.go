package daemon

import (
	"net/netip"
	"testing"

	"github.com/ccload/ccload/onramp"
)

// TestOnRampDrift: an interface whose pinned On-Ramp settings differ from
// the config in any parameter the config sets is named as drifted, with
// what differs; one that matches, defaults filled in, is not.
func TestOnRampDrift(t *testing.T) {
	peers := []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}
	running := onramp.Status{Peers: []string{"198.18.0.0/15"}, Settings: onramp.Settings{
		ThresholdNs: uint64(onramp.DefaultThreshold), Gain: onramp.DefaultGain, MaxPauseNs: uint64(onramp.DefaultMaxPause)}}
	for _, tt := range []struct {
		name string
		want onramp.Config
		cur  func(onramp.Status) onramp.Status
		diff string
	}{
		{"defaults match", onramp.Config{Peers: peers}, nil, ""},
		{"observe", onramp.Config{Peers: peers, Observe: true}, nil, "observe mode differs"},
		{"every packet wanted", onramp.Config{Peers: peers, StampEveryPacket: true}, nil, "stamping every packet or sparsely differs"},
		{"every packet running", onramp.Config{Peers: peers},
			func(s onramp.Status) onramp.Status { s.Settings.StampEveryPacket = true; return s },
			"stamping every packet or sparsely differs"},
		{"every packet both", onramp.Config{Peers: peers, StampEveryPacket: true},
			func(s onramp.Status) onramp.Status { s.Settings.StampEveryPacket = true; return s }, ""},
		{"max pause", onramp.Config{Peers: peers, MaxPause: 2 * onramp.DefaultMaxPause}, nil, "the maximum pause differs"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cur := running
			if tt.cur != nil {
				cur = tt.cur(cur)
			}
			if got := onRampDrift(tt.want, cur); got != tt.diff {
				t.Errorf("drift %q, want %q", got, tt.diff)
			}
		})
	}
}
