package onramp

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestMarkAboveThreshold: a peer is marked, and named in a note, when its
// median one-way delay over enough echoes is above a fixed threshold, and
// never under an automatic one.
func TestMarkAboveThreshold(t *testing.T) {
	fixed := Settings{ThresholdNs: uint64(5 * time.Millisecond)}
	peer := func(addr string, samples uint64, p50 time.Duration) PeerStatus {
		return PeerStatus{Peer: netip.MustParseAddr(addr), Samples: samples, OWDP50Ns: int64(p50), MinOWDNs: -1}
	}
	tests := []struct {
		name  string
		s     Settings
		peers []PeerStatus
		want  [][]string // the notes, each by words it must hold
	}{
		{"median above T", fixed, []PeerStatus{peer("198.18.0.2", 500, 5600*time.Microsecond)},
			[][]string{{"peer 198.18.0.2", "5.6ms", "threshold 5ms", "clock"}}},
		{"median at T", fixed, []PeerStatus{peer("198.18.0.2", 500, 5*time.Millisecond)}, nil},
		{"median below T", fixed, []PeerStatus{peer("198.18.0.2", 500, time.Millisecond)}, nil},
		{"too few samples", fixed, []PeerStatus{peer("198.18.0.2", steadyMinSamples-1, time.Second)}, nil},
		{"no samples", fixed, []PeerStatus{{Peer: netip.MustParseAddr("198.18.0.2"), OWDP50Ns: -1, MinOWDNs: -1}}, nil},
		{"automatic threshold", Settings{ThresholdNs: uint64(5 * time.Millisecond), AutoThreshold: true},
			[]PeerStatus{peer("198.18.0.2", 500, time.Second)}, nil},
		{"only the peers above", fixed, []PeerStatus{
			peer("198.18.0.2", 500, time.Millisecond),
			peer("fd00::3", 500, 9*time.Millisecond),
			peer("198.18.0.4", steadyMinSamples, 6*time.Millisecond),
		}, [][]string{{"peer fd00::3", "9ms"}, {"peer 198.18.0.4", "6ms"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := markAboveThreshold(tc.s, tc.peers)
			if len(got) != len(tc.want) {
				t.Fatalf("%d notes, want %d: %q", len(got), len(tc.want), got)
			}
			marked := 0
			for _, p := range tc.peers {
				if p.AboveThreshold {
					if marked < len(got) && !strings.Contains(got[marked], "peer "+p.Peer.String()+":") {
						t.Errorf("peer %s is marked, and note %d is %q", p.Peer, marked, got[marked])
					}
					marked++
				}
			}
			if marked != len(got) {
				t.Errorf("%d peers marked above the threshold, %d notes", marked, len(got))
			}
			for i, words := range tc.want {
				for _, w := range words {
					if !strings.Contains(got[i], w) {
						t.Errorf("note %d %q lacks %q", i, got[i], w)
					}
				}
			}
		})
	}
}
