package pin

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// A pin set of a tc or sockops program (an INT hop, the INT sockops
// program, On-Ramp) records the BPF object it was built from in a pinned
// one-entry array, so that a ccload whose embedded object differs knows
// that the programs attached are another build's and swaps its own in.

// objectMapName is the name of the record's map, as bpftool shows it.
const objectMapName = "ccload_object"

// Object identifies a BPF object: the SHA-256 of its ELF and of a salt.
// Two pin sets with the same Object run the same code.
type Object [32]byte

// ObjectOf returns the identity of the ELF object elf (the bytes bpf2go
// embeds) loaded with salt. Salt 0 is the build as shipped; tests pass
// another to stand for a newer build of the same object.
func ObjectOf(elf []byte, salt uint32) Object {
	h := sha256.New()
	h.Write(elf)
	h.Write(binary.LittleEndian.AppendUint32(nil, salt))
	var o Object
	copy(o[:], h.Sum(nil))
	return o
}

// String returns the identity in hex.
func (o Object) String() string { return hex.EncodeToString(o[:]) }

// Short returns the first 12 hex digits of the identity.
func (o Object) Short() string { return o.String()[:12] }

// objectSize is the size of an object record.
const objectSize = uint32(len(Object{}))

// WriteObject pins a record of o at path, a new file on a bpf
// filesystem (in a Stage, or in a pin set's directory).
func WriteObject(path string, o Object) error {
	return PinRecord(path, objectMapName, objectSize, o[:])
}

// ReadObject reads the record pinned at path. It returns false, and no
// error, when there is none: a pin set made by a ccload that recorded no
// object, whose build is unknown, so that an upgrade is due.
func ReadObject(path string) (Object, bool, error) {
	var o Object
	var v []byte
	ok, err := ReadRecord(path, objectSize, &v)
	if ok {
		copy(o[:], v)
	}
	return o, ok, err
}

// ReplaceObject makes the record pinned at path say o: it updates the
// record in place, or pins a new one when path has none (a pin set made
// before records). The caller holds the pin root's Lock: a reader that
// does not may see a record half written, and take it for another
// object's, which only makes it offer an upgrade that is not due.
func ReplaceObject(path string, o Object) error {
	return UpdateRecord(path, objectMapName, objectSize, o[:])
}
