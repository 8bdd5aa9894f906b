package sharedmaps

import (
	"os"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/testutil"
)

// storageSpec is a socket-storage map spec like the objects' shared maps,
// with a value of valueSize bytes (the kernel wants BTF for both).
func storageSpec(name string, valueSize uint32) *ebpf.MapSpec {
	u8 := &btf.Int{Name: "u8", Size: 1}
	return &ebpf.MapSpec{
		Name: name, Type: ebpf.SkStorage, KeySize: 4, ValueSize: valueSize, Flags: unix.BPF_F_NO_PREALLOC,
		Key:   &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed},
		Value: &btf.Struct{Name: "value", Size: valueSize, Members: []btf.Member{{Name: "bytes", Type: &btf.Array{Index: u8, Type: u8, Nelems: valueSize}}}},
	}
}

// TestAcquireRelease walks the shared maps through their holders: each
// map is pinned by the first holder that asks for it and shared with the
// later ones, a holder may hold both, and the last release unpins them all.
func TestAcquireRelease(t *testing.T) {
	testutil.RequireRoot(t)
	s := New(testutil.Host(t))
	id := func(m *ebpf.Map) ebpf.MapID {
		t.Helper()
		info, err := m.Info()
		if err != nil {
			t.Fatal(err)
		}
		id, _ := info.ID()
		return id
	}
	acquire := func(holder, name string) ebpf.MapID {
		t.Helper()
		m, err := s.Acquire(holder, storageSpec(name, 16))
		if err != nil {
			t.Fatalf("%s acquires %s: %v", holder, name, err)
		}
		defer m.Close()
		return id(m)
	}

	holds := acquire("onramp", OnRampHolds)
	if again := acquire("theta_powertcp", OnRampHolds); again != holds {
		t.Errorf("the second holder of %s got map %d, the first %d", OnRampHolds, again, holds)
	}
	store := acquire("powertcp", INTStore)
	if acquire("powertcp", OnRampHolds) != holds {
		t.Errorf("powertcp got another %s", OnRampHolds)
	}
	if store == holds {
		t.Fatalf("%s and %s are one map", INTStore, OnRampHolds)
	}
	if room := acquire("onramp", OnRampRoom); room == holds || room == store {
		t.Fatalf("%s is one map with another", OnRampRoom)
	}
	if h, _ := s.Holders(); !slices.Equal(h, []string{"onramp", "powertcp", "theta_powertcp"}) {
		t.Errorf("holders %v", h)
	}

	for _, h := range []string{"onramp", "theta_powertcp"} {
		if err := s.Release(h); err != nil {
			t.Fatal(err)
		}
		for _, name := range Names() {
			if !kernel.Exists(s.PinPath(name)) {
				t.Errorf("%s is unpinned after %s let go, while powertcp holds it", name, h)
			}
		}
	}
	if err := s.Release("powertcp"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Dir()); !os.IsNotExist(err) {
		t.Errorf("%s is left after the last holder let go: %v", s.Dir(), err)
	}
	if err := s.Release("powertcp"); err != nil {
		t.Errorf("releasing a holder that holds nothing: %v", err)
	}
}

// TestAcquireErrors checks that a map ccload does not share, and a pinned
// map of another layout, are refused with what to do, and leave nothing
// held.
func TestAcquireErrors(t *testing.T) {
	testutil.RequireRoot(t)
	s := New(testutil.Host(t))

	_, err := s.Acquire("theta_powertcp", storageSpec("params", 16))
	if !kernel.IsKind(err, kernel.KindBadObject) {
		t.Errorf("a map ccload does not share: %v, want a bad-object error", err)
	}
	if _, err := s.Acquire("theta_powertcp", nil); !kernel.IsKind(err, kernel.KindBadObject) {
		t.Errorf("no map: %v, want a bad-object error", err)
	}

	m, err := s.Acquire("onramp", storageSpec(OnRampHolds, 16))
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	_, err = s.Acquire("theta_powertcp", storageSpec(OnRampHolds, 24))
	if !kernel.IsKind(err, kernel.KindVersionMismatch) || kernel.FixOf(err) == "" {
		t.Errorf("a pinned map of another layout: %v (fix %q), want a version mismatch with a fix", err, kernel.FixOf(err))
	}
	if h, _ := s.Holders(); !slices.Equal(h, []string{"onramp"}) {
		t.Errorf("holders after the refusals: %v, want [onramp]", h)
	}
	if err := s.Release("onramp"); err != nil {
		t.Fatal(err)
	}
}
