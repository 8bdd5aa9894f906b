package onramp

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/clocksync"
	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/percpu"
	"github.com/ccload/ccload/internal/pin"
	"github.com/ccload/ccload/internal/sharedmaps"
	"github.com/ccload/ccload/qdisc"
)

// onrampDir is On-Ramp's directory below the pin root.
const onrampDir = "onramp"

// stageLabelPrefix starts the label of On-Ramp's stages: an interface's
// is stageLabelPrefix+<interface key>, the sockops program's
// stageLabelPrefix+"sockops".
const stageLabelPrefix = "onramp-"

// markFQInstalled, an empty directory among an interface's pins, said in
// pin sets made before the fq records (fqroot.go) that Enable installed
// the fq root qdisc. remove still honours it.
const markFQInstalled = "fq_installed"

// pinObject is the record of the object a pin set was built from
// (pin.WriteObject), in an interface's directory and in the sockops
// program's.
const pinObject = "object"

// Priority is the tc filter priority of On-Ramp's programs with clsact,
// apart from the INT hop's (qdisc.DefaultPriority) and the clock agent's
// scrub on the same interface.
const Priority = qdisc.DefaultPriority + 1

// OnRamp enables, reports and disables On-Ramp on the interfaces of a
// host. Like the loader it keeps no state of its own: everything is in the
// kernel and in bpffs pins.
type OnRamp struct {
	host   kernel.Host
	salt   uint32            // see WithBuildSalt
	shared *sharedmaps.Store // the holds map it shares with θ-PowerTCP, and its room map
}

// holdsHolder is On-Ramp's name among the holders of the shared maps
// (internal/sharedmaps): one hold for all its interfaces, taken by each
// attach and upgrade, and given back when On-Ramp's directory goes, so
// that recovery can tell it alive by that directory (<pin root>/onramp).
const holdsHolder = onrampDir

// A NewOption configures the OnRamp that New returns.
type NewOption func(*OnRamp)

// WithBuildSalt makes the OnRamp take its embedded objects for another
// build than the one shipped (pin.ObjectOf with salt): pins that a
// plain OnRamp made are then another object's, and Enable upgrades them
// in place. It is for tests of the upgrade; salt 0 is the plain build.
func WithBuildSalt(salt uint32) NewOption { return func(o *OnRamp) { o.salt = salt } }

// WithSharedMaps makes the OnRamp share its holds map through s instead
// of the shared maps of its own pin root: the bench, whose On-Ramp pins
// live apart from the CCs' pin root, passes the CCs' so that θ-PowerTCP
// reads the holds this On-Ramp writes.
func WithSharedMaps(s *sharedmaps.Store) NewOption { return func(o *OnRamp) { o.shared = s } }

// New returns an OnRamp acting on host.
func New(host kernel.Host, opts ...NewOption) *OnRamp {
	o := &OnRamp{host: host, shared: sharedmaps.New(host)}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

func (o *OnRamp) root() string { return filepath.Join(o.host.PinRoot(), onrampDir) }

func (o *OnRamp) dir(k pin.IfaceKey) string { return filepath.Join(o.root(), k.String()) }

// instances returns the keys of On-Ramp's interfaces in network namespace
// ns: all of them (ifindex < 0), the one with index ifindex, and those
// left from a deleted interface that was called iface.
func (o *OnRamp) instances(iface string, ifindex int, ns uint64) ([]pin.IfaceKey, error) {
	keys, err := pin.FindIfaceDirs(o.root(), iface, ifindex, ns)
	if err != nil {
		return nil, fmt.Errorf("list On-Ramp's interfaces: %w", err)
	}
	return keys, nil
}

// attached reports whether both programs of instance k still run.
func (o *OnRamp) attached(k pin.IfaceKey) bool {
	return qdisc.InspectPinnedSides(pin.IfaceNow(k), o.dir(k)).Attached
}

// lookup finds iface in the calling thread's network namespace.
func lookup(iface string) (pin.IfaceKey, error) {
	ifi, err := qdisc.LookupInterface(iface)
	if err != nil {
		return pin.IfaceKey{}, err
	}
	if ifi == nil {
		return pin.IfaceKey{}, kernel.NewError(kernel.KindBadParam,
			"check the name with `ip link`; ccload works in the network namespace it runs in (nsenter --net=/run/netns/NS ccload ... for another)",
			nil, "no interface %q in this network namespace", iface)
	}
	ns, err := pin.CurrentNetns()
	if err != nil {
		return pin.IfaceKey{}, err
	}
	return pin.IfaceKey{Name: ifi.Name, Index: ifi.Index, Netns: ns}, nil
}

// Enable turns On-Ramp on for cfg.Iface: it makes sure the interface's
// root qdisc is fq (installing it, or refusing a foreign root without
// cfg.ReplaceQdisc), attaches the tc programs to both sides of the
// interface and the sockops program to the cgroup, and pins everything,
// so that it runs after this process exits, until Disable. Enabling an
// interface that has On-Ramp already updates its parameters and
// prefixes in place, installs the fq root again if somebody removed it,
// and, when its programs are another build's (Status.UpgradeAvailable),
// swaps this build's in without detaching anything (upgrade.go). Any
// failure leaves nothing behind: no pins, no programs, and the root qdisc
// as it was. A process killed on the way leaves what Recover undoes.
func (o *OnRamp) Enable(cfg Config) (_ *Status, err error) {
	if cfg, err = cfg.check(); err != nil {
		return nil, err
	}
	if err := kernel.CheckCaps(); err != nil {
		return nil, err
	}
	notes, err := pin.EnsureLasting(o.host, "On-Ramp",
		"enter the network namespace with nsenter, which keeps the host's bpffs: nsenter --net=/run/netns/NS ccload onramp enable ...")
	if err != nil {
		return nil, err
	}
	key, err := lookup(cfg.Iface)
	if err != nil {
		return nil, err
	}
	if err := qdisc.RequireEthernet(key.Name, "On-Ramp"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			o.tidy() // the directories a failure left empty
		}
	}()
	if len(cfg.Peers) == 0 {
		notes = append(notes, "no peer prefixes given: nothing will be stamped (pass --peers with the datacenter's prefixes)")
	}
	old, err := o.instances(key.Name, key.Index, key.Netns)
	if err != nil {
		return nil, err
	}
	for _, k := range old {
		if k == key && o.attached(k) {
			more, err := o.update(k, cfg)
			if err != nil {
				return nil, err
			}
			st := o.read(k)
			notes = append(notes, "On-Ramp was already enabled on "+key.Name+": parameters and prefixes updated")
			st.Notes = append(append(notes, more...), st.Notes...)
			return &st, nil
		}
		if err := o.remove(k); err != nil {
			return nil, fmt.Errorf("remove the pins of an earlier On-Ramp on %s that is no longer attached: %w", cfg.Iface, err)
		}
		notes = append(notes, fmt.Sprintf("removed the pins of an earlier On-Ramp on %s that was no longer attached", cfg.Iface))
	}
	more, err := o.attach(key, cfg)
	if err != nil {
		return nil, err
	}
	st := o.read(key)
	st.Notes = append(append(notes, more...), st.Notes...)
	return &st, nil
}

// attach does Enable's work for an interface without On-Ramp. Its steps,
// each followed by a kill point, and what a kill after each leaves for
// Recover: the fq record (fqroot.go) and the fq root; the clock map of
// the namespace (kept: it is the clock agent's too); the stage with the
// maps, the object record and the attachments, which pin.CleanStale
// removes with CleanStage; the holder and the sockops program
// (sockops.go), which Recover drops when no committed interface holds
// them; the commit, after which the pin set is complete.
func (o *OnRamp) attach(key pin.IfaceKey, cfg Config) (notes []string, err error) {
	if cfg.Observe {
		// Nothing to enforce: the root qdisc stays as it is.
		return o.attachPrograms(key, cfg)
	}
	root, installed, err := o.ensureFQ(key, cfg.ReplaceQdisc)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && installed {
			_, ferr := o.dropFQ(key)
			err = errors.Join(err, ferr)
		}
	}()
	if root.Replaced != "" {
		notes = append(notes, fmt.Sprintf("replaced the root qdisc %s of %s with %s; `ccload onramp disable` leaves the kernel's default", root.Replaced, key.Name, root.Kind))
	}
	more, err := o.attachPrograms(key, cfg)
	if err != nil {
		return nil, err
	}
	// The pins are in place: from here on On-Ramp is the pins', and
	// undoing it is Disable's work.
	installed = false
	return append(notes, more...), nil
}

// attachPrograms does attach's work once the root qdisc is fq (or, in
// observe mode, as it is): it loads
// the programs, pins them and their maps in a stage, attaches them, takes
// a hold on the sockops program and commits the stage. A failure leaves
// nothing of it; the fq root is the caller's.
func (o *OnRamp) attachPrograms(key pin.IfaceKey, cfg Config) (notes []string, err error) {
	clockDir, err := clocksync.Dir(o.host)
	if err != nil {
		return nil, err
	}
	madeClock := !kernel.Exists(clockDir)
	clock, err := clocksync.DataPathMap(o.host)
	if err != nil {
		return nil, err
	}
	defer clock.Close()
	if madeClock {
		what := "flows pause"
		if cfg.Observe {
			what = "one-way delays are measured"
		}
		notes = append(notes, "no clock agent has run in this network namespace: "+what+" only once `ccload clock run` publishes offsets for their peers")
		defer func() {
			if err != nil {
				_ = os.RemoveAll(clockDir)
			}
		}()
	}

	spec, err := loadOnramp()
	if err != nil {
		return nil, kernel.NewError(kernel.KindBadObject, "rebuild ccload", err, "read the embedded On-Ramp object")
	}
	spec.Maps[onrampMapOnrampParams].Contents = []ebpf.MapKV{{Key: uint32(0), Value: cfg.params()}}
	shared, err := o.acquireShared(spec)
	if err != nil {
		return nil, err
	}
	defer pin.CloseMaps(shared)
	repl := map[string]*ebpf.Map{onrampMapClockOffsets: clock}
	maps.Copy(repl, shared)
	var objs onrampObjects
	if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: repl}); err != nil {
		return nil, kernel.LoadError("On-Ramp's tc programs", err)
	}
	defer objs.Close()

	stage, err := pin.NewStage(o.host.PinRoot(), stageLabelPrefix+key.String(), o.dir(key))
	if err != nil {
		return nil, err
	}
	defer stage.Abort()
	pin.KillPoint("onramp-staged")
	if err := os.MkdirAll(o.root(), 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", o.root(), err)
	}
	if err := stage.PinMaps(objs.pinned()); err != nil {
		return nil, fmt.Errorf("pin On-Ramp: %w", err)
	}
	pin.KillPoint("onramp-maps-pinned")
	if err := pin.WriteObject(stage.Path(pinObject), o.object()); err != nil {
		return nil, err
	}
	pin.KillPoint("onramp-object-recorded")
	var atts []*qdisc.Attachment
	stage.OnAbort(func() {
		for i := len(atts) - 1; i >= 0; i-- {
			atts[i].Close()
		}
	})
	for _, side := range qdisc.Sides() {
		a, err := qdisc.Attach(key.Name, objs.program(side), qdisc.AttachOptions{Direction: side, Method: cfg.Method, Priority: Priority})
		if errors.Is(err, unix.EEXIST) {
			return nil, kernel.NewError(kernel.KindAlreadyAttached,
				fmt.Sprintf("find it with: tc filter show dev %s %s", key.Name, side), err,
				"%s already has a tc filter at On-Ramp's priority", key.Name)
		}
		if err != nil {
			return nil, fmt.Errorf("attach On-Ramp to %s %s: %w", key.Name, side, err)
		}
		atts = append(atts, a)
		// With clsact the filter now runs without a pin: CleanStage
		// finds it by its priority and name.
		pin.KillPoint("onramp-" + side.String() + "-attached")
		if err := a.Pin(qdisc.SidePin(stage.Path(""), side)); err != nil {
			return nil, fmt.Errorf("pin On-Ramp's %s program: %w", side, err)
		}
		pin.KillPoint("onramp-" + side.String() + "-pinned")
	}
	stage.OnAbort(func() { _ = o.releaseSockops(key.String()) })
	more, err := o.acquireSockops(key.String(), cfg.Peers, cfg.Cgroup)
	notes = append(notes, more...)
	if err != nil {
		return nil, err
	}
	if err := stage.Commit(); err != nil {
		if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
			return nil, kernel.NewError(kernel.KindAlreadyAttached, "run `ccload onramp status`", err,
				"another ccload enabled On-Ramp on %s at the same moment", key.Name)
		}
		return nil, err
	}
	pin.KillPoint("onramp-committed")
	var rerr error
	for _, a := range atts {
		rerr = errors.Join(rerr, a.Release())
	}
	if rerr != nil {
		return nil, errors.Join(fmt.Errorf("let go of On-Ramp's programs on %s: %w", key.Name, rerr), o.remove(key))
	}
	pin.KillPoint("onramp-released")
	return notes, nil
}

// pinned returns the maps of the tc object that an interface's pin set
// holds, by pin name: all but the clock map (the clock agent's) and the
// scratch map of new peers.
func (objs *onrampObjects) pinned() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{
		onrampMapOnrampParams: objs.OnrampParams, onrampMapOnrampFlows: objs.OnrampFlows,
		onrampMapOnrampPeers: objs.OnrampPeers, onrampMapOnrampStats: objs.OnrampStats,
		onrampMapOnrampTrace: objs.OnrampTrace, onrampMapOnrampTraceOn: objs.OnrampTraceOn,
	}
}

// acquireShared takes On-Ramp's hold on the shared maps that spec
// declares (internal/sharedmaps): the holds map it shares with θ-PowerTCP
// and the room map it shares with its own sockops program. It returns
// them by name, for MapReplacements; the caller closes them.
func (o *OnRamp) acquireShared(spec *ebpf.CollectionSpec) (map[string]*ebpf.Map, error) {
	out := map[string]*ebpf.Map{}
	for _, name := range []string{sharedmaps.OnRampHolds, sharedmaps.OnRampRoom} {
		ms, ok := spec.Maps[name]
		if !ok {
			continue
		}
		m, err := o.shared.Acquire(holdsHolder, ms)
		if err != nil {
			pin.CloseMaps(out)
			return nil, err
		}
		out[name] = m
	}
	return out, nil
}

// program returns the tc program of side.
func (objs *onrampObjects) program(side qdisc.Direction) *ebpf.Program {
	if side == qdisc.Ingress {
		return objs.OnrampIngress
	}
	return objs.OnrampEgress
}

// update does Enable's work for an interface where On-Ramp runs: unless
// cfg observes only, it installs the fq root if there is none (somebody
// removed it, or On-Ramp observed until now), upgrades the
// programs if they are another build's, and writes cfg. Each step can be
// cut short by a kill and done again by the next Enable.
func (o *OnRamp) update(k pin.IfaceKey, cfg Config) (notes []string, err error) {
	if !cfg.Observe {
		if _, installed, err := o.ensureFQ(k, cfg.ReplaceQdisc); err != nil {
			return nil, err
		} else if installed {
			notes = append(notes, fmt.Sprintf("the root qdisc of %s was not fq: installed fq, which enforces the pauses", k.Name))
		}
	}
	reattach, more, err := o.upgradeTC(k)
	notes = append(notes, more...)
	if err != nil {
		return notes, err
	}
	if reattach {
		// The new build cannot take over the pinned maps: start afresh,
		// keeping the fq root and the sockops program.
		if err := o.removeInstance(k); err != nil {
			return notes, err
		}
		more, err := o.attach(k, cfg)
		if err != nil {
			return notes, errors.Join(err, o.remove(k))
		}
		return append(notes, more...), nil
	}
	m, err := ebpf.LoadPinnedMap(filepath.Join(o.dir(k), onrampMapOnrampParams), nil)
	if err != nil {
		return notes, fmt.Errorf("open On-Ramp's parameters on %s: %w", k.Name, err)
	}
	defer m.Close()
	if err := m.Update(uint32(0), cfg.params(), ebpf.UpdateExist); err != nil {
		return notes, fmt.Errorf("update On-Ramp's parameters on %s: %w", k.Name, err)
	}
	pin.KillPoint("onramp-params-written")
	more, err = o.acquireSockops(k.String(), cfg.Peers, cfg.Cgroup)
	return append(notes, more...), err
}

// Disable turns On-Ramp off on iface, an interface of the calling thread's
// network namespace (or one that was called so and is gone): it detaches
// the programs, removes the pins and the fq root qdisc if Enable installed
// it (an fq that was there before stays), and detaches the sockops program
// when no other interface has On-Ramp. It reports whether there was
// anything to remove. Paused flows resume at once.
func (o *OnRamp) Disable(iface string) (bool, error) {
	if err := kernel.CheckCaps(); err != nil {
		return false, err
	}
	ns, ifindex, err := pin.DetachTarget(iface)
	if err != nil {
		return false, err
	}
	keys, err := o.instances(iface, ifindex, ns)
	if err != nil {
		return false, err
	}
	for _, k := range keys {
		if err := o.remove(k); err != nil {
			return false, err
		}
	}
	return len(keys) > 0, nil
}

// remove undoes instance k, in k's network namespace, in steps that a
// kill may cut short and Recover finishes: it detaches what is still
// attached and removes the pins (removeInstance), then the fq root qdisc
// if On-Ramp installed it (dropFQ), then the hold on the sockops program
// (releaseSockops), then the clock map if it was the namespace's last
// instance and no clock agent runs.
func (o *OnRamp) remove(k pin.IfaceKey) error {
	if err := o.removeInstance(k); err != nil {
		return err
	}
	_, err := o.dropFQ(k)
	err = errors.Join(err, o.releaseSockops(k.String()))
	// The last interface of the namespace takes the clock map with it
	// unless an agent runs: Enable may have created it.
	if left, lerr := o.instances("", -1, k.Netns); lerr == nil && len(left) == 0 {
		if _, cerr := clocksync.RemoveIfIdle(o.host); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}
	o.tidy()
	return err
}

// removeInstance detaches what is still attached of instance k and
// removes its pins. An instance made before the fq records has its fq
// mark moved to a record first, so that a kill after the pins go still
// leaves the fq root to Recover.
func (o *OnRamp) removeInstance(k pin.IfaceKey) error {
	dir := o.dir(k)
	iface := pin.IfaceNow(k)
	gone := pin.IfaceGone(k.Index)
	var err error
	for _, side := range qdisc.Sides() {
		if _, rerr := qdisc.RecoverReplace(iface, side, qdisc.SidePin(dir, side)); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	if err == nil {
		err = qdisc.DetachPinnedSides(iface, dir)
	}
	if err != nil && !gone {
		return kernel.NewError(kernel.KindDetach, fmt.Sprintf("check it with `tc filter show dev %s` and `bpftool net`, then remove %s by hand", iface, dir),
			err, "detach On-Ramp")
	}
	pin.KillPoint("onramp-detached")
	if kernel.Exists(filepath.Join(dir, markFQInstalled)) {
		if err := o.recordFQ(k); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove On-Ramp's pins %s: %w", dir, err)
	}
	pin.KillPoint("onramp-unpinned")
	return nil
}

// tidy removes On-Ramp's directories that are left empty, and its root
// once nothing is left in it, and with the root its hold on the shared
// maps (a failure to give it back leaves a holder that recovery drops).
func (o *OnRamp) tidy() {
	for _, d := range []string{o.holdersDir(), o.fqDir(), o.root()} {
		_ = os.Remove(d) // only when empty
	}
	if !kernel.Exists(o.root()) {
		_ = o.shared.Release(holdsHolder)
	}
}

// sumStats sums a per-CPU counter array of ONRAMP_STAT_MAX entries.
func sumStats(m *ebpf.Map) ([]uint64, error) {
	return percpu.SumAll(m, len(statNames))
}
