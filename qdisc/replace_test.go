package qdisc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/testbed"
)

// pinnedLinkID returns the ID of the link pinned at path.
func pinnedLinkID(t testing.TB, path string) link.ID {
	t.Helper()
	lnk, err := link.LoadPinnedLink(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lnk.Close()
	info, err := lnk.Info()
	if err != nil {
		t.Fatal(err)
	}
	return info.ID
}

// pinReleased attaches prog to side dir of iface in h's netns, pins it at
// path and lets go of it, as a ccload that exits does; it is detached at
// the end of the test.
func pinReleased(t *testing.T, h *testbed.Host, iface string, prog *ebpf.Program, m Method, dir Direction, path string) {
	t.Helper()
	a, err := attachIn(h, iface, prog, AttachOptions{Method: m, Direction: dir})
	if m == MethodTCX && errors.Is(err, ebpf.ErrNotSupported) {
		testutil.SkipKernelLacks(t, "TCX (Linux 6.6+)")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.Close()
		if err := detachPinnedIn(h, iface, dir, path); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cleanup: %v", err)
		}
	})
	if err := a.Pin(path); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(); err != nil {
		t.Fatal(err)
	}
}

// TestReplacePinned swaps one EDT program for another in a pinned
// attachment of each method, and checks that the attachment is the same
// one (the TCX link, the filter's priority and handle), that it runs the
// new program and that traffic goes through it, and that DetachPinned
// then removes it whole.
func TestReplacePinned(t *testing.T) {
	testutil.RequireRoot(t)
	p := testnet.NewPair(t)
	iface := peerIface(t, p.A)
	pins := bpffsDir(t)
	base := readTCState(t, p.A, iface)

	for _, m := range []Method{MethodTCX, MethodClsact} {
		for _, dir := range Sides() {
			t.Run(m.String()+" "+dir.String(), func(t *testing.T) {
				oldE, newE := loadEDT(t), loadEDT(t)
				if err := newE.SetDelay(time.Microsecond); err != nil { // it counts packets it delays
					t.Fatal(err)
				}
				oldID, newID := testutil.ProgramID(t, oldE.Program()), testutil.ProgramID(t, newE.Program())
				path := filepath.Join(pins, m.String()+"_"+dir.String())
				pinReleased(t, p.A, iface, oldE.Program(), m, dir, path)
				var linkID link.ID
				if m == MethodTCX {
					linkID = pinnedLinkID(t, path)
				}

				if err := p.A.Do(func() error { return ReplacePinned(iface, dir, path, newE.Program()) }); err != nil {
					t.Fatal(err)
				}
				info, err := inspectPinnedIn(t, p.A, iface, dir, path)
				if err != nil {
					t.Fatal(err)
				}
				if want := (PinnedAttachment{Method: m, Attached: true, ProgramID: newID}); info != want {
					t.Errorf("InspectPinned after the swap = %+v, want %+v", info, want)
				}
				st := readTCState(t, p.A, iface)
				switch m {
				case MethodTCX:
					if got := pinnedLinkID(t, path); got != linkID {
						t.Errorf("the pinned link is %d after the swap, was %d: want the same link", got, linkID)
					}
					if slices.Contains(st.TCX, oldID) || !slices.Contains(st.TCX, newID) {
						t.Errorf("tcx programs %v after the swap: want %d, not %d", st.TCX, newID, oldID)
					}
				case MethodClsact:
					if want := wantFilter(dir, DefaultPriority, newID); !slices.Contains(st.Filters, want) || len(st.Filters) != len(base.Filters)+2 {
						t.Errorf("filters after the swap %q, want %q in place of the old program's", st.Filters, want)
					}
				}
				if _, err := os.Lstat(ReplacingPin(path)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the swap left %s: %v", ReplacingPin(path), err)
				}

				s0, err := newE.Stats()
				if err != nil {
					t.Fatal(err)
				}
				measureRTT(t, p.A, p.B, 5, 30*time.Second)
				if s1, err := newE.Stats(); err != nil || s1.Packets <= s0.Packets {
					t.Errorf("the new program saw no traffic: %+v, then %+v, %v", s0, s1, err)
				}

				if err := detachPinnedIn(p.A, iface, dir, path); err != nil {
					t.Fatal(err)
				}
				if after := readTCState(t, p.A, iface); !after.equal(base) {
					t.Errorf("after DetachPinned: %v, want %v", after, base)
				}
			})
		}
	}
}

// TestReplacePinnedRefuses checks that ReplacePinned changes nothing when
// the pin is not what the call says.
func TestReplacePinnedRefuses(t *testing.T) {
	testutil.RequireRoot(t)
	p := testnet.NewPair(t)
	iface := peerIface(t, p.A)
	pins := bpffsDir(t)
	for _, m := range []Method{MethodTCX, MethodClsact} {
		t.Run(m.String(), func(t *testing.T) {
			oldE, newE := loadEDT(t), loadEDT(t)
			path := filepath.Join(pins, "refuse_"+m.String())
			pinReleased(t, p.A, iface, oldE.Program(), m, Egress, path)
			during := readTCState(t, p.A, iface)
			for _, tt := range []struct {
				name  string
				iface string
				dir   Direction
				path  string
			}{
				{"another interface", "lo", Egress, path},
				{"the other direction", iface, Ingress, path},
				{"no pin", iface, Egress, filepath.Join(pins, "nosuch")},
			} {
				err := p.A.Do(func() error { return ReplacePinned(tt.iface, tt.dir, tt.path, newE.Program()) })
				if err == nil {
					t.Errorf("ReplacePinned on %s succeeded", tt.name)
				}
				if now := readTCState(t, p.A, iface); !now.equal(during) {
					t.Errorf("the refused ReplacePinned on %s changed %v into %v", tt.name, during, now)
				}
			}
			if err := p.A.Do(func() error { return ReplacePinned(iface, Egress, path, nil) }); err == nil || !strings.Contains(err.Error(), "not a tc") {
				t.Errorf("ReplacePinned with no program: %v", err)
			}
		})
	}
}

// TestRecoverReplace lays out what a clsact swap killed after pinning the
// new program leaves, before and after its filter swap, and checks that
// RecoverReplace undoes the first and finishes the second.
func TestRecoverReplace(t *testing.T) {
	testutil.RequireRoot(t)
	p := testnet.NewPair(t)
	iface := peerIface(t, p.A)
	pins := bpffsDir(t)
	for _, swapped := range []bool{false, true} {
		name := map[bool]string{false: "killed before the swap", true: "killed after the swap"}[swapped]
		t.Run(name, func(t *testing.T) {
			oldE, newE := loadEDT(t), loadEDT(t)
			oldID, newID := testutil.ProgramID(t, oldE.Program()), testutil.ProgramID(t, newE.Program())
			path := filepath.Join(pins, strings.ReplaceAll(name, " ", "_"))
			pinReleased(t, p.A, iface, oldE.Program(), MethodClsact, Egress, path)

			own, err := newE.Program().Clone()
			if err != nil {
				t.Fatal(err)
			}
			defer own.Close()
			if err := own.Pin(ReplacingPin(path)); err != nil {
				t.Fatal(err)
			}
			if swapped {
				err := p.A.Do(func() error {
					d, err := openNetdev(iface)
					if err != nil {
						return err
					}
					defer d.close()
					fs, err := d.filtersOf(Egress, oldID)
					if err != nil || len(fs) != 1 {
						return fmt.Errorf("filters of the old program: %v, %w", fs, err)
					}
					return d.replaceFilterProgram(Egress, fs[0], newE.Program())
				})
				if err != nil {
					t.Fatal(err)
				}
			}

			var did bool
			if err := p.A.Do(func() (err error) { did, err = RecoverReplace(iface, Egress, path); return err }); err != nil || !did {
				t.Fatalf("RecoverReplace = %v, %v", did, err)
			}
			want := oldID
			if swapped {
				want = newID
			}
			info, err := inspectPinnedIn(t, p.A, iface, Egress, path)
			if err != nil || !info.Attached || info.ProgramID != want {
				t.Errorf("after RecoverReplace the pin holds %+v, %v; want program %d attached", info, err, want)
			}
			if _, err := os.Lstat(ReplacingPin(path)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("RecoverReplace left %s: %v", ReplacingPin(path), err)
			}
			if err := p.A.Do(func() (err error) { did, err = RecoverReplace(iface, Egress, path); return err }); err != nil || did {
				t.Errorf("a second RecoverReplace = %v, %v; want nothing to do", did, err)
			}
		})
	}
}
