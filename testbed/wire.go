package testbed

import "encoding/binary"

// Every flow starts with a header of headerLen bytes: the 8-byte pattern
// seed followed by the 8-byte payload length, both big endian. The payload,
// Pattern(seed, 0, payload), follows.
//
// A length of unknownLength (all ones) declares a time-bounded flow
// (FlowConfig.For): the payload runs until the sender's FIN, and the sink
// verifies the pattern up to EOF. Any other negative length is invalid.
const headerLen = 16

// unknownLength is the header length of a flow whose length is not known
// up front.
const unknownLength int64 = -1

// chunkSize is the largest buffer used to write and verify payload, and
// minChunkSize the smallest the sink reads into.
const (
	chunkSize    = 256 << 10
	minChunkSize = 4 << 10
)

// bufferFor is the size of the buffer that writes or verifies a stream of
// n bytes: n itself up to chunkSize, at least minChunkSize, and chunkSize
// when n is unknown (negative). A short flow gets a buffer of its own
// size, so that a run of thousands of them does not allocate and zero a
// quarter MiB for each (a load on the bench process that delays the
// start of every other flow).
func bufferFor(n int64) int {
	if n < 0 || n >= chunkSize {
		return chunkSize
	}
	return max(int(n), minChunkSize)
}

func putHeader(b []byte, seed uint64, length int64) {
	binary.BigEndian.PutUint64(b[0:8], seed)
	binary.BigEndian.PutUint64(b[8:16], uint64(length))
}

func parseHeader(b []byte) (seed uint64, length int64) {
	return binary.BigEndian.Uint64(b[0:8]), int64(binary.BigEndian.Uint64(b[8:16]))
}
