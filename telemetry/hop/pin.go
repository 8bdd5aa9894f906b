package hop

// Pinned INT hops: Pins.Attach loads and attaches the hop as New does,
// pins it and returns, so that the hop outlives the process; Pins.Detach
// removes it, Pins.List lists them.
//
// Pin layout. bpffs is one tree for the whole host, while interface names
// and indexes belong to a network namespace, so each hop has a directory
//
//	<pin root>/hop/<ifname>-<ifindex>-ns<netns inode>/
//
// named by the interface's name, its index and the inode number of its
// network namespace (/proc/thread-self/ns/net), as pin.IfaceKey writes it:
// together unique on the host while the namespace lives. bpffs refuses
// '.' in names, so '.' in the interface name is written %2e and '%' is
// written %25 (eth0.100 -> eth0%2e100-7-ns4026531840). The directory
// holds every map of the hop's object, under the map's name (hop_config,
// hop_stats, hop_queue, ...), the record of the object the programs were
// built from (object, pin.WriteObject; a hop pinned by a ccload before
// records has none), and one pin per attached program, named for
// its side of the interface: tc_egress (tc_ingress): the TCX link, or with
// clsact the program, whose cls_bpf filter stays in the kernel by itself
// (see qdisc.Attachment.Pin).
//
// The directory is built in a pin.Stage and renamed into place once
// everything is attached and pinned, so a failed attach leaves no pins and
// nothing attached; the rename also fails when another process made the
// directory first. What a killed ccload leaves, the next one's recovery
// sweep removes: the stage of an attach (CleanStage), the directory of an
// --off cut short (Recover).

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
	"github.com/ccload/ccload/internal/units"
	"github.com/ccload/ccload/qdisc"
)

// hopDir is the directory of pinned hops below the pin root.
const hopDir = "hop"

// stageLabelPrefix starts the label of a hop's stage: hop-<key>.
const stageLabelPrefix = "hop-"

// pinObject is the pin of the record of the object a hop was built from.
const pinObject = "object"

// Status is a pinned INT hop of the calling thread's network
// namespace: where it is, what it models and its counters.
type Status struct {
	// Iface is the interface's name now (the one it had at attach time
	// when the interface is gone).
	Iface string `json:"iface"`
	// Ifindex is the interface's index.
	Ifindex int `json:"ifindex"`
	// NetnsInode is the inode number of the interface's network
	// namespace, as `stat -L -c %i /proc/self/ns/net` prints it.
	NetnsInode uint64 `json:"netns_inode"`
	// PinDir is the bpffs directory that holds the hop.
	PinDir string `json:"pin_dir"`
	// Method is how the hop's program is attached: tcx or clsact.
	Method qdisc.Method `json:"method"`
	// Attached reports whether the hop's programs still run on the
	// interface. It is false when the interface was deleted or the
	// filter removed by other means: only pins are left, which
	// Detach removes.
	Attached bool `json:"attached"`
	// Rate is the shaper's rate the hop reports, as units.ParseBandwidth
	// reads it; RateBps is the same in bit/s.
	Rate    string `json:"rate"`
	RateBps uint64 `json:"rate_bps"`
	// BufferBytes, BurstBytes and ECNThreshold are the model's buffer,
	// bucket and CE-marking threshold (0: no marking).
	BufferBytes  uint32 `json:"buffer_bytes"`
	BurstBytes   uint32 `json:"burst_bytes"`
	ECNThreshold uint32 `json:"ecn_threshold_bytes"`
	// ACKPadding reports whether the hop refreshes its record on the ACKs
	// coming back through the interface (Config.ACKPadding).
	ACKPadding bool `json:"ack_padding"`
	// Stats are the hop's counters and queue model.
	Stats Stats `json:"stats"`
	// Object is the identity of the BPF object the hop's programs were
	// built from (pin.Object in hex), "" when its pins record none (made
	// by a ccload before records).
	Object string `json:"object,omitempty"`
	// UpgradeAvailable reports that the hop runs another build than
	// this ccload's: Attach (or Upgrade) on its interface swaps this one
	// in, in place.
	UpgradeAvailable bool `json:"upgrade_available,omitempty"`
	// Notes are remarks for the operator.
	Notes []string `json:"notes,omitempty"`
}

// Pins attaches, lists and removes the pinned INT hops of a host. Like
// the loader it keeps no state: everything is in the kernel and in bpffs.
type Pins struct {
	host kernel.Host
	salt uint32 // see WithBuildSalt
}

// Option changes how NewPins's Pins loads the hop.
type Option func(*Pins)

// WithBuildSalt makes the Pins stand for another build of the hop's
// object: its identity is pin.ObjectOf(the embedded object, salt), so that
// a hop pinned by Pins with another salt counts as another build's, and
// Attach swaps this one in. Tests of upgrades use it; 0 is the build as
// shipped.
func WithBuildSalt(salt uint32) Option { return func(l *Pins) { l.salt = salt } }

// NewPins returns the pinned hops of host's pin root.
func NewPins(host kernel.Host, opts ...Option) *Pins {
	l := &Pins{host: host}
	for _, o := range opts {
		o(l)
	}
	return l
}

// object is the identity of the build of the hop's object these Pins
// load.
func (l *Pins) object() pin.Object { return pin.ObjectOf(_IntHopBytes, l.salt) }

func (l *Pins) root() string { return filepath.Join(l.host.PinRoot(), hopDir) }

func (l *Pins) dir(k pin.IfaceKey) string { return filepath.Join(l.root(), k.String()) }

// findHops returns the keys of the pinned hops of network namespace ns on
// the interface with index ifindex (whatever it was called then; 0 is no
// interface), and those left from a deleted interface that was called
// iface.
func (l *Pins) findHops(iface string, ifindex int, ns uint64) ([]pin.IfaceKey, error) {
	keys, err := pin.FindIfaceDirs(l.root(), iface, ifindex, ns)
	if err != nil {
		return nil, fmt.Errorf("list pinned INT hops: %w", err)
	}
	return keys, nil
}

// ensureBPFFS makes sure pins can go under the bpffs, mounting it where
// kernel.Host.EnsureBPFFS would, but not in a mount namespace that ends with
// this process: pins made there would vanish, and the hop with them.
func (l *Pins) ensureBPFFS() ([]string, error) {
	return pin.EnsureLasting(l.host, "a hop",
		"enter the network namespace with nsenter, which keeps the host's bpffs: nsenter --net=/run/netns/NS ccload int hop ...; or keep the hop in the foreground with --foreground")
}

// foregroundOn reports whether an INT hop program runs with TCX on
// the egress of ifindex: one that NewHop attached (`ccload int hop
// --foreground`) when no pinned hop is there. With clsact, the filter's
// priority, which such a hop takes, makes the attach fail instead. It is
// best effort: what it cannot query it takes as no hop.
func foregroundOn(ifindex int) bool {
	res, err := link.QueryPrograms(link.QueryOptions{Target: ifindex, Attach: ebpf.AttachTCXEgress})
	if err != nil {
		return false
	}
	for _, p := range res.Programs {
		prog, err := ebpf.NewProgramFromID(p.ID)
		if err != nil {
			continue
		}
		info, err := prog.Info()
		prog.Close()
		if err == nil && info.Name == intHopProgIntHop {
			return true
		}
	}
	return false
}

// alreadyError says that iface has an INT hop and how to remove it.
func alreadyError(iface, where string, err error) error {
	return kernel.NewError(kernel.KindAlreadyAttached,
		fmt.Sprintf("remove it first: ccload int hop --iface %s --off (ccload int status lists the hops)", iface),
		err, "an INT hop is already attached to %s (%s)", iface, where)
}

// Attach loads the INT hop as New does, attaches it to cfg.Iface in
// the calling thread's network namespace and pins it, maps and
// attachment, under <pin root>/hop/ (see the pin layout above), so that
// it keeps running after this process exits, until Detach. Any failure
// leaves no pins and nothing attached. An interface that has a pinned hop
// already is an error of kind KindAlreadyAttached, unless that hop is
// another build's (Status.UpgradeAvailable): then this build is swapped
// in, in place, and cfg's model written (see Upgrade). Pins left from a
// hop whose attachment is gone are removed first.
func (l *Pins) Attach(cfg Config) (_ *Status, err error) {
	if _, err := cfg.check(); err != nil {
		return nil, err
	}
	if err := kernel.CheckCaps(); err != nil {
		return nil, err
	}
	notes, err := l.ensureBPFFS()
	if err != nil {
		return nil, err
	}
	ifi, err := qdisc.LookupInterface(cfg.Iface)
	if err != nil {
		return nil, err
	}
	if ifi == nil {
		return nil, kernel.NewError(kernel.KindBadParam,
			"check the name with `ip link`; ccload works in the network namespace it runs in (nsenter --net=/run/netns/NS ccload ... for another)",
			nil, "no interface %q in this network namespace", cfg.Iface)
	}
	if err := qdisc.RequireEthernet(cfg.Iface, "the INT hop"); err != nil {
		return nil, err
	}
	ns, err := pin.CurrentNetns()
	if err != nil {
		return nil, err
	}
	key := pin.IfaceKey{Name: ifi.Name, Index: ifi.Index, Netns: ns}
	old, err := l.findHops(ifi.Name, ifi.Index, ns)
	if err != nil {
		return nil, err
	}
	for _, k := range old {
		if st := l.readHop(k); st.Attached {
			if st.UpgradeAvailable && k.Index == ifi.Index {
				return l.upgradeHop(k, &cfg, notes)
			}
			return nil, alreadyError(cfg.Iface, "pinned at "+st.PinDir, nil)
		}
		if err := l.removeHop(k); err != nil {
			return nil, fmt.Errorf("remove the pins of an earlier INT hop on %s that is no longer attached: %w", cfg.Iface, err)
		}
		notes = append(notes, fmt.Sprintf("removed the pins of an earlier INT hop on %s that was no longer attached (%s)", cfg.Iface, l.dir(k)))
	}

	if foregroundOn(ifi.Index) {
		return nil, kernel.NewError(kernel.KindAlreadyAttached,
			fmt.Sprintf("stop the `ccload int hop --foreground` on %s (Ctrl-C), then attach again", cfg.Iface),
			nil, "an INT hop that is not pinned already runs on %s", cfg.Iface)
	}
	return l.attachNew(cfg, key, notes)
}

// attachNew loads, attaches and pins the hop of cfg on the interface of
// key, as Attach does once it has checked that the interface has none.
func (l *Pins) attachNew(cfg Config, key pin.IfaceKey, notes []string) (*Status, error) {
	objs, err := load(cfg)
	if err != nil {
		return nil, err
	}
	defer objs.Close()
	stage, err := pin.NewStage(l.host.PinRoot(), stageLabelPrefix+key.String(), l.dir(key))
	if err != nil {
		return nil, err
	}
	defer stage.Abort()
	if err := os.MkdirAll(l.root(), 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", l.root(), err)
	}
	// Every map of the object, under its name.
	if err := pin.WriteObject(stage.Path(pinObject), l.object()); err != nil {
		return nil, fmt.Errorf("pin INT hop: %w", err)
	}
	maps := map[string]*ebpf.Map{intHopMapHopConfig: objs.HopConfig, intHopMapHopFlows: objs.HopFlows,
		intHopMapHopQueue: objs.HopQueue, intHopMapHopStats: objs.HopStats}
	if err := stage.PinMaps(maps); err != nil {
		return nil, fmt.Errorf("pin INT hop: %w", err)
	}
	cfg.Iface = key.Name
	atts, err := attach(objs, cfg, stage.Path(""))
	if errors.Is(err, unix.EEXIST) {
		return nil, kernel.NewError(kernel.KindAlreadyAttached,
			fmt.Sprintf("stop the other program (a `ccload int hop --foreground` on %s?), or find it with: tc filter show dev %s egress", cfg.Iface, cfg.Iface),
			err, "%s already has a tc filter at ccload's priority", cfg.Iface)
	}
	if err != nil {
		return nil, err
	}
	// Pins first (Abort removes them), so that closing our handles
	// afterwards detaches at once.
	stage.OnAbort(func() {
		for i := len(atts) - 1; i >= 0; i-- {
			atts[i].Close()
		}
	})
	pin.KillPoint("hop-attached")
	if err := stage.Commit(); err != nil {
		if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
			return nil, alreadyError(cfg.Iface, "another ccload attached one at the same moment", err)
		}
		return nil, err
	}
	// The pins are in place: from here on the hop is the pins', and
	// undoing it is Detach's work.
	var rerr error
	for _, a := range atts {
		rerr = errors.Join(rerr, a.Release())
	}
	if rerr != nil {
		return nil, errors.Join(fmt.Errorf("let go of the pinned INT hop on %s: %w", cfg.Iface, rerr), l.removeHop(key))
	}
	pin.KillPoint("hop-released")
	st := l.readHop(key)
	st.Notes = append(notes, st.Notes...)
	return &st, nil
}

// Detach removes the pinned INT hop from iface, an interface of the
// calling thread's network namespace: it detaches the programs and
// removes the pins. It reports whether there was one. Pins left from a
// hop whose interface is gone are removed too: iface is then the name the
// interface had.
func (l *Pins) Detach(iface string) (bool, error) {
	if err := kernel.CheckCaps(); err != nil {
		return false, err
	}
	ns, ifindex, err := pin.DetachTarget(iface)
	if err != nil {
		return false, err
	}
	keys, err := l.findHops(iface, ifindex, ns)
	if err != nil {
		return false, err
	}
	for _, k := range keys {
		if err := l.removeHop(k); err != nil {
			return false, err
		}
	}
	return len(keys) > 0, nil
}

// removeHop detaches what is still attached of the hop k and removes its
// pins.
func (l *Pins) removeHop(k pin.IfaceKey) error {
	dir := l.dir(k)
	iface := pin.IfaceNow(k)
	if err := recoverReplace(iface, dir); err != nil {
		return err
	}
	if err := qdisc.DetachPinnedSides(iface, dir); err != nil {
		return kernel.NewError(kernel.KindDetach, fmt.Sprintf("check it with `tc filter show dev %s` and `bpftool net`, then remove %s by hand", iface, dir),
			err, "detach the INT hop")
	}
	pin.KillPoint("hop-detached")
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove the INT hop's pins %s: %w", dir, err)
	}
	return nil
}

// List lists the pinned INT hops of the calling thread's network
// namespace, by interface name, with their config and counters.
func (l *Pins) List() ([]Status, error) {
	hops, err := pin.ListIfaceDirs(l.root(), l.readHop)
	if err != nil {
		return nil, fmt.Errorf("list pinned INT hops: %w", err)
	}
	sort.Slice(hops, func(i, j int) bool { return hops[i].Iface < hops[j].Iface })
	return hops, nil
}

// readHop reads the pins of hop k. What it cannot read becomes a note.
func (l *Pins) readHop(k pin.IfaceKey) Status {
	dir := l.dir(k)
	st := Status{Iface: pin.IfaceNow(k), Ifindex: k.Index, NetnsInode: k.Netns, PinDir: dir}
	note := func(format string, args ...any) { st.Notes = append(st.Notes, fmt.Sprintf(format, args...)) }
	if st.Iface != k.Name {
		note("the interface was called %s when the hop was attached", k.Name)
	}

	if conf, err := ebpf.LoadPinnedMap(filepath.Join(dir, intHopMapHopConfig), nil); err != nil {
		note("cannot read the hop's config: %v", err)
	} else {
		var c intHopHopConfig
		if err := conf.Lookup(uint32(0), &c); err != nil {
			note("cannot read the hop's config: %v", err)
		}
		conf.Close()
		cfg := configFrom(c)
		st.RateBps, st.Rate = cfg.RateBps, units.FormatBandwidth(cfg.RateBps)
		st.BufferBytes, st.BurstBytes, st.ECNThreshold = cfg.BufferBytes, cfg.BurstBytes, cfg.ECNThreshold
		st.ACKPadding = cfg.ACKPadding
	}

	stats, serr := ebpf.LoadPinnedMap(filepath.Join(dir, intHopMapHopStats), nil)
	queue, qerr := ebpf.LoadPinnedMap(filepath.Join(dir, intHopMapHopQueue), nil)
	if err := errors.Join(serr, qerr); err != nil {
		note("cannot read the hop's counters: %v", err)
	} else if st.Stats, err = readStats(stats, queue); err != nil {
		note("cannot read the hop's counters: %v", err)
	}
	for _, m := range []*ebpf.Map{stats, queue} {
		if m != nil {
			m.Close()
		}
	}

	obj, known, err := pin.ReadObject(filepath.Join(dir, pinObject))
	switch {
	case err != nil:
		note("cannot read the object the hop was built from: %v", err)
		st.UpgradeAvailable = true
	case known:
		st.Object = obj.String()
		st.UpgradeAvailable = obj != l.object()
	default:
		st.UpgradeAvailable = true
	}

	sides := qdisc.InspectPinnedSides(st.Iface, dir)
	st.Method, st.Attached = sides.Method, sides.Attached
	for _, p := range sides.Problems {
		note("%s", p)
	}
	if !st.Attached {
		note("the hop is no longer attached (its interface was deleted, or its filter removed by other means); remove its pins with: ccload int hop --iface %s --off", st.Iface)
	}
	return st
}

// Foreground attaches a hop to cfg.Iface for as long as this process
// keeps the Hop, as New does, after checking that no pinned hop runs on
// the interface: two hops would write two records for one queue.
func (l *Pins) Foreground(cfg Config) (*Hop, error) {
	hops, err := l.List()
	if err != nil {
		return nil, err
	}
	for _, h := range hops {
		if h.Iface == cfg.Iface && h.Attached {
			return nil, alreadyError(cfg.Iface, "pinned at "+h.PinDir, nil)
		}
	}
	return New(cfg)
}

// CleanStage is the pin.Cleaner of the hops' stages: for the stage of a
// hop attach that died before its commit, it detaches, in the stage's
// network namespace, what still runs of what the stage pinned. That
// matters with clsact, whose filter stays in the kernel without its pin; a
// TCX link goes with its pin anyway.
func CleanStage(s pin.StaleStage) error {
	return pin.IfaceStageCleaner(stageLabelPrefix, qdisc.DetachPinnedSides)(s)
}

// Recover finishes what a ccload command that died left of the pinned
// hops, in every network namespace, as the next command does before it
// acts (the caller holds pin.Lock; the stages themselves are
// pin.CleanStale's, with CleanStage): first an upgrade killed within a
// clsact swap is finished or undone (qdisc.RecoverReplace, see
// upgrade.go); then a hop directory that lacks a pin, or whose programs a
// --off detached but did not unpin, is detached and removed. The record
// of the object is not among the pins a hop needs (hops pinned before
// records lack it), and a record that names the build an upgrade killed
// after its swaps replaced is harmless: the next Attach swaps again. A
// complete hop whose interface was deleted stays, as List shows it, until
// --off or the next attach. It returns the directories it removed.
func (l *Pins) Recover() (removed []string, err error) {
	entries, err := os.ReadDir(l.root())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list pinned INT hops: %w", err)
	}
	var errs []error
	for _, e := range entries {
		k, ok := pin.ParseIfaceKey(e.Name())
		if !ok || !e.IsDir() {
			continue
		}
		var gone bool
		err := pin.InNetns(k.Netns, func() error {
			// An upgrade killed in its clsact swap first (see
			// qdisc.ReplacePinned): until then the pin may name a
			// program that no filter runs.
			if err := recoverReplace(pin.IfaceNow(k), l.dir(k)); err != nil {
				return err
			}
			if l.complete(k) {
				if pin.IfaceGone(k.Index) {
					return nil
				}
				// What cannot be inspected is left alone.
				if sides := qdisc.InspectPinnedSides(pin.IfaceNow(k), l.dir(k)); sides.Attached || len(sides.Problems) > 0 {
					return nil
				}
			}
			gone = true
			return l.removeHop(k)
		})
		if errors.Is(err, pin.ErrNetnsGone) && !l.complete(k) {
			// Nothing runs in a namespace that is gone.
			gone, err = true, os.RemoveAll(l.dir(k))
		} else if errors.Is(err, pin.ErrNetnsGone) {
			err = nil
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove the INT hop %s a command left incomplete: %w", l.dir(k), err))
		} else if gone {
			removed = append(removed, l.dir(k))
		}
	}
	return removed, errors.Join(errs...)
}

// complete reports whether every pin of hop k is there: its maps, its
// egress program, and its ingress one when it pads ACKs.
func (l *Pins) complete(k pin.IfaceKey) bool {
	dir := l.dir(k)
	for _, name := range []string{intHopMapHopConfig, intHopMapHopFlows, intHopMapHopQueue, intHopMapHopStats} {
		if !kernel.Exists(filepath.Join(dir, name)) {
			return false
		}
	}
	if !kernel.Exists(qdisc.SidePin(dir, qdisc.Egress)) {
		return false
	}
	conf, err := ebpf.LoadPinnedMap(filepath.Join(dir, intHopMapHopConfig), nil)
	if err != nil {
		return false
	}
	defer conf.Close()
	var c intHopHopConfig
	if err := conf.Lookup(uint32(0), &c); err != nil {
		return false
	}
	return !configFrom(c).ACKPadding || kernel.Exists(qdisc.SidePin(dir, qdisc.Ingress))
}
