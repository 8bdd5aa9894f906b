package loader

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/ccload/ccload/internal/pin"
)

// Every attached CC records what it was built from in a small pinned
// array, "meta": the identity of its object (Object), the number of its
// generation, and the ID of the struct_ops map it registered. An upgrade
// compares the recorded identity with the embedded one, and moves the
// record of the generation it replaces to gen/<n>/meta, beside that
// generation's counters.
const (
	pinMeta  = "meta"
	dirGen   = "gen"  // gen/<n>/: the counters and record of generation n, replaced
	dirNext  = "next" // next/: the generation an upgrade is swapping in
	metaName = "ccload_meta"

	metaMagic   = 0x646c6363 // "ccld", little-endian
	metaVersion = 1
	metaSize    = 64
)

// Flags of metaRecord.
const (
	// metaDefaultMoved marks, in next/meta of a legacy upgrade, that the
	// netns default named the CC and was moved to a fallback for the
	// swap: recovery must put it back.
	metaDefaultMoved = 1 << 0
)

// metaRecord is the value of a "meta" pin. Fixed size, no padding: the
// layout is the pin's ABI; append fields in place of the reserved bytes.
type metaRecord struct {
	Magic      uint32
	Version    uint32
	Generation uint32
	Build      uint32 // ccload_build the object was loaded with
	OpsMapID   uint32 // the struct_ops map this generation registered
	Flags      uint32
	AttachedNs int64    // when the generation was registered, Unix ns
	Hash       [32]byte // Object.Hash
}

// Object identifies the BPF object a CC generation was built from: the
// SHA-256 of the embedded ELF and of the constants the loader set in it.
// Two generations with the same Object run the same code.
type Object struct {
	Hash  string `json:"hash"`            // hex; "" when unknown (pinned by a ccload without records)
	Build uint32 `json:"build,omitempty"` // ccload_build the object was loaded with
}

// Short returns the first 12 hex digits of the hash, or "unknown".
func (o Object) Short() string {
	if o.Hash == "" {
		return "unknown"
	}
	return o.Hash[:min(12, len(o.Hash))]
}

// objectOf returns the identity of cc's embedded object loaded with
// ccload_build = build.
func objectOf(cc *CC, build uint32) (Object, [32]byte) {
	h := sha256.New()
	h.Write(cc.object)
	h.Write([]byte("ccload_build"))
	h.Write(binary.LittleEndian.AppendUint32(nil, build))
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return Object{Hash: hex.EncodeToString(sum[:]), Build: build}, sum
}

func (r metaRecord) object() Object {
	if r.Hash == ([32]byte{}) {
		return Object{}
	}
	return Object{Hash: hex.EncodeToString(r.Hash[:]), Build: r.Build}
}

func (r metaRecord) attachedAt() time.Time {
	if r.AttachedNs == 0 {
		return time.Time{}
	}
	return time.Unix(0, r.AttachedNs)
}

// pinMetaAt pins a "meta" record holding r at path.
func pinMetaAt(path string, r metaRecord) error {
	r.Magic, r.Version = metaMagic, metaVersion
	return pin.PinRecord(path, metaName, metaSize, r)
}

// errNoMeta is returned by readMeta for a pin set made before records
// existed.
var errNoMeta = errors.New("no generation record")

// readMeta reads the record pinned at path. A missing pin is errNoMeta.
func readMeta(path string) (metaRecord, error) {
	var r metaRecord
	ok, err := pin.ReadRecord(path, metaSize, &r)
	switch {
	case err != nil:
		return r, err
	case !ok:
		return r, errNoMeta
	case r.Magic != metaMagic:
		return r, fmt.Errorf("%s is not a ccload generation record", path)
	}
	return r, nil
}

// currentMeta reads the record of the generation attached in dir. A pin
// set without one (attached by a ccload before records) is generation 1
// of an unknown object.
func currentMeta(dir string) (metaRecord, error) {
	r, err := readMeta(filepath.Join(dir, pinMeta))
	if errors.Is(err, errNoMeta) {
		return metaRecord{Generation: 1}, nil
	}
	return r, err
}
