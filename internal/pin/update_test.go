package pin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/testutil"
)

// sockopsProgram loads a sockops program that does nothing, closed at the
// end of the test.
func sockopsProgram(t *testing.T, name string) *ebpf.Program {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: name, Type: ebpf.SockOps, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Return()},
	})
	if err != nil {
		t.Fatalf("load a sockops program: %v", err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog
}

// TestUpdatePinnedLink attaches a sockops program to a cgroup of the
// test's own through a pinned link, and swaps another in: the link stays
// the same one and runs the new program.
func TestUpdatePinnedLink(t *testing.T) {
	testutil.RequireRoot(t)
	cgRoot, err := kernel.Cgroup2Root()
	if err != nil {
		testutil.Skip(t, "no cgroup v2 hierarchy: "+err.Error())
	}
	cg := filepath.Join(cgRoot, fmt.Sprintf("ccload-test-%d", os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(cg) })
	root := testutil.Host(t).PinRoot()
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "link")

	old, next := sockopsProgram(t, "ccload_old"), sockopsProgram(t, "ccload_new")
	lnk, err := link.AttachCgroup(link.CgroupOptions{Path: cg, Attach: ebpf.AttachCGroupSockOps, Program: old})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lnk.Close() })
	if err := lnk.Pin(path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { DetachLink(path) })
	before, err := lnk.Info()
	if err != nil {
		t.Fatal(err)
	}

	if err := UpdatePinnedLink(path, next); err != nil {
		t.Fatal(err)
	}
	after, err := lnk.Info()
	if err != nil {
		t.Fatal(err)
	}
	nextInfo, _ := next.Info()
	nextID, _ := nextInfo.ID()
	if after.ID != before.ID || after.Program != nextID || before.Program == nextID {
		t.Errorf("link %d ran program %d; after the update link %d runs %d, want link %d running %d",
			before.ID, before.Program, after.ID, after.Program, before.ID, nextID)
	}

	if err := UpdatePinnedLink(filepath.Join(root, "nosuch"), next); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("UpdatePinnedLink of a missing pin: %v, want an error wrapping os.ErrNotExist", err)
	}
	wrong, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.SchedCLS, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	if err := UpdatePinnedLink(path, wrong); err == nil {
		t.Error("UpdatePinnedLink swapped a tc program into a sockops link")
	}
	if now, _ := lnk.Info(); now == nil || now.Program != nextID {
		t.Errorf("the refused update changed the link: %+v", now)
	}
}
