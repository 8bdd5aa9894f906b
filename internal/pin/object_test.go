package pin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/ccload/ccload/internal/testutil"
)

func TestObjectOf(t *testing.T) {
	elf := []byte("\x7fELF a BPF object")
	tests := []struct {
		name string
		elf  []byte
		salt uint32
		same bool // the same identity as elf with salt 0
	}{
		{name: "same object", elf: elf, same: true},
		{name: "a newer build (salt)", elf: elf, salt: 7},
		{name: "another object", elf: []byte("\x7fELF another BPF object")},
		{name: "trailing zeros are another object", elf: append(append([]byte{}, elf...), 0, 0, 0), salt: 0},
	}
	base := ObjectOf(elf, 0)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ObjectOf(tt.elf, tt.salt); (got == base) != tt.same {
				t.Errorf("ObjectOf = %s, base %s: same = %v, want %v", got.Short(), base.Short(), got == base, tt.same)
			}
		})
	}
	if s := base.String(); len(s) != 64 || !strings.HasPrefix(s, base.Short()) || len(base.Short()) != 12 {
		t.Errorf("String %q, Short %q", s, base.Short())
	}
}

// TestObjectRecord writes, reads and replaces a record on the bpffs, and
// reads a pin set with none as unknown.
func TestObjectRecord(t *testing.T) {
	testutil.RequireRoot(t)
	root := testutil.Host(t).PinRoot()
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "object")
	a, b := ObjectOf([]byte("a"), 0), ObjectOf([]byte("a"), 7)

	if o, ok, err := ReadObject(path); err != nil || ok || o != (Object{}) {
		t.Fatalf("ReadObject of no record = %s, %v, %v; want zero, false, nil", o, ok, err)
	}
	if err := WriteObject(path, a); err != nil {
		t.Fatal(err)
	}
	if err := WriteObject(path, b); err == nil {
		t.Error("WriteObject over an existing record succeeded")
	}
	if o, ok, err := ReadObject(path); err != nil || !ok || o != a {
		t.Fatalf("ReadObject = %s, %v, %v; want %s", o.Short(), ok, err, a.Short())
	}
	m, err := ebpf.LoadPinnedMap(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := m.Info()
	if err := ReplaceObject(path, b); err != nil {
		t.Fatal(err)
	}
	if o, ok, err := ReadObject(path); err != nil || !ok || o != b {
		t.Fatalf("ReadObject after ReplaceObject = %s, %v, %v; want %s", o.Short(), ok, err, b.Short())
	}
	after, err := ebpf.LoadPinnedMap(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	ai, _ := after.Info()
	bid, _ := before.ID()
	aid, _ := ai.ID()
	if bid != aid || before.Name != objectMapName {
		t.Errorf("ReplaceObject made map %d (%q) out of %d: want the same map, updated in place", aid, before.Name, bid)
	}
	m.Close()
	after.Close()

	// ReplaceObject pins a record where a pin set had none.
	fresh := filepath.Join(root, "fresh")
	if err := ReplaceObject(fresh, b); err != nil {
		t.Fatal(err)
	}
	if o, ok, err := ReadObject(fresh); err != nil || !ok || o != b {
		t.Errorf("ReadObject of the record ReplaceObject pinned = %s, %v, %v", o.Short(), ok, err)
	}

	// Something else pinned at the path is refused.
	other, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 32, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	wrong := filepath.Join(root, "wrong")
	if err := other.Pin(wrong); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadObject(wrong); err == nil {
		t.Error("ReadObject read a hash map as a record")
	}
	if err := ReplaceObject(wrong, a); err == nil {
		t.Error("ReplaceObject wrote into a hash map")
	}
}
