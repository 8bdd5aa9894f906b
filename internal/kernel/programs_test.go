package kernel_test

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/testutil"
)

// TestWalkPrograms loads two programs and finds both in the walk, each
// once, with its info, and checks that the walk stops when told to.
func TestWalkPrograms(t *testing.T) {
	testutil.RequireRoot(t)
	var ids []ebpf.ProgramID
	for range 2 {
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "walk_test", Type: ebpf.SchedCLS, License: "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
		if err != nil {
			t.Fatalf("load a test program: %v", err)
		}
		defer p.Close()
		ids = append(ids, testutil.ProgramID(t, p))
	}
	seen := map[ebpf.ProgramID]int{}
	if err := kernel.WalkPrograms(func(id ebpf.ProgramID, prog *ebpf.Program, info *ebpf.ProgramInfo) bool {
		if info.Name == "walk_test" {
			if info.Type != ebpf.SchedCLS || prog == nil {
				t.Errorf("program %d: type %s, handle %v", id, info.Type, prog)
			}
			seen[id]++
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("program %d seen %d times, want once (seen: %v)", id, seen[id], seen)
		}
	}

	calls := 0
	if err := kernel.WalkPrograms(func(ebpf.ProgramID, *ebpf.Program, *ebpf.ProgramInfo) bool {
		calls++
		return false
	}); err != nil || calls != 1 {
		t.Errorf("a walk told to stop at once made %d calls (%v), want 1", calls, err)
	}
}
