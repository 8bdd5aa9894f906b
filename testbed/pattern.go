package testbed

import (
	"bytes"
	"encoding/binary"
)

// patternBlock is the period, in bytes, of a stream's block (patternBlock/8
// words).
const patternBlock = 4096

// headSalt makes the words that number a stream's blocks differ from the
// words inside them.
const headSalt = 0x5ca1ab1e0ddba11

// stream is the deterministic byte stream of one seed: one block of
// splitmix64 words, repeated, whose first word in repetition r is replaced
// by a word of r, so that no two repetitions are alike. Every byte comes
// from a copy of the block, which is what makes the stream cheap to write
// and to check: each flow of the testbed writes and verifies every byte
// it carries, in the same process that times the flows.
type stream struct {
	seed  uint64
	block [patternBlock]byte
}

// newStream computes seed's block.
func newStream(seed uint64) *stream {
	s := &stream{seed: seed}
	for k := range patternBlock / 8 {
		binary.LittleEndian.PutUint64(s.block[8*k:], splitmix(seed, uint64(k)))
	}
	return s
}

// at is the stream's bytes from offset pos to the end of the run that
// holds it: the rest of the block's repetition, or of the word that
// numbers the repetition. It never returns an empty slice.
func (s *stream) at(pos uint64, head *[8]byte) []byte {
	r, in := pos/patternBlock, pos%patternBlock
	if in < 8 {
		binary.LittleEndian.PutUint64(head[:], splitmix(s.seed^headSalt, r))
		return head[in:]
	}
	return s.block[in:]
}

// fill writes the stream's bytes from offset off into b.
func (s *stream) fill(off int64, b []byte) {
	var head [8]byte
	for pos := uint64(off); len(b) > 0; {
		n := copy(b, s.at(pos, &head))
		b, pos = b[n:], pos+uint64(n)
	}
}

// mismatch is the index of the first byte of b that differs from the
// stream from offset off, or -1.
func (s *stream) mismatch(off int64, b []byte) int {
	var head [8]byte
	for i, pos := 0, uint64(off); i < len(b); {
		want := s.at(pos, &head)
		n := min(len(want), len(b)-i)
		if j := firstDiff(b[i:i+n], want[:n]); j >= 0 {
			return i + j
		}
		i, pos = i+n, pos+uint64(n)
	}
	return -1
}

// Pattern fills b with the deterministic byte stream for seed, starting at
// stream offset off; off must not be negative.
//
// The stream is a block of patternBlock bytes, little-endian 64-bit words
// of which word k is the splitmix64 output for state seed +
// (k+1)*0x9e3779b97f4a7c15, repeated; in repetition r the first word is
// instead splitmix64 of seed^headSalt at r. Any window of the stream can
// therefore be produced without generating what precedes it, and
// Pattern(s, o, b[:n]) followed by Pattern(s, o+n, b[n:]) equals
// Pattern(s, o, b). A flow writes and verifies with one stream of its
// seed instead (newStream), which computes the block once.
func Pattern(seed uint64, off int64, b []byte) {
	if off < 0 {
		panic("testbed: Pattern called with negative offset")
	}
	newStream(seed).fill(off, b)
}

// splitmix returns output k of splitmix64 started at seed.
func splitmix(seed, k uint64) uint64 {
	z := seed + (k+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// firstDiff returns the index of the first differing byte of a and b,
// which have the same length, or -1.
func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}
