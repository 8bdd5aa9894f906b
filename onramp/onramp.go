package onramp

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/clocksync"
	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/percpu"
	"github.com/ccload/ccload/internal/pin"
	"github.com/ccload/ccload/qdisc"
)

// onrampDir is On-Ramp's directory below the pin root.
const onrampDir = "onramp"

// markFQInstalled, an empty directory among an interface's pins, says that
// Enable installed the fq root qdisc, which Disable then removes.
const markFQInstalled = "fq_installed"

// Priority is the tc filter priority of On-Ramp's programs with clsact,
// apart from the INT hop's (qdisc.DefaultPriority) and the clock agent's
// scrub on the same interface.
const Priority = qdisc.DefaultPriority + 1

// OnRamp enables, reports and disables On-Ramp on the interfaces of a
// host. Like the loader it keeps no state of its own: everything is in the
// kernel and in bpffs pins.
type OnRamp struct {
	host kernel.Host
}

// New returns an OnRamp acting on host.
func New(host kernel.Host) *OnRamp { return &OnRamp{host: host} }

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
// prefixes in place. Any failure leaves nothing behind: no pins, no
// programs, and the root qdisc as it was.
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
	if len(cfg.Peers) == 0 {
		notes = append(notes, "no peer prefixes given: nothing will be stamped (pass --peers with the datacenter's prefixes)")
	}
	old, err := o.instances(key.Name, key.Index, key.Netns)
	if err != nil {
		return nil, err
	}
	for _, k := range old {
		if k == key && o.attached(k) {
			if err := o.reconfigure(k, cfg); err != nil {
				return nil, err
			}
			st := o.read(k)
			st.Notes = append(append(notes, "On-Ramp was already enabled on "+key.Name+": parameters and prefixes updated"), st.Notes...)
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

// attach does Enable's work for an interface without On-Ramp.
func (o *OnRamp) attach(key pin.IfaceKey, cfg Config) (notes []string, err error) {
	_, hadFQ, err := qdisc.InspectFQRoot(key.Name)
	if err != nil {
		return nil, err
	}
	root, err := qdisc.EnsureFQRoot(key.Name, qdisc.FQConfig{}, cfg.ReplaceQdisc)
	if err != nil {
		return nil, err
	}
	installed := !hadFQ
	if installed {
		defer func() {
			if err != nil {
				_, rerr := qdisc.RemoveFQRoot(key.Name)
				err = errors.Join(err, rerr)
			}
		}()
	}
	if root.Replaced != "" {
		notes = append(notes, fmt.Sprintf("replaced the root qdisc %s of %s with %s; `ccload onramp disable` leaves the kernel's default", root.Replaced, key.Name, root.Kind))
	}

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
		notes = append(notes, "no clock agent has run in this network namespace: flows pause only once `ccload clock run` publishes offsets for their peers")
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
	var objs onrampObjects
	if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{
		MapReplacements: map[string]*ebpf.Map{onrampMapClockOffsets: clock},
	}); err != nil {
		return nil, kernel.LoadError("On-Ramp's tc programs", err)
	}
	defer objs.Close()

	stage, err := pin.NewStage(o.host.PinRoot(), "onramp-"+key.String(), o.dir(key))
	if err != nil {
		return nil, err
	}
	defer stage.Abort()
	if err := os.MkdirAll(o.root(), 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", o.root(), err)
	}
	maps := map[string]*ebpf.Map{
		onrampMapOnrampParams: objs.OnrampParams, onrampMapOnrampFlows: objs.OnrampFlows,
		onrampMapOnrampPeers: objs.OnrampPeers, onrampMapOnrampStats: objs.OnrampStats,
		onrampMapOnrampTrace: objs.OnrampTrace, onrampMapOnrampTraceOn: objs.OnrampTraceOn,
	}
	if err := stage.PinMaps(maps); err != nil {
		return nil, fmt.Errorf("pin On-Ramp: %w", err)
	}
	var atts []*qdisc.Attachment
	stage.OnAbort(func() {
		for i := len(atts) - 1; i >= 0; i-- {
			atts[i].Close()
		}
	})
	for _, side := range qdisc.Sides() {
		prog := objs.OnrampEgress
		if side == qdisc.Ingress {
			prog = objs.OnrampIngress
		}
		a, err := qdisc.Attach(key.Name, prog, qdisc.AttachOptions{Direction: side, Method: cfg.Method, Priority: Priority})
		if errors.Is(err, unix.EEXIST) {
			return nil, kernel.NewError(kernel.KindAlreadyAttached,
				fmt.Sprintf("find it with: tc filter show dev %s %s", key.Name, side), err,
				"%s already has a tc filter at On-Ramp's priority", key.Name)
		}
		if err != nil {
			return nil, fmt.Errorf("attach On-Ramp to %s %s: %w", key.Name, side, err)
		}
		atts = append(atts, a)
		if err := a.Pin(qdisc.SidePin(stage.Path(""), side)); err != nil {
			return nil, fmt.Errorf("pin On-Ramp's %s program: %w", side, err)
		}
	}
	if installed {
		// Disable removes only the fq that Enable installed.
		if err := os.Mkdir(stage.Path(markFQInstalled), 0o700); err != nil {
			return nil, fmt.Errorf("record the fq root of %s: %w", key.Name, err)
		}
	}
	undo, _, err := o.acquireSockops(key.String(), cfg.Peers, cfg.Cgroup)
	if err != nil {
		return nil, err
	}
	stage.OnAbort(undo)
	if err := stage.Commit(); err != nil {
		if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
			return nil, kernel.NewError(kernel.KindAlreadyAttached, "run `ccload onramp status`", err,
				"another ccload enabled On-Ramp on %s at the same moment", key.Name)
		}
		return nil, err
	}
	var rerr error
	for _, a := range atts {
		rerr = errors.Join(rerr, a.Release())
	}
	if rerr != nil {
		return nil, errors.Join(fmt.Errorf("let go of On-Ramp's programs on %s: %w", key.Name, rerr), o.remove(key))
	}
	return notes, nil
}

// reconfigure writes cfg into a running instance.
func (o *OnRamp) reconfigure(k pin.IfaceKey, cfg Config) error {
	m, err := ebpf.LoadPinnedMap(filepath.Join(o.dir(k), onrampMapOnrampParams), nil)
	if err != nil {
		return fmt.Errorf("open On-Ramp's parameters on %s: %w", k.Name, err)
	}
	defer m.Close()
	if err := m.Update(uint32(0), cfg.params(), ebpf.UpdateExist); err != nil {
		return fmt.Errorf("update On-Ramp's parameters on %s: %w", k.Name, err)
	}
	_, _, err = o.acquireSockops(k.String(), cfg.Peers, cfg.Cgroup)
	return err
}

// Disable turns On-Ramp off on iface, an interface of the calling thread's
// network namespace (or one that was called so and is gone): it detaches
// the programs, removes the pins and the fq root qdisc if Enable installed
// it (an fq that was there before stays), and detaches the sockops program
// when no other interface has On-Ramp. It reports whether there was anything to remove. Paused
// flows resume at once.
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

// remove detaches what is still attached of instance k, removes its pins,
// the fq root qdisc if its Enable installed it, and its hold on the sockops
// program.
func (o *OnRamp) remove(k pin.IfaceKey) error {
	dir := o.dir(k)
	iface := pin.IfaceNow(k)
	gone := pin.IfaceGone(k.Index)
	if err := qdisc.DetachPinnedSides(iface, dir); err != nil && !gone {
		return kernel.NewError(kernel.KindDetach, fmt.Sprintf("check it with `tc filter show dev %s` and `bpftool net`, then remove %s by hand", iface, dir),
			err, "detach On-Ramp")
	}
	ownFQ := kernel.Exists(filepath.Join(dir, markFQInstalled))
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove On-Ramp's pins %s: %w", dir, err)
	}
	var qerr error
	if ownFQ && !gone {
		if _, err := qdisc.RemoveFQRoot(iface); err != nil {
			qerr = fmt.Errorf("remove the fq root qdisc On-Ramp installed on %s: %w", iface, err)
		}
	}
	err := errors.Join(qerr, o.releaseSockops(k.String()))
	// The last interface of the namespace takes the clock map with it
	// unless an agent runs: Enable may have created it.
	if left, lerr := o.instances("", -1, k.Netns); lerr == nil && len(left) == 0 {
		if _, cerr := clocksync.RemoveIfIdle(o.host); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}
	_ = os.Remove(o.root()) // once empty: the last interface is gone
	return err
}

// sumStats sums a per-CPU counter array of ONRAMP_STAT_MAX entries.
func sumStats(m *ebpf.Map) ([]uint64, error) {
	return percpu.SumAll(m, len(statNames))
}
