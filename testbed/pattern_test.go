package testbed

import (
	"bytes"
	"encoding/hex"
	"testing"
)

func TestPatternDeterministic(t *testing.T) {
	tests := []struct {
		name string
		seed uint64
		off  int64
		n    int
	}{
		{"aligned", 1, 0, 1024},
		{"unaligned start", 1, 3, 1000},
		{"unaligned both", 42, 13, 29},
		{"inside one word", 42, 9, 5},
		{"empty", 7, 5, 0},
		{"large offset", 0xdeadbeef, 1 << 40, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := make([]byte, tt.n)
			b := make([]byte, tt.n)
			Pattern(tt.seed, tt.off, a)
			Pattern(tt.seed, tt.off, b)
			if !bytes.Equal(a, b) {
				t.Fatalf("two calls differ")
			}
			// Byte-by-byte generation must agree with the bulk call.
			for i := range a {
				var one [1]byte
				Pattern(tt.seed, tt.off+int64(i), one[:])
				if one[0] != a[i] {
					t.Fatalf("byte %d: single-byte call gives %#x, bulk call %#x", i, one[0], a[i])
				}
			}
		})
	}
}

func TestPatternOffsetConsistency(t *testing.T) {
	const seed, total = 99, 4096 + 7
	whole := make([]byte, total)
	Pattern(seed, 0, whole)

	// Any split of the stream into two calls reproduces it.
	for _, split := range []int{0, 1, 7, 8, 9, 63, 64, 65, 1000, 4095, 4096, 4097, 4100, total - 1, total} {
		got := make([]byte, total)
		Pattern(seed, 0, got[:split])
		Pattern(seed, int64(split), got[split:])
		if !bytes.Equal(got, whole) {
			t.Errorf("split at %d does not reproduce the stream", split)
		}
	}
}

func TestPatternSeedsDiffer(t *testing.T) {
	a := make([]byte, 64)
	b := make([]byte, 64)
	Pattern(1, 0, a)
	Pattern(2, 0, b)
	if bytes.Equal(a, b) {
		t.Error("seeds 1 and 2 give the same stream")
	}
	if bytes.Equal(a, make([]byte, 64)) {
		t.Error("stream is all zeros")
	}
}

// TestPatternKnownValue pins the stream's format: for seed 0, the word
// that numbers block 0, the block's word 1 (splitmix64's second output
// from state 0), and the word that numbers block 1. The values were
// computed apart from this package's code.
func TestPatternKnownValue(t *testing.T) {
	b := make([]byte, 2*patternBlock)
	Pattern(0, 0, b)
	for _, tc := range []struct {
		off  int
		want string
	}{
		{0, "32bbd3e353a6fb76"},
		{8, "f465b9a16a9e786e"},
		{patternBlock, "31c97bbe63079315"},
		{patternBlock + 8, "f465b9a16a9e786e"},
	} {
		if got := hex.EncodeToString(b[tc.off : tc.off+8]); got != tc.want {
			t.Errorf("Pattern(0) at %d = %s, want %s", tc.off, got, tc.want)
		}
	}
}

// TestStreamBlocks checks that consecutive blocks differ only in the word
// that numbers them, so that a block delivered in another's place is
// caught.
func TestStreamBlocks(t *testing.T) {
	b := make([]byte, 3*patternBlock)
	newStream(7).fill(0, b)
	for r := 1; r < 3; r++ {
		prev, cur := b[(r-1)*patternBlock:r*patternBlock], b[r*patternBlock:(r+1)*patternBlock]
		if bytes.Equal(prev[:8], cur[:8]) || !bytes.Equal(prev[8:], cur[8:]) {
			t.Errorf("blocks %d and %d: want the first word to differ and the rest equal", r-1, r)
		}
	}
}

// TestStreamMismatch flips one byte of a window of the stream at a time,
// in a block's numbering word, inside a block and across a block's end,
// and checks that mismatch finds exactly it, and nothing in the intact
// window.
func TestStreamMismatch(t *testing.T) {
	s := newStream(11)
	for _, tc := range []struct {
		name string
		off  int64
		n    int
	}{
		{"aligned", 0, 3 * patternBlock},
		{"unaligned across a block's end", patternBlock - 5, 20},
		{"inside a numbering word", 2*patternBlock + 3, 3},
		{"far into the stream", 1<<40 + 13, 2*patternBlock + 9},
		{"empty", 99, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := make([]byte, tc.n)
			s.fill(tc.off, b)
			if i := s.mismatch(tc.off, b); i != -1 {
				t.Fatalf("intact window: mismatch at %d", i)
			}
			for _, at := range []int{0, 1, 7, 8, tc.n / 2, tc.n - 1} {
				if at < 0 || at >= tc.n {
					continue
				}
				b[at] ^= 0x40
				if i := s.mismatch(tc.off, b); i != at {
					t.Errorf("byte %d flipped: mismatch at %d", at, i)
				}
				b[at] ^= 0x40
			}
			if tc.n > 0 {
				if i := newStream(12).mismatch(tc.off, b); i < 0 {
					t.Error("another seed's stream matches this one")
				}
			}
		})
	}
}

func BenchmarkPattern(b *testing.B) {
	buf := make([]byte, chunkSize)
	b.SetBytes(int64(len(buf)))
	for i := range b.N {
		Pattern(1, int64(i)*int64(len(buf)), buf)
	}
}
