package qdisc

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
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

// bpffsDir returns a new directory on the bpf filesystem at /sys/fs/bpf,
// removed with what is left in it at the end of the test.
func bpffsDir(t testing.TB) string {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/bpf", &st); err != nil || uint32(st.Type) != unix.BPF_FS_MAGIC {
		testutil.Skip(t, "no bpf filesystem at /sys/fs/bpf (mount -t bpf bpf /sys/fs/bpf)")
	}
	dir, err := os.MkdirTemp("/sys/fs/bpf", "ccload-qdisc-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// passProgram loads a tc program that returns TC_ACT_UNSPEC for every
// packet, so the filters after it run too. It is closed at the end of the
// test.
func passProgram(t testing.TB) *ebpf.Program {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "ccload_pass",
		Type:         ebpf.SchedCLS,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()},
		License:      "GPL",
	})
	if err != nil {
		t.Fatalf("load a pass-everything tc program: %v", err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog
}

// detachPinnedIn calls DetachPinned inside h's netns.
func detachPinnedIn(h *testbed.Host, iface string, dir Direction, path string) error {
	return h.Do(func() error { return DetachPinned(iface, dir, path) })
}

// inspectPinnedIn calls InspectPinned inside h's netns.
func inspectPinnedIn(t testing.TB, h *testbed.Host, iface string, dir Direction, path string) (PinnedAttachment, error) {
	t.Helper()
	var res PinnedAttachment
	err := h.Do(func() (err error) {
		res, err = InspectPinned(iface, dir, path)
		return err
	})
	return res, err
}

// TestPinReleaseDetachPinned pins an attachment, lets go of it as a
// process that exits would, checks that the program still runs, and
// removes it with DetachPinned as another process would: only it, and
// nothing else.
func TestPinReleaseDetachPinned(t *testing.T) {
	testutil.RequireRoot(t)
	p := testnet.NewPair(t)
	iface := peerIface(t, p.A)
	e := loadEDT(t)
	if err := e.SetDelay(10 * time.Microsecond); err != nil {
		t.Fatal(err)
	}
	id := testutil.ProgramID(t, e.Program())
	other := passProgram(t)
	otherID := testutil.ProgramID(t, other)
	pins := bpffsDir(t)

	tests := []struct {
		name   string
		method Method
		dir    Direction
		// beside attaches another program with clsact first, which
		// DetachPinned must leave alone, with its clsact qdisc.
		beside bool
	}{
		{"tcx egress", MethodTCX, Egress, false},
		{"tcx ingress", MethodTCX, Ingress, false},
		{"clsact egress", MethodClsact, Egress, false},
		{"clsact ingress", MethodClsact, Ingress, false},
		{"clsact beside another filter", MethodClsact, Egress, true},
		{"tcx beside a clsact filter", MethodTCX, Egress, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.beside {
				attach(t, p.A, iface, other, AttachOptions{Method: MethodClsact, Direction: tt.dir, Priority: 7})
			}
			base := readTCState(t, p.A, iface)
			path := filepath.Join(pins, strings.ReplaceAll(tt.name, " ", "_"))

			a, err := attachIn(p.A, iface, e.Program(), AttachOptions{Method: tt.method, Direction: tt.dir})
			if tt.method == MethodTCX && errors.Is(err, ebpf.ErrNotSupported) {
				testutil.SkipKernelLacks(t, "TCX (Linux 6.6+)")
			}
			if err != nil {
				t.Fatal(err)
			}
			// Whatever happens below, detach: Close while we hold it,
			// DetachPinned once released.
			t.Cleanup(func() {
				if err := a.Close(); err != nil {
					t.Errorf("cleanup: %v", err)
				}
				if err := detachPinnedIn(p.A, iface, tt.dir, path); err != nil && !errors.Is(err, os.ErrNotExist) {
					t.Errorf("cleanup: %v", err)
				}
			})
			if err := a.Pin(path); err != nil {
				t.Fatal(err)
			}
			if err := a.Release(); err != nil {
				t.Fatal(err)
			}
			if err := a.Close(); err != nil {
				t.Errorf("Close after Release: %v", err)
			}

			during := readTCState(t, p.A, iface)
			t.Logf("%s after Release: %v", iface, during)
			switch tt.method {
			case MethodTCX:
				if !slices.Contains(during.TCX, id) {
					t.Errorf("tcx programs %v lack program %d after Release", during.TCX, id)
				}
			case MethodClsact:
				if want := wantFilter(tt.dir, DefaultPriority, id); !slices.Contains(during.Filters, want) {
					t.Errorf("filters %q lack %q after Release", during.Filters, want)
				}
			}
			info, err := inspectPinnedIn(t, p.A, iface, tt.dir, path)
			if err != nil {
				t.Fatal(err)
			}
			if want := (PinnedAttachment{Method: tt.method, Attached: true, ProgramID: id}); info != want {
				t.Errorf("InspectPinned = %+v, want %+v", info, want)
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
			if s1.Packets <= s0.Packets {
				t.Errorf("the released program saw no traffic: stats %+v before, %+v after", s0, s1)
			}

			if err := detachPinnedIn(p.A, iface, tt.dir, path); err != nil {
				t.Fatal(err)
			}
			if after := readTCState(t, p.A, iface); !after.equal(base) {
				t.Errorf("after DetachPinned: %v, want %v", after, base)
			}
			if tt.beside {
				if after := readTCState(t, p.A, iface); !slices.Contains(after.Filters, wantFilter(tt.dir, 7, otherID)) {
					t.Errorf("DetachPinned removed the other program's filter: %v", after)
				}
			}
			if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the pin %s is still there after DetachPinned: %v", path, err)
			}
			if err := detachPinnedIn(p.A, iface, tt.dir, path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("second DetachPinned: %v, want an error wrapping os.ErrNotExist", err)
			}
			if _, err := inspectPinnedIn(t, p.A, iface, tt.dir, path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("InspectPinned after DetachPinned: %v, want an error wrapping os.ErrNotExist", err)
			}
		})
	}
}

// TestDetachPinnedRefuses checks that DetachPinned changes nothing when
// asked to remove something that is not what the pin says.
func TestDetachPinnedRefuses(t *testing.T) {
	testutil.RequireRoot(t)
	p := testnet.NewPair(t)
	iface := peerIface(t, p.A)
	e := loadEDT(t)
	pins := bpffsDir(t)

	for _, m := range []Method{MethodTCX, MethodClsact} {
		t.Run(m.String(), func(t *testing.T) {
			path := filepath.Join(pins, m.String())
			a, err := attachIn(p.A, iface, e.Program(), AttachOptions{Method: m})
			if m == MethodTCX && errors.Is(err, ebpf.ErrNotSupported) {
				testutil.SkipKernelLacks(t, "TCX (Linux 6.6+)")
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := a.Close(); err != nil {
					t.Errorf("cleanup: %v", err)
				}
			})
			if err := a.Pin(path); err != nil {
				t.Fatal(err)
			}
			during := readTCState(t, p.A, iface)

			tests := []struct {
				name  string
				iface string
				dir   Direction
				want  string
			}{
				{"another interface", "lo", Egress, "lo"},
				{"the other direction", iface, Ingress, "ingress"},
				{"no such interface", "nosuch0", Egress, ""},
			}
			for _, tt := range tests {
				if m == MethodClsact && tt.iface == "nosuch0" {
					// A gone interface took its filter along, so for a
					// pinned program DetachPinned removes the pin: right
					// there, but not a refusal to test here.
					continue
				}
				err := detachPinnedIn(p.A, tt.iface, tt.dir, path)
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("DetachPinned on %s: %v, want an error naming %q", tt.name, err, tt.want)
				}
				if now := readTCState(t, p.A, iface); !now.equal(during) {
					t.Errorf("the refused DetachPinned on %s changed %v into %v", tt.name, during, now)
				}
				if _, err := os.Lstat(path); err != nil {
					t.Errorf("the refused DetachPinned on %s removed the pin: %v", tt.name, err)
				}
			}
		})
	}

	// A pin of something that is not a tc attachment.
	t.Run("not an attachment", func(t *testing.T) {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		path := filepath.Join(pins, "map")
		if err := m.Pin(path); err != nil {
			t.Fatal(err)
		}
		if err := detachPinnedIn(p.A, iface, Egress, path); err == nil || !strings.Contains(err.Error(), "neither") {
			t.Errorf("DetachPinned on a pinned map: %v, want a refusal", err)
		}
		if _, err := os.Lstat(path); err != nil {
			t.Errorf("the refused DetachPinned removed the map's pin: %v", err)
		}
	})
}

// TestReleaseRefusesUnpinnedTCX checks that Release does not detach a TCX
// link by accident, and that Close still detaches it afterwards.
func TestReleaseRefusesUnpinnedTCX(t *testing.T) {
	testutil.RequireRoot(t)
	p := testnet.NewPair(t)
	iface := peerIface(t, p.A)
	e := loadEDT(t)
	id := testutil.ProgramID(t, e.Program())
	before := readTCState(t, p.A, iface)

	a, err := attachIn(p.A, iface, e.Program(), AttachOptions{Method: MethodTCX})
	if errors.Is(err, ebpf.ErrNotSupported) {
		testutil.SkipKernelLacks(t, "TCX (Linux 6.6+)")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if err := a.Release(); err == nil || !strings.Contains(err.Error(), "not pinned") {
		t.Fatalf("Release of an unpinned tcx link: %v, want a refusal", err)
	}
	if st := readTCState(t, p.A, iface); !slices.Contains(st.TCX, id) {
		t.Errorf("the refused Release detached the program: %v", st)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if after := readTCState(t, p.A, iface); !after.equal(before) {
		t.Errorf("after Close: %v, want %v", after, before)
	}
}

// TestClosePinnedRemovesPin checks that Close of a pinned attachment
// detaches it and removes its pin.
func TestClosePinnedRemovesPin(t *testing.T) {
	testutil.RequireRoot(t)
	p := testnet.NewPair(t)
	iface := peerIface(t, p.A)
	e := loadEDT(t)
	pins := bpffsDir(t)
	before := readTCState(t, p.A, iface)
	for _, m := range []Method{MethodTCX, MethodClsact} {
		t.Run(m.String(), func(t *testing.T) {
			a, err := attachIn(p.A, iface, e.Program(), AttachOptions{Method: m})
			if m == MethodTCX && errors.Is(err, ebpf.ErrNotSupported) {
				testutil.SkipKernelLacks(t, "TCX (Linux 6.6+)")
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { a.Close() })
			path := filepath.Join(pins, "close-"+m.String())
			if err := a.Pin(path); err != nil {
				t.Fatal(err)
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("Close left the pin %s: %v", path, err)
			}
			if after := readTCState(t, p.A, iface); !after.equal(before) {
				t.Errorf("after Close: %v, want %v", after, before)
			}
		})
	}
}

func TestMethodText(t *testing.T) {
	for _, m := range []Method{MethodAuto, MethodTCX, MethodClsact} {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != `"`+m.String()+`"` {
			t.Errorf("JSON of %s: %s", m, b)
		}
		var back Method
		if err := json.Unmarshal(b, &back); err != nil || back != m {
			t.Errorf("JSON %s reads back as %v, %v", b, back, err)
		}
	}
	var m Method
	if err := json.Unmarshal([]byte(`"tc"`), &m); err == nil {
		t.Error(`"tc" read as a method`)
	}
	if _, err := json.Marshal(Method(9)); err == nil {
		t.Error("Method(9) marshalled")
	}
}
