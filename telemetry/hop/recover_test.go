package hop

// Recovery after a killed command: the stage of an attach that died
// (CleanStage, run by pin.CleanStale), and hop directories that a killed
// --off left (Pins.Recover), each cleaned from another network namespace
// than the hop's, with each attach method. The e2e crash tests kill the
// CLI for real; these tests lay out what it leaves, for clsact too.

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	tc "github.com/florianl/go-tc"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/pin"
	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/qdisc"
)

func TestRecover(t *testing.T) {
	testutil.RequireRoot(t)
	for _, method := range []qdisc.Method{qdisc.MethodAuto, qdisc.MethodClsact} {
		t.Run(method.String(), func(t *testing.T) {
			host := testutil.Host(t)
			l := NewPins(host)
			p := testnet.NewPair(t)
			iface, err := p.A.Interface()
			if err != nil {
				t.Fatal(err)
			}
			before := readTCEgress(t, p.A, iface)
			cfg := Config{Iface: iface, RateBps: 1_000_000_000, BufferBytes: 1 << 20, Method: method}

			// The stage of an attach killed once its programs ran:
			// attached, pinned in the stage, nothing holding them but
			// the pins (and, for clsact, the filter itself).
			var stage string
			err = p.A.Do(func() error {
				ns, err := pin.CurrentNetns()
				if err != nil {
					return err
				}
				ifi, err := qdisc.LookupInterface(iface)
				if err != nil {
					return err
				}
				key := pin.IfaceKey{Name: iface, Index: ifi.Index, Netns: ns}
				stage = filepath.Join(host.PinRoot(), "staging-"+stageLabelPrefix+key.String()+"-0123456789abcdef")
				if err := os.MkdirAll(stage, 0o700); err != nil {
					return err
				}
				objs, err := load(cfg)
				if err != nil {
					return err
				}
				defer objs.Close()
				atts, err := attach(objs, cfg, stage)
				for _, a := range atts {
					if rerr := a.Release(); rerr != nil {
						t.Error(rerr)
					}
				}
				return err
			})
			if err != nil {
				t.Fatalf("stage an INT hop: %v", err)
			}
			if now := readTCEgress(t, p.A, iface); now.equal(before) {
				t.Fatalf("the staged hop is not attached: %+v", now)
			}
			removed, err := pin.CleanStale(host.PinRoot(), CleanStage)
			if err != nil || !slices.Equal(removed, []string{stage}) {
				t.Errorf("CleanStale = %v, %v; want %s removed", removed, err, stage)
			}
			if now := readTCEgress(t, p.A, iface); !now.equal(before) {
				t.Errorf("after CleanStale the egress of %s is %+v, want %+v as before", iface, now, before)
			}

			// A complete, attached hop stays.
			st, err := attachHopIn(t, l, p.A, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if removed, err := l.Recover(); err != nil || len(removed) != 0 {
				t.Errorf("Recover with a working hop = %v, %v; want nothing removed", removed, err)
			}
			if hops := hopsIn(t, l, p.A); len(hops) != 1 || !hops[0].Attached {
				t.Fatalf("after Recover: %+v, want the hop attached", hops)
			}

			// --off killed half-way: a pin gone, the program still
			// attached.
			if err := os.Remove(filepath.Join(st.PinDir, intHopMapHopStats)); err != nil {
				t.Fatal(err)
			}
			if removed, err := l.Recover(); err != nil || !slices.Equal(removed, []string{st.PinDir}) {
				t.Errorf("Recover with an incomplete hop = %v, %v; want %s removed", removed, err, st.PinDir)
			}
			if now := readTCEgress(t, p.A, iface); !now.equal(before) {
				t.Errorf("after Recover the egress of %s is %+v, want %+v as before", iface, now, before)
			}

			// Every pin there, and the program detached by other
			// means (clsact: --off killed between the filter's
			// deletion and the unpinning).
			if method != qdisc.MethodClsact {
				return
			}
			st, err = attachHopIn(t, l, p.A, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.A.Do(func() error { return deleteClsact(iface) }); err != nil {
				t.Fatal(err)
			}
			if removed, err := l.Recover(); err != nil || !slices.Equal(removed, []string{st.PinDir}) {
				t.Errorf("Recover with a detached hop = %v, %v; want %s removed", removed, err, st.PinDir)
			}
			if hops := hopsIn(t, l, p.A); len(hops) != 0 {
				t.Errorf("after Recover: %+v, want no hop", hops)
			}
		})
	}
}

// deleteClsact deletes the clsact qdisc of iface, and its filters with
// it, in the calling thread's netns.
func deleteClsact(iface string) error {
	ifi, err := qdisc.LookupInterface(iface)
	if err != nil {
		return err
	}
	nl, err := tc.Open(&tc.Config{})
	if err != nil {
		return err
	}
	defer nl.Close()
	return nl.Qdisc().Delete(&tc.Object{
		Msg:       tc.Msg{Family: unix.AF_UNSPEC, Ifindex: uint32(ifi.Index), Handle: 0xffff0000, Parent: 0xfffffff1},
		Attribute: tc.Attribute{Kind: "clsact"},
	})
}
