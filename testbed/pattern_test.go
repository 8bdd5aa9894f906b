package testbed

import (
	"bytes"
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
	for _, split := range []int{0, 1, 7, 8, 9, 63, 64, 65, 1000, total - 1, total} {
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

func TestPatternKnownValue(t *testing.T) {
	// First splitmix64 output for state 0 is 0xe220a8397b1dcdaf.
	var b [8]byte
	Pattern(0, 0, b[:])
	want := []byte{0xaf, 0xcd, 0x1d, 0x7b, 0x39, 0xa8, 0x20, 0xe2}
	if !bytes.Equal(b[:], want) {
		t.Errorf("Pattern(0, 0) = %x, want %x", b, want)
	}
}

func BenchmarkPattern(b *testing.B) {
	buf := make([]byte, chunkSize)
	b.SetBytes(int64(len(buf)))
	for i := range b.N {
		Pattern(1, int64(i)*int64(len(buf)), buf)
	}
}
