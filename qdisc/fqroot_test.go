package qdisc

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	tc "github.com/florianl/go-tc"
	"github.com/vishvananda/netlink"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/testbed"
)

// fqRootVeth is the name of the veth fqRootIface creates; its peer is
// fqRootVeth+"p".
const fqRootVeth = "fqr0"

// fqRootIface returns an interface of h with txQueues tx queues: a veth
// pair of its own (both ends in h, up), deleted at the end of the test.
// testbed's veths will not do: like any veth made without numtxqueues,
// they have one tx queue per possible CPU.
func fqRootIface(t *testing.T, h *testbed.Host, txQueues int) string {
	t.Helper()
	err := h.Do(func() error {
		attrs := netlink.NewLinkAttrs() // TxQLen -1: the kernel's default
		attrs.Name, attrs.NumTxQueues, attrs.NumRxQueues = fqRootVeth, txQueues, txQueues
		veth := &netlink.Veth{LinkAttrs: attrs, PeerName: fqRootVeth + "p", PeerTxQLen: -1}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("add veth %s with %d tx queues: %w", fqRootVeth, txQueues, err)
		}
		for _, name := range []string{fqRootVeth, fqRootVeth + "p"} {
			l, err := netlink.LinkByName(name)
			if err != nil {
				return err
			}
			if got := l.Attrs().NumTxQueues; got != txQueues {
				return fmt.Errorf("%s has %d tx queues, want %d", name, got, txQueues)
			}
			if err := netlink.LinkSetUp(l); err != nil {
				return err
			}
		}
		return nil
	})
	// Registered after the pair's teardown, so it runs before it.
	t.Cleanup(func() {
		err := h.Do(func() error {
			l, err := netlink.LinkByName(fqRootVeth)
			if err != nil {
				return nil // never made, or gone
			}
			return netlink.LinkDel(l)
		})
		if err != nil {
			t.Errorf("delete veth %s: %v", fqRootVeth, err)
		}
	})
	if err != nil {
		t.Fatalf("in netns %s: %v", h.Name, err)
	}
	return fqRootVeth
}

// onDev runs fn with iface of h opened as EnsureFQRoot opens it.
func onDev(t *testing.T, h *testbed.Host, iface string, fn func(d *rootDev) error) {
	t.Helper()
	err := h.Do(func() error {
		d, err := openRootDev(iface)
		if err != nil {
			return err
		}
		defer d.close()
		return fn(d)
	})
	if err != nil {
		t.Fatalf("%s in netns %s: %v", iface, h.Name, err)
	}
}

// readRootState reads the root qdisc of iface in h and its children.
func readRootState(t *testing.T, h *testbed.Host, iface string) rootState {
	t.Helper()
	var st rootState
	onDev(t, h, iface, func(d *rootDev) (err error) {
		st, err = d.readRoot()
		return err
	})
	if st.root == nil {
		t.Fatalf("%s in netns %s has no root qdisc", iface, h.Name)
	}
	return st
}

// Somebody else's root qdiscs, as tc(8) would add them.

// addHTBRoot adds `tc qdisc add dev IF root handle 1: htb`.
func addHTBRoot(t *testing.T, h *testbed.Host, iface string) {
	onDev(t, h, iface, func(d *rootDev) error {
		return d.tc.Qdisc().Add(&tc.Object{
			Msg:       d.msg(1<<16, tc.HandleRoot, 0),
			Attribute: tc.Attribute{Kind: "htb", Htb: &tc.Htb{Init: &tc.HtbGlob{Version: 3, Rate2Quantum: 10}}},
		})
	})
}

// addFQRoot adds `tc qdisc add dev IF root handle 1: fq`.
func addFQRoot(t *testing.T, h *testbed.Host, iface string) {
	onDev(t, h, iface, func(d *rootDev) error {
		opts, err := FQConfig{}.options()
		if err != nil {
			return err
		}
		return d.tc.Qdisc().Add(&tc.Object{Msg: d.msg(1<<16, tc.HandleRoot, 0), Attribute: tc.Attribute{Kind: "fq", Fq: opts}})
	})
}

// addMQ adds an mq root qdisc with the given handle, and an fq under each
// of its classes when withFQ is set.
func addMQ(t *testing.T, h *testbed.Host, iface string, handle uint32, withFQ bool) {
	onDev(t, h, iface, func(d *rootDev) error {
		mq := &netlink.GenericQdisc{
			QdiscAttrs: netlink.QdiscAttrs{LinkIndex: int(d.ifindex), Handle: handle, Parent: tc.HandleRoot},
			QdiscType:  "mq",
		}
		if err := d.nl.QdiscAdd(mq); err != nil {
			return fmt.Errorf("add mq %s: %w", handleString(handle), err)
		}
		if !withFQ {
			return nil
		}
		opts, err := FQConfig{}.options()
		if err != nil {
			return err
		}
		for i := 1; i <= d.txQueues; i++ {
			fq := &tc.Object{Msg: d.msg(0, handle|uint32(i), 0), Attribute: tc.Attribute{Kind: "fq", Fq: opts}}
			if err := d.tc.Qdisc().Add(fq); err != nil {
				return fmt.Errorf("add fq under %s: %w", handleString(handle|uint32(i)), err)
			}
		}
		return nil
	})
}

// The calls under test, in h's netns.

func ensureFQRoot(h *testbed.Host, iface string, cfg FQConfig, replace bool) (r FQRoot, err error) {
	err = h.Do(func() error {
		r, err = EnsureFQRoot(iface, cfg, replace)
		return err
	})
	return r, err
}

func inspectFQRoot(t *testing.T, h *testbed.Host, iface string) (r FQRoot, ok bool) {
	t.Helper()
	err := h.Do(func() (err error) {
		r, ok, err = InspectFQRoot(iface)
		return err
	})
	if err != nil {
		t.Fatalf("InspectFQRoot(%s): %v", iface, err)
	}
	return r, ok
}

func removeFQRoot(t *testing.T, h *testbed.Host, iface string) bool {
	t.Helper()
	var removed bool
	err := h.Do(func() (err error) {
		removed, err = RemoveFQRoot(iface)
		return err
	})
	if err != nil {
		t.Fatalf("RemoveFQRoot(%s): %v", iface, err)
	}
	return removed
}

// requireFQ skips the test where the kernel lacks sch_fq (and fails it
// inside a vmtests guest), as the other fq tests do, by ProbeFQ.
func requireFQ(t *testing.T) {
	t.Helper()
	err := ProbeFQ()
	if errors.Is(err, ErrNoFQ) {
		t.Logf("ProbeFQ: %v", err)
		testutil.SkipKernelLacks(t, "sch_fq")
	}
	if err != nil {
		t.Fatal(err)
	}
}

// kernelHasFQ reports whether the kernel lets fq be installed.
func kernelHasFQ(t *testing.T) bool {
	t.Helper()
	p := testnet.NewPair(t)
	err := p.A.Do(func() error {
		q, err := InstallFQ(peerIface(t, p.A), FQConfig{})
		if err != nil {
			return err
		}
		return q.Close()
	})
	if errors.Is(err, ErrNoFQ) {
		return false
	}
	if err != nil {
		t.Fatalf("install fq to see whether the kernel has it: %v", err)
	}
	return true
}

// TestEnsureFQRootWithoutFQ checks, on a kernel without sch_fq (such as
// the project's host kernel), that EnsureFQRoot fails with an error that
// wraps ErrNoFQ and names CONFIG_NET_SCH_FQ, and leaves the root as it
// was: the kernel's default on one and on four tx queues (where mq goes
// in before the kernel refuses the fq under it: ErrNoFQ there shows that
// the mq was added, and an unchanged root that it was removed again), and
// somebody's htb that it was told to replace.
func TestEnsureFQRootWithoutFQ(t *testing.T) {
	testutil.RequireRoot(t)
	if kernelHasFQ(t) {
		t.Skip("this kernel has sch_fq, so EnsureFQRoot cannot meet a kernel without it here; " +
			"the test runs on kernels built without CONFIG_NET_SCH_FQ, such as the project's host kernel")
	}
	cases := []struct {
		name    string
		queues  int
		htb     bool // somebody's htb 1: is the root
		replace bool
	}{
		{name: "default root, 1 queue", queues: 1},
		{name: "default root, 4 queues", queues: 4},
		{name: "htb replaced, 1 queue", queues: 1, htb: true, replace: true},
		{name: "htb replaced, 4 queues", queues: 4, htb: true, replace: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := testnet.NewPair(t)
			iface := fqRootIface(t, p.A, c.queues)
			if c.htb {
				addHTBRoot(t, p.A, iface)
			}
			before := readTCState(t, p.A, iface)
			t.Logf("before: %v", before)

			r, err := ensureFQRoot(p.A, iface, FQConfig{}, c.replace)
			t.Logf("EnsureFQRoot: %v (fix: %s)", err, kernel.FixOf(err))
			if !errors.Is(err, ErrNoFQ) {
				t.Fatalf("EnsureFQRoot = %+v, %v; want an error wrapping ErrNoFQ", r, err)
			}
			if !strings.Contains(err.Error(), "CONFIG_NET_SCH_FQ") {
				t.Errorf("the error %q does not name CONFIG_NET_SCH_FQ", err)
			}
			if !kernel.IsKind(err, kernel.KindKernelTooOld) {
				t.Errorf("the error is not of kind %v", kernel.KindKernelTooOld)
			}
			for _, s := range []string{"modprobe sch_fq", "CONFIG_NET_SCH_FQ=m"} {
				if fix := kernel.FixOf(err); !strings.Contains(fix, s) {
					t.Errorf("the fix %q does not say %q", fix, s)
				}
			}
			if after := readTCState(t, p.A, iface); !after.equal(before) {
				t.Errorf("the failed EnsureFQRoot changed %v into %v", before, after)
			}
			if _, ok := inspectFQRoot(t, p.A, iface); ok {
				t.Error("InspectFQRoot finds fq")
			}
			if removeFQRoot(t, p.A, iface) {
				t.Error("RemoveFQRoot removed a root qdisc")
			}
		})
	}
}

// TestEnsureFQRoot checks what EnsureFQRoot does with each kind of root
// qdisc, on one and on four tx queues: it installs fq (or mq with fq under
// every queue) in place of the kernel's default, with the options given;
// it refuses somebody's htb and leaves it intact, unless told to replace
// it; it uses somebody's fq or mq+fq as they are; and it completes an mq
// of its own that lacks fq. It then checks that InspectFQRoot and a
// second EnsureFQRoot find the same and change nothing, and that
// RemoveFQRoot removes exactly what ccload installed, leaving the kernel's
// default.
func TestEnsureFQRoot(t *testing.T) {
	testutil.RequireRoot(t)
	requireFQ(t)
	const flowLimit = 1234
	cfg := FQConfig{FlowLimit: flowLimit}

	type setupFunc func(t *testing.T, h *testbed.Host, iface string)
	cases := []struct {
		name    string
		queues  int
		setup   setupFunc // somebody's root, or nil for the kernel's default
		replace bool
		// refused: EnsureFQRoot refuses, naming this root qdisc.
		refused string
		// Otherwise the FQRoot it returns, but for Iface and Queues.
		want FQRoot
	}{
		{name: "default root, 1 queue", queues: 1,
			want: FQRoot{Kind: "fq", Owned: true}},
		{name: "default root, 4 queues", queues: 4,
			want: FQRoot{Kind: "mq+fq", Owned: true}},
		{name: "htb refused, 1 queue", queues: 1, setup: addHTBRoot,
			refused: "htb 1:"},
		{name: "htb refused, 4 queues", queues: 4, setup: addHTBRoot,
			refused: "htb 1:"},
		{name: "htb replaced, 1 queue", queues: 1, setup: addHTBRoot, replace: true,
			want: FQRoot{Kind: "fq", Owned: true, Replaced: "htb 1:"}},
		{name: "htb replaced, 4 queues", queues: 4, setup: addHTBRoot, replace: true,
			want: FQRoot{Kind: "mq+fq", Owned: true, Replaced: "htb 1:"}},
		{name: "somebody's fq 1:", queues: 1, setup: addFQRoot,
			want: FQRoot{Kind: "fq"}},
		{name: "somebody's fq 1: with replace", queues: 1, setup: addFQRoot, replace: true,
			want: FQRoot{Kind: "fq"}},
		{name: "somebody's mq 1: with fq, 4 queues", queues: 4,
			setup: func(t *testing.T, h *testbed.Host, iface string) { addMQ(t, h, iface, 1<<16, true) },
			want:  FQRoot{Kind: "mq+fq"}},
		{name: "ccload's mq without fq, 4 queues", queues: 4,
			setup: func(t *testing.T, h *testbed.Host, iface string) { addMQ(t, h, iface, fqHandle, false) },
			want:  FQRoot{Kind: "mq+fq", Owned: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := testnet.NewPair(t)
			iface := fqRootIface(t, p.A, c.queues)
			kernelDefault := readTCState(t, p.A, iface)
			if c.setup != nil {
				c.setup(t, p.A, iface)
			}
			before := readTCState(t, p.A, iface)
			t.Logf("before: %v", before)
			// Only somebody's fq counts as found, and is used as it is.
			existing := c.refused == "" && !c.want.Owned
			if _, ok := inspectFQRoot(t, p.A, iface); ok != existing {
				t.Errorf("InspectFQRoot before: ok = %v, want %v", ok, existing)
			}

			got, err := ensureFQRoot(p.A, iface, cfg, c.replace)
			if c.refused != "" {
				t.Logf("EnsureFQRoot: %v (fix: %s)", err, kernel.FixOf(err))
				if err == nil {
					t.Fatalf("EnsureFQRoot over %s = %+v, want an error", c.refused, got)
				}
				if !kernel.IsKind(err, kernel.KindAlreadyAttached) {
					t.Errorf("the error is not of kind %v", kernel.KindAlreadyAttached)
				}
				if want := fmt.Sprintf("root qdisc %s is installed on %s", c.refused, iface); !strings.Contains(err.Error(), want) {
					t.Errorf("the error %q does not say %q", err, want)
				}
				if fix := kernel.FixOf(err); !strings.Contains(fix, "--replace-qdisc") || !strings.Contains(fix, "tc qdisc del dev "+iface+" root") {
					t.Errorf("the fix %q suggests neither --replace-qdisc nor removing the root qdisc", fix)
				}
				if after := readTCState(t, p.A, iface); !after.equal(before) {
					t.Errorf("the refused EnsureFQRoot changed %v into %v", before, after)
				}
				if removeFQRoot(t, p.A, iface) {
					t.Error("RemoveFQRoot removed somebody's root qdisc")
				}
				if after := readTCState(t, p.A, iface); !after.equal(before) {
					t.Errorf("RemoveFQRoot changed %v into %v", before, after)
				}
				return
			}
			if err != nil {
				t.Fatalf("EnsureFQRoot: %v", err)
			}
			want := c.want
			want.Iface, want.Queues = iface, 1
			if want.Kind == "mq+fq" {
				want.Queues = c.queues
			}
			if got != want {
				t.Errorf("EnsureFQRoot = %+v, want %+v", got, want)
			}
			during := readTCState(t, p.A, iface)
			t.Logf("with fq: %v", during)
			if existing && !during.equal(before) {
				t.Errorf("EnsureFQRoot changed somebody's %v into %v", before, during)
			}
			checkFQTree(t, readRootState(t, p.A, iface), want, existing, flowLimit)

			// Found as it is now, and left alone by a second call.
			found := want
			found.Replaced = ""
			if r, ok := inspectFQRoot(t, p.A, iface); !ok || r != found {
				t.Errorf("InspectFQRoot = %+v, %v; want %+v, true", r, ok, found)
			}
			again, err := ensureFQRoot(p.A, iface, FQConfig{}, false)
			if err != nil || again != found {
				t.Errorf("second EnsureFQRoot = %+v, %v; want %+v", again, err, found)
			}
			if now := readTCState(t, p.A, iface); !now.equal(during) {
				t.Errorf("the second EnsureFQRoot changed %v into %v", during, now)
			}

			if removed := removeFQRoot(t, p.A, iface); removed != want.Owned {
				t.Errorf("RemoveFQRoot removed one: %v, want %v", removed, want.Owned)
			}
			after := readTCState(t, p.A, iface)
			t.Logf("after RemoveFQRoot: %v", after)
			switch {
			case want.Owned && !after.equal(kernelDefault):
				t.Errorf("after RemoveFQRoot: %v, want the kernel's default %v", after, kernelDefault)
			case !want.Owned && !after.equal(during):
				t.Errorf("RemoveFQRoot changed somebody's %v into %v", during, after)
			}
			if removeFQRoot(t, p.A, iface) {
				t.Error("a second RemoveFQRoot removed one")
			}
		})
	}
}

// checkFQTree checks the qdiscs at the root against what EnsureFQRoot
// returned: ccload's handle when it owns them, fq under every class of
// mq, and the FQConfig's flow limit on the fq it installed.
func checkFQTree(t *testing.T, st rootState, want FQRoot, existing bool, flowLimit uint32) {
	t.Helper()
	var fqs []tc.Object
	switch want.Kind {
	case "fq":
		if st.root.Kind != "fq" || len(st.children) != 0 {
			t.Fatalf("root %s with %d children, want fq alone", describeQdisc(st.root), len(st.children))
		}
		fqs = []tc.Object{*st.root}
	case "mq+fq":
		if st.root.Kind != "mq" {
			t.Fatalf("root %s, want mq", describeQdisc(st.root))
		}
		var parents []string
		for _, c := range st.children {
			if c.Kind != "fq" {
				t.Errorf("%s under %s, want fq", describeQdisc(&c), handleString(c.Parent))
			}
			parents = append(parents, handleString(c.Parent))
		}
		slices.Sort(parents)
		var classes []string
		for i := 1; i <= want.Queues; i++ {
			classes = append(classes, handleString(st.root.Handle|uint32(i)))
		}
		if !slices.Equal(parents, classes) {
			t.Errorf("qdiscs under classes %q, want one under each of %q", parents, classes)
		}
		fqs = st.children
	}
	if owned := st.root.Handle == fqHandle; owned != want.Owned {
		t.Errorf("root %s: owned %v, want %v", describeQdisc(st.root), owned, want.Owned)
	}
	if existing {
		return // somebody's fq, with their options
	}
	for _, q := range fqs {
		if q.Fq == nil || q.Fq.FlowPLimit == nil || *q.Fq.FlowPLimit != flowLimit {
			t.Errorf("%s under %s lacks the flow limit %d: %+v", describeQdisc(&q), handleString(q.Parent), flowLimit, q.Fq)
		}
	}
}

// TestFQRootMissingInterface checks the calls on an interface that does
// not exist, or no longer does: EnsureFQRoot and InspectFQRoot fail with
// an error of kind KindBadParam that names it, and RemoveFQRoot removes
// nothing without error. It also checks that RemoveFQRoot leaves the
// kernel's default root alone. It needs no sch_fq.
func TestFQRootMissingInterface(t *testing.T) {
	testutil.RequireRoot(t)
	p := testnet.NewPair(t)
	iface := fqRootIface(t, p.A, 4)
	before := readTCState(t, p.A, iface)
	if removeFQRoot(t, p.A, iface) {
		t.Error("RemoveFQRoot removed the kernel's default root qdisc")
	}
	if after := readTCState(t, p.A, iface); !after.equal(before) {
		t.Errorf("RemoveFQRoot changed %v into %v", before, after)
	}
	if r, ok := inspectFQRoot(t, p.A, iface); ok || r != (FQRoot{Iface: iface}) {
		t.Errorf("InspectFQRoot on the default root = %+v, %v; want only Iface, false", r, ok)
	}

	// Gone: deleted, like a container's veth when the container stops.
	onDev(t, p.A, iface, func(d *rootDev) error {
		l, err := d.nl.LinkByName(iface)
		if err != nil {
			return err
		}
		return d.nl.LinkDel(l)
	})
	for _, name := range []string{iface, "nosuch0"} {
		if removeFQRoot(t, p.A, name) {
			t.Errorf("RemoveFQRoot(%s) removed one", name)
		}
		_, err := ensureFQRoot(p.A, name, FQConfig{}, true)
		if !kernel.IsKind(err, kernel.KindBadParam) || !strings.Contains(err.Error(), name) {
			t.Errorf("EnsureFQRoot(%s): %v, want a %v error naming it", name, err, kernel.KindBadParam)
		}
		err = p.A.Do(func() error {
			_, _, err := InspectFQRoot(name)
			return err
		})
		if !kernel.IsKind(err, kernel.KindBadParam) {
			t.Errorf("InspectFQRoot(%s): %v, want a %v error", name, err, kernel.KindBadParam)
		}
	}
}

// TestFQRootJSON checks FQRoot's JSON form: the field names, and Replaced
// left out when empty.
func TestFQRootJSON(t *testing.T) {
	cases := []struct {
		r    FQRoot
		want string
	}{
		{FQRoot{Iface: "eth0", Kind: "mq+fq", Queues: 4, Owned: true},
			`{"iface":"eth0","kind":"mq+fq","queues":4,"owned":true}`},
		{FQRoot{Iface: "eth0", Kind: "fq", Queues: 1, Owned: true, Replaced: "htb 1:"},
			`{"iface":"eth0","kind":"fq","queues":1,"owned":true,"replaced":"htb 1:"}`},
	}
	for _, c := range cases {
		b, err := json.Marshal(c.r)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != c.want {
			t.Errorf("json.Marshal(%+v) = %s, want %s", c.r, b, c.want)
		}
	}
}
