package loader

import (
	"testing"
	"unsafe"
)

// TestObjectVariables checks what upgrades rely on in every CC object: a
// ccload_build constant to load another build with, a stats map with a
// slot for every counter loader/stats.go names, and identities that differ
// between builds and between CCs.
func TestObjectVariables(t *testing.T) {
	seen := map[string]string{}
	for _, cc := range Builtin() {
		spec, err := cc.load()
		if err != nil {
			t.Fatal(err)
		}
		v, ok := spec.Variables[varBuild]
		if !ok || !v.Constant() || v.Size() != 4 {
			t.Errorf("%s: constant %s missing or not a __u32: %v", cc.Name, varBuild, v)
		}
		if n := spec.Maps[mapStats].MaxEntries; n != uint32(len(statNames)) {
			t.Errorf("%s: stats has %d slots, loader/stats.go names %d", cc.Name, n, len(statNames))
		}
		for _, build := range []uint32{0, upgradeBuild} {
			o, _ := objectOf(cc, build)
			if other, dup := seen[o.Hash]; dup {
				t.Errorf("%s build %d has the identity of %s", cc.Name, build, other)
			}
			seen[o.Hash] = cc.Name
		}
	}
}

// TestMetaRecordSize keeps the record's Go layout the pin's.
func TestMetaRecordSize(t *testing.T) {
	if s := unsafe.Sizeof(metaRecord{}); s != metaSize {
		t.Fatalf("metaRecord is %d bytes, the pin's value %d", s, metaSize)
	}
}
