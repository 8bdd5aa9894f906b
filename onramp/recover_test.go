package onramp

// Recovery and in-place upgrades on this host, which has no sch_fq: the
// tests build an interface's pin set with attachPrograms, the part of
// Enable after the fq root, on a veth of a netns pair of their own. The
// whole of Enable and Disable, killed at each step, is e2e's
// TestKillOnRamp, in the vmtests guests.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/qdisc"
	"github.com/ccload/ccload/testbed"
)

// testRig is an OnRamp on a pin root of the test's own, and the
// interface of a netns it acts on.
type testRig struct {
	t     *testing.T
	o     *OnRamp
	host  kernel.Host
	h     *testbed.Host
	iface string
	key   pin.IfaceKey
}

// newTestRig makes a pin root and a netns pair for t; name tells the pin
// roots of subtests apart.
func newTestRig(t *testing.T, name string) *testRig {
	t.Helper()
	testutil.RequireRoot(t)
	host := kernel.DefaultHost()
	host.PinDir = fmt.Sprintf("ccload-test-%d-%s", os.Getpid(), name)
	t.Cleanup(func() { os.RemoveAll(host.PinRoot()) })
	r := &testRig{t: t, o: New(host), host: host, h: testnet.NewPair(t).A}
	err := r.h.Do(func() error {
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		for _, ifi := range ifs {
			if ifi.Name != "lo" {
				r.iface = ifi.Name
			}
		}
		r.key, err = lookup(r.iface)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// do runs f in the rig's netns, failing the test on an error.
func (r *testRig) do(f func() error) {
	r.t.Helper()
	if err := r.h.Do(f); err != nil {
		r.t.Fatal(err)
	}
}

// testConfig is the configuration the tests enable.
func testConfig(iface string, method qdisc.Method) Config {
	cfg, err := Config{Iface: iface, Peers: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}, Method: method}.check()
	if err != nil {
		panic(err)
	}
	return cfg
}

// enable does Enable's work but the fq root, with method.
func (r *testRig) enable(o *OnRamp, method qdisc.Method) {
	r.t.Helper()
	r.do(func() error {
		_, err := o.attachPrograms(r.key, testConfig(r.iface, method))
		return err
	})
	r.t.Cleanup(func() {
		_ = r.h.Do(func() error {
			_, err := r.o.Disable(r.iface)
			return err
		})
	})
}

// programs returns the IDs of the programs On-Ramp runs: both sides' on
// the rig's interface and the sockops program, by name.
func (r *testRig) programs() map[string]ebpf.ProgramID {
	r.t.Helper()
	ids := map[string]ebpf.ProgramID{}
	r.do(func() error {
		for _, side := range qdisc.Sides() {
			info, err := qdisc.InspectPinned(r.iface, side, qdisc.SidePin(r.o.dir(r.key), side))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return err
			}
			ids[side.String()] = info.ProgramID
		}
		return nil
	})
	if lnk, err := link.LoadPinnedLink(filepath.Join(r.o.sockopsDir(), pinLink), nil); err == nil {
		if info, err := lnk.Info(); err == nil {
			ids["sockops"] = info.Program
		}
		lnk.Close()
	}
	return ids
}

// waitFreed waits, bounded, until the kernel has freed every program of
// ids, and fails the test if one is left: it frees a program a moment
// after its last reference goes.
func waitFreed(t *testing.T, ids map[string]ebpf.ProgramID) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for what, id := range ids {
		for {
			p, err := ebpf.NewProgramFromID(id)
			if err != nil {
				break
			}
			p.Close()
			if time.Now().After(deadline) {
				t.Errorf("On-Ramp's %s program %d still runs", what, id)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// recoverAll runs what package recovery runs of On-Ramp: the stages of
// dead processes, then Recover.
func (r *testRig) recoverAll() []string {
	r.t.Helper()
	stages, err := pin.CleanStale(r.host.PinRoot(), r.o.CleanStage)
	if err != nil {
		r.t.Fatalf("clean the stages: %v", err)
	}
	done, err := r.o.Recover()
	if err != nil {
		r.t.Fatalf("Recover: %v", err)
	}
	return append(stages, done...)
}

// TestRecover leaves what a command killed at some step would leave,
// runs the recovery, and checks that On-Ramp is then whole or gone.
func TestRecover(t *testing.T) {
	cases := []struct {
		name string
		// leave makes the state a dead command left.
		leave func(r *testRig)
		// kept says that On-Ramp must still run on the interface;
		// otherwise nothing of it may be left.
		kept bool
		// did is a part of what Recover must report ("" for nothing).
		did string
	}{
		{name: "committed", leave: func(r *testRig) { r.enable(r.o, qdisc.MethodAuto) }, kept: true},
		{name: "committed-clsact", leave: func(r *testRig) { r.enable(r.o, qdisc.MethodClsact) }, kept: true},
		{name: "detached", did: "removed the incomplete On-Ramp pins", leave: func(r *testRig) {
			r.enable(r.o, qdisc.MethodClsact)
			r.do(func() error { return qdisc.DetachPinnedSides(r.iface, r.o.dir(r.key)) })
		}},
		{name: "map-missing", did: "removed the incomplete On-Ramp pins", leave: func(r *testRig) {
			r.enable(r.o, qdisc.MethodAuto)
			if err := os.Remove(filepath.Join(r.o.dir(r.key), onrampMapOnrampTrace)); err != nil {
				r.t.Fatal(err)
			}
		}},
		{name: "side-missing", did: "removed the incomplete On-Ramp pins", leave: func(r *testRig) {
			r.enable(r.o, qdisc.MethodClsact)
			r.do(func() error {
				return qdisc.DetachPinned(r.iface, qdisc.Ingress, qdisc.SidePin(r.o.dir(r.key), qdisc.Ingress))
			})
		}},
		{name: "holder-alone", did: "detached On-Ramp's sockops program", leave: func(r *testRig) {
			if err := r.o.writeHolder(r.key.String(), testConfig(r.iface, 0).Peers); err != nil {
				r.t.Fatal(err)
			}
			if err := r.o.attachSockops(""); err != nil {
				r.t.Fatal(err)
			}
		}},
		{name: "sockops-alone", did: "detached On-Ramp's sockops program", leave: func(r *testRig) {
			if err := r.o.attachSockops(""); err != nil {
				r.t.Fatal(err)
			}
		}},
		{name: "sockops-incomplete", kept: true, did: "attached On-Ramp's sockops program again", leave: func(r *testRig) {
			r.enable(r.o, qdisc.MethodAuto)
			if err := os.Remove(filepath.Join(r.o.sockopsDir(), pinSockStats)); err != nil {
				r.t.Fatal(err)
			}
		}},
		{name: "fq-record-alone", leave: func(r *testRig) {
			if err := r.o.recordFQ(r.key); err != nil {
				r.t.Fatal(err)
			}
		}},
		{name: "stage-clsact-unpinned", did: "staging-" + stageLabelPrefix, leave: func(r *testRig) {
			// Killed between attaching by clsact and pinning: a filter
			// that no pin holds, in a stage whose owner is dead.
			var objs onrampObjects
			if err := loadOnrampObjects(&objs, nil); err != nil {
				r.t.Fatal(err)
			}
			defer objs.Close()
			r.do(func() error {
				for _, side := range qdisc.Sides() {
					a, err := qdisc.Attach(r.iface, objs.program(side), qdisc.AttachOptions{Direction: side, Method: qdisc.MethodClsact, Priority: Priority})
					if err != nil {
						return err
					}
					if err := a.Release(); err != nil {
						return err
					}
				}
				return nil
			})
			dead := filepath.Join(r.host.PinRoot(), "staging-"+stageLabelPrefix+r.key.String()+"-0123456789abcdef")
			if err := os.MkdirAll(dead, 0o700); err != nil {
				r.t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newTestRig(t, c.name)
			c.leave(r)
			before := r.programs()
			done := r.recoverAll()
			t.Logf("recovery: %s", strings.Join(done, "; "))
			if c.did != "" && !strings.Contains(strings.Join(done, "\n"), c.did) {
				t.Errorf("the recovery did not say %q", c.did)
			}
			if again := r.recoverAll(); len(again) > 0 {
				t.Errorf("a second recovery found more to do: %v", again)
			}
			if c.kept {
				r.checkWhole()
				return
			}
			r.checkGone()
			waitFreed(t, before)
		})
	}
}

// checkWhole checks that On-Ramp runs, complete, on the rig's interface.
func (r *testRig) checkWhole() {
	r.t.Helper()
	var sts []Status
	r.do(func() (err error) { sts, err = r.o.Status(); return err })
	if len(sts) != 1 || !sts[0].Attached || sts[0].UpgradeAvailable {
		r.t.Fatalf("want On-Ramp attached on %s, of this build: %+v", r.iface, sts)
	}
	if !r.o.complete(r.key) || !r.o.sockopsComplete() {
		r.t.Errorf("On-Ramp's pins are incomplete: instance %v, sockops %v", r.o.complete(r.key), r.o.sockopsComplete())
	}
	if hs, _ := os.ReadDir(r.o.holdersDir()); len(hs) != 1 || hs[0].Name() != r.key.String() {
		r.t.Errorf("the holders are %v, want %s", hs, r.key)
	}
	if len(sts[0].Peers) != 1 || sts[0].Peers[0] != "198.18.0.0/15" {
		r.t.Errorf("the sockops program's prefixes are %v", sts[0].Peers)
	}
}

// checkGone checks that nothing of On-Ramp is left: no pins, no filter at
// its priority.
func (r *testRig) checkGone() {
	r.t.Helper()
	if left, err := os.ReadDir(r.o.root()); err == nil {
		var names []string
		for _, e := range left {
			names = append(names, e.Name())
		}
		r.t.Errorf("%s is left with %v", r.o.root(), names)
	}
	if left, _ := os.ReadDir(r.host.PinRoot()); len(left) > 0 {
		for _, e := range left {
			if strings.HasPrefix(e.Name(), "staging-") {
				r.t.Errorf("stage %s is left", e.Name())
			}
		}
	}
	r.do(func() error {
		for _, side := range qdisc.Sides() {
			for _, name := range []string{onrampProgOnrampEgress, onrampProgOnrampIngress} {
				if stray, err := qdisc.RemoveStaleFilter(r.iface, side, Priority, name); err != nil || stray {
					r.t.Errorf("a %s filter was left on %s %s (%v)", name, r.iface, side, err)
				}
			}
		}
		return nil
	})
}

// TestUpgradeInPlace swaps another build (salt 7) in for On-Ramp's
// programs, with TCX and with clsact: the programs change, the links and
// filters stay, the new programs run on the pinned maps and the sockets'
// storage, each build sees the other's pins as an upgrade, and a swap cut
// short (one side swapped, the record not) is finished by the next.
func TestUpgradeInPlace(t *testing.T) {
	for _, method := range []qdisc.Method{qdisc.MethodAuto, qdisc.MethodClsact} {
		t.Run(method.String(), func(t *testing.T) {
			r := newTestRig(t, "upgrade-"+method.String())
			r.enable(r.o, method)
			newer := New(r.host, WithBuildSalt(7))
			dir := r.o.dir(r.key)
			sideLinks := func() map[string]link.ID {
				ids := map[string]link.ID{}
				for _, side := range qdisc.Sides() {
					if lnk, err := link.LoadPinnedLink(qdisc.SidePin(dir, side), nil); err == nil {
						if info, err := lnk.Info(); err == nil {
							ids[side.String()] = info.ID
						}
						lnk.Close()
					}
				}
				if id, err := linkID(filepath.Join(r.o.sockopsDir(), pinLink)); err == nil {
					ids["sockops"] = id
				}
				return ids
			}
			if r.o.upgradeAvailable(r.key) || !newer.upgradeAvailable(r.key) {
				t.Fatalf("before: upgrade available to the build that enabled it: %v, to the newer one: %v",
					r.o.upgradeAvailable(r.key), newer.upgradeAvailable(r.key))
			}
			progs, links := r.programs(), sideLinks()
			sk := mapOf(t, progs["sockops"], onrampSockopsMapOnrampSk)
			flows := mapOf(t, progs["egress"], onrampMapOnrampFlows)

			// A swap cut short: the egress side swapped, nothing else.
			r.do(func() error {
				objs, err := newer.loadOnPinned(dir)
				if err != nil {
					return err
				}
				defer objs.Close()
				return qdisc.ReplacePinned(r.iface, qdisc.Egress, qdisc.SidePin(dir, qdisc.Egress), objs.OnrampEgress)
			})

			var notes []string
			r.do(func() error {
				reattach, more, err := newer.upgradeTC(r.key)
				if reattach {
					return errors.New("the upgrade found the maps incompatible")
				}
				notes = append(notes, more...)
				more, err2 := newer.acquireSockops(r.key.String(), testConfig(r.iface, method).Peers, "")
				notes = append(notes, more...)
				return errors.Join(err, err2)
			})
			t.Logf("notes: %s", strings.Join(notes, "; "))
			after, linksAfter := r.programs(), sideLinks()
			for what, id := range progs {
				if after[what] == id || after[what] == 0 {
					t.Errorf("%s: program %d before the upgrade, %d after", what, id, after[what])
				}
			}
			for what, id := range links {
				if linksAfter[what] != id {
					t.Errorf("%s: link %d before the upgrade, %d after", what, id, linksAfter[what])
				}
			}
			if method == qdisc.MethodClsact && len(links) != 1 {
				t.Errorf("with clsact only the sockops program has a link: %v", links)
			}
			if got := mapOf(t, after["sockops"], onrampSockopsMapOnrampSk); got != sk {
				t.Errorf("the new sockops program uses socket storage %d, the old one %d", got, sk)
			}
			if got := mapOf(t, after["egress"], onrampMapOnrampFlows); got != flows {
				t.Errorf("the new egress program uses flow table %d, the old one %d", got, flows)
			}
			if !r.o.upgradeAvailable(r.key) || newer.upgradeAvailable(r.key) {
				t.Errorf("after: upgrade available to the old build: %v, to the newer one: %v",
					r.o.upgradeAvailable(r.key), newer.upgradeAvailable(r.key))
			}
			var sts []Status
			r.do(func() (err error) { sts, err = newer.Status(); return err })
			if len(sts) != 1 || !sts[0].Attached {
				t.Errorf("after the upgrade: %+v", sts)
			}
			if done := r.recoverAll(); len(done) > 0 {
				t.Errorf("the recovery found something to do after the upgrade: %v", done)
			}
		})
	}
}

// linkID returns the ID of the link pinned at path.
func linkID(path string) (link.ID, error) {
	lnk, err := link.LoadPinnedLink(path, nil)
	if err != nil {
		return 0, err
	}
	defer lnk.Close()
	info, err := lnk.Info()
	if err != nil {
		return 0, err
	}
	return info.ID, nil
}

// mapOf returns the ID of the map called name that program id uses.
func mapOf(t *testing.T, id ebpf.ProgramID, name string) ebpf.MapID {
	t.Helper()
	m, err := programMap(id, name)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	info, err := m.Info()
	if err != nil {
		t.Fatal(err)
	}
	mid, _ := info.ID()
	return mid
}

// TestEnableRefusesLayer3Device: On-Ramp asked for a device without an
// Ethernet header (tun here; WireGuard, ipip and GRE alike) is refused
// before it touches the qdisc or pins anything.
func TestEnableRefusesLayer3Device(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/dev/net/tun", "the tun driver (CONFIG_TUN), for a layer-3 device")
	o := New(testutil.Host(t))
	testutil.InNewNetns(t, func() {
		tun, err := testutil.OpenTun("ccl-l3")
		if err != nil {
			t.Error(err)
			return
		}
		defer tun.Close()
		_, err = o.Enable(Config{Iface: "ccl-l3", Peers: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}})
		if !kernel.IsKind(err, kernel.KindBadParam) || !strings.Contains(err.Error(), "layer-3 device") {
			t.Errorf("enable on a tun device: %v, want a bad parameter that names the layer-3 device", err)
		}
	})
	st, err := o.Status()
	if err != nil || len(st) != 0 {
		t.Errorf("after the refusal: status %+v, %v; want nothing enabled", st, err)
	}
}
