package testbed

import "encoding/binary"

// Pattern fills b with the deterministic byte stream for seed, starting at
// stream offset off.
//
// The stream is a sequence of little-endian 64-bit words; word k is the
// splitmix64 output for state seed + (k+1)*0x9e3779b97f4a7c15. Any window of
// the stream can therefore be produced without generating what precedes it,
// and Pattern(s, o, b[:n]) followed by Pattern(s, o+n, b[n:]) equals
// Pattern(s, o, b). off must not be negative.
func Pattern(seed uint64, off int64, b []byte) {
	if off < 0 {
		panic("testbed: Pattern called with negative offset")
	}
	pos := uint64(off)

	// Unaligned head.
	if r := pos % 8; r != 0 && len(b) > 0 {
		w := patternWord(seed, pos/8)
		n := copy(b, le64(w)[r:])
		b = b[n:]
		pos += uint64(n)
	}
	// Whole words.
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, patternWord(seed, pos/8))
		b = b[8:]
		pos += 8
	}
	// Tail.
	if len(b) > 0 {
		copy(b, le64(patternWord(seed, pos/8)))
	}
}

// patternWord returns word k of the stream for seed (splitmix64).
func patternWord(seed, k uint64) uint64 {
	z := seed + (k+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func le64(w uint64) []byte {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], w)
	return b[:]
}
