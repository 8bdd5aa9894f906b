package qdisc

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/testbed"
)

// attach attaches prog inside h's netns and detaches it at the end of the
// test.
func attach(t testing.TB, h *testbed.Host, iface string, prog *ebpf.Program, opts AttachOptions) *Attachment {
	t.Helper()
	a, err := attachIn(h, iface, prog, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Error(err)
		}
	})
	return a
}

// attachIn calls Attach inside h's netns.
func attachIn(h *testbed.Host, iface string, prog *ebpf.Program, opts AttachOptions) (*Attachment, error) {
	var a *Attachment
	err := h.Do(func() error {
		var err error
		a, err = Attach(iface, prog, opts)
		return err
	})
	return a, err
}

// wantFilter is how readTCState shows the filter Attach adds with clsact.
func wantFilter(dir Direction, prio uint16, id ebpf.ProgramID) string {
	return fmt.Sprintf("%s pref %d bpf handle 0x1 id %d direct-action", dir, prio, id)
}

// TestAttachCloseRemovesEverything attaches the EDT program in every way
// to both sides of a veth, checks that the kernel shows it and that
// packets run through it, and that Close leaves the interface as it was.
// It needs no sch_fq: without fq the departure times are only not
// enforced.
func TestAttachCloseRemovesEverything(t *testing.T) {
	testutil.RequireRoot(t)
	p := testnet.NewPair(t)
	iface := peerIface(t, p.A)
	e := loadEDT(t)
	if err := e.SetDelay(100 * time.Microsecond); err != nil {
		t.Fatal(err)
	}
	id := testutil.ProgramID(t, e.Program())
	before := readTCState(t, p.A, iface)
	t.Logf("%s before: %v", iface, before)

	tests := []struct {
		method Method
		dir    Direction
	}{
		{MethodAuto, Egress},
		{MethodAuto, Ingress},
		{MethodTCX, Egress},
		{MethodTCX, Ingress},
		{MethodClsact, Egress},
		{MethodClsact, Ingress},
	}
	for _, tt := range tests {
		t.Run(tt.method.String()+"/"+tt.dir.String(), func(t *testing.T) {
			a, err := attachIn(p.A, iface, e.Program(), AttachOptions{Direction: tt.dir, Method: tt.method})
			if tt.method == MethodTCX && errors.Is(err, ebpf.ErrNotSupported) {
				// Kernels before 6.6. The failed attach must leave nothing.
				t.Logf("this kernel has no TCX: %v", err)
				if after := readTCState(t, p.A, iface); !after.equal(before) {
					t.Errorf("failed attach left %v, want %v", after, before)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close() })
			t.Logf("attached with %s", a.Method())
			if a.Direction() != tt.dir || a.Interface() != iface {
				t.Errorf("attachment reports %s %s, want %s %s", a.Interface(), a.Direction(), iface, tt.dir)
			}
			if tt.method != MethodAuto && a.Method() != tt.method {
				t.Errorf("Method() = %s, want %s", a.Method(), tt.method)
			}

			during := readTCState(t, p.A, iface)
			t.Logf("%s while attached: %v", iface, during)
			switch a.Method() {
			case MethodTCX:
				if !slices.Contains(during.TCX, id) {
					t.Errorf("tcx programs %v lack program %d", during.TCX, id)
				}
			case MethodClsact:
				if !slices.Contains(during.Qdiscs, "clsact ffff: parent ffff:fff1") {
					t.Errorf("qdiscs %q lack clsact", during.Qdiscs)
				}
				if want := wantFilter(tt.dir, DefaultPriority, id); !slices.Contains(during.Filters, want) {
					t.Errorf("filters %q lack %q", during.Filters, want)
				}
			default:
				t.Fatalf("Method() = %s, want tcx or clsact", a.Method())
			}

			s0, err := e.Stats()
			if err != nil {
				t.Fatal(err)
			}
			measureRTT(t, p.A, p.B, 5, 30*time.Second)
			s1, err := e.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if s1.Packets <= s0.Packets || s1.Delayed <= s0.Delayed {
				t.Errorf("the program saw no traffic: stats %+v before, %+v after", s0, s1)
			}

			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if err := a.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
			if after := readTCState(t, p.A, iface); !after.equal(before) {
				t.Errorf("after Close: %v, want %v", after, before)
			}
		})
	}
}

// TestAttachClsactSharing attaches several programs with clsact and checks
// that each Close removes only its own filter, and the last one the
// clsact qdisc too.
func TestAttachClsactSharing(t *testing.T) {
	testutil.RequireRoot(t)
	p := testnet.NewPair(t)
	iface := peerIface(t, p.A)
	e := loadEDT(t)
	id := testutil.ProgramID(t, e.Program())
	before := readTCState(t, p.A, iface)

	egress := attach(t, p.A, iface, e.Program(), AttachOptions{Method: MethodClsact})
	ingress := attach(t, p.A, iface, e.Program(), AttachOptions{Method: MethodClsact, Direction: Ingress})
	second := attach(t, p.A, iface, e.Program(), AttachOptions{Method: MethodClsact, Priority: 7})

	// The same side and priority again is refused, and the refusal
	// removes nothing.
	all := readTCState(t, p.A, iface)
	if _, err := attachIn(p.A, iface, e.Program(), AttachOptions{Method: MethodClsact}); !errors.Is(err, unix.EEXIST) {
		t.Errorf("second attach at the same priority: %v, want EEXIST", err)
	}
	if now := readTCState(t, p.A, iface); !now.equal(all) {
		t.Errorf("the refused attach changed %v into %v", all, now)
	}

	steps := []struct {
		close *Attachment
		want  []string // the filters left
	}{
		{egress, []string{wantFilter(Egress, 7, id), wantFilter(Ingress, DefaultPriority, id)}},
		{second, []string{wantFilter(Ingress, DefaultPriority, id)}},
		{ingress, nil},
	}
	for i, s := range steps {
		if err := s.close.Close(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		st := readTCState(t, p.A, iface)
		var got []string
		for _, f := range st.Filters {
			if strings.Contains(f, " handle 0x1 ") {
				got = append(got, f)
			}
		}
		if !slices.Equal(got, s.want) {
			t.Errorf("step %d: filters %q, want %q", i, got, s.want)
		}
		hasClsact := slices.ContainsFunc(st.Qdiscs, func(q string) bool { return strings.HasPrefix(q, "clsact ") })
		if hasClsact != (s.want != nil) {
			t.Errorf("step %d: qdiscs %q; clsact present %v, want %v", i, st.Qdiscs, hasClsact, s.want != nil)
		}
	}
	if after := readTCState(t, p.A, iface); !after.equal(before) {
		t.Errorf("after Close: %v, want %v", after, before)
	}
}

// TestAttachErrors checks that Attach fails cleanly on bad input.
func TestAttachErrors(t *testing.T) {
	testutil.RequireRoot(t)
	p := testnet.NewPair(t)
	iface := peerIface(t, p.A)
	e := loadEDT(t)
	before := readTCState(t, p.A, iface)

	filter, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.SocketFilter,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
		License:      "GPL",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { filter.Close() })

	tests := []struct {
		name  string
		iface string
		prog  *ebpf.Program
		opts  AttachOptions
		want  string
	}{
		{"no such interface", "nosuch0", e.Program(), AttachOptions{}, "nosuch0"},
		{"no such interface, clsact", "nosuch0", e.Program(), AttachOptions{Method: MethodClsact}, "nosuch0"},
		{"socket filter", iface, filter, AttachOptions{}, "want SchedCLS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := attachIn(p.A, tt.iface, tt.prog, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Attach() = %v, want an error containing %q", err, tt.want)
			}
			t.Logf("%v", err)
			if after := readTCState(t, p.A, iface); !after.equal(before) {
				t.Errorf("failed attach left %v, want %v", after, before)
			}
		})
	}
}
