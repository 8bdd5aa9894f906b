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

// TestHistShareAbove: the share of a histogram's samples above a
// threshold counts a bucket by its middle, as the percentiles do.
func TestHistShareAbove(t *testing.T) {
	// bucketOf is the bucket of v ns, as owd_bucket of bpf/onramp.c.
	bucketOf := func(v int64) int {
		for i := 0; i < 256; i++ {
			if lo, hi := bucketRange(i); v >= lo && v < hi {
				return i
			}
		}
		t.Fatalf("no bucket holds %d", v)
		return -1
	}
	hist := func(counts map[time.Duration]uint32) []uint32 {
		h := make([]uint32, 256)
		for v, c := range counts {
			h[bucketOf(int64(v))] += c
		}
		return h
	}
	ms := time.Millisecond
	tests := []struct {
		name   string
		hist   []uint32
		thresh time.Duration
		want   float64
	}{
		{"empty", make([]uint32, 256), ms, -1},
		{"all below", hist(map[time.Duration]uint32{100 * time.Microsecond: 50}), ms, 0},
		{"all above", hist(map[time.Duration]uint32{30 * ms: 50}), ms, 1},
		{"a quarter above", hist(map[time.Duration]uint32{200 * time.Microsecond: 75, 5 * ms: 25}), ms, 0.25},
		// 5 ms falls in a bucket 524 µs wide, [4.719, 5.243) ms: its
		// middle, 4.981 ms, is above 4.9 ms and below 5 ms.
		{"T in the bucket, below its middle", hist(map[time.Duration]uint32{5 * ms: 10}), 4900 * time.Microsecond, 1},
		{"T in the bucket, above its middle", hist(map[time.Duration]uint32{5 * ms: 10}), 5 * ms, 0},
		{"negative delays are in bucket 0", hist(map[time.Duration]uint32{0: 3, 2 * ms: 1}), ms, 0.25},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := histShareAbove(tc.hist, int64(tc.thresh)); got != tc.want {
				t.Errorf("histShareAbove(T %v) = %v, want %v", tc.thresh, got, tc.want)
			}
		})
	}
}
