package hop

import (
	"fmt"
	"path/filepath"

	"github.com/cilium/ebpf"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
	"github.com/ccload/ccload/qdisc"
)

// In-place upgrade. A hop's pins record the object its programs were
// built from (the "object" pin). When this ccload's build differs, Attach
// on the hop's interface, or Upgrade, loads the new build with the hop's
// pinned maps in place of its own (its config, flows, queue model and
// counters, which carry on), and swaps each of its programs in with
// qdisc.ReplacePinned: a TCX link update, or a cls_bpf filter replaced in
// place; packets meet the old program or the new one, never neither. The
// steps, with their kill points:
//
//  1. load the new build on the pinned maps ("hop-upgrade-loaded");
//  2. swap the egress program, then the ingress one (ACK padding), each
//     with qdisc.ReplacePinned's own kill points, then
//     "hop-upgrade-<side>-swapped";
//  3. write Attach's config into the pinned config map, when it differs
//     ("hop-upgrade-configured");
//  4. update the record ("hop-upgrade-recorded").
//
// A kill before step 2 leaves the hop as it was. A kill within a clsact
// swap leaves two pins for one side, which Recover (and Detach) sort out
// with qdisc.RecoverReplace before anything else. A kill after a swap and
// before step 4 leaves a hop that runs the new build, on one side or
// both, under a record that names the old: harmless, since both builds
// share the maps, and the next Attach swaps the same build in again and
// fixes the record. A kill before step 3 keeps the old config, which the
// next Attach writes.
//
// When a pinned map is not compatible with the new build's (another
// type, key or value size, size or flags), the swap cannot keep it: the
// hop is detached and attached afresh, and the notes say so. Its counters
// and queue model then restart, and packets that cross the interface in
// between are forwarded without this hop's record.

// Upgrade swaps this ccload's build of the INT hop in for the one pinned
// on iface, an interface of the calling thread's network namespace, in
// place, keeping its config, queue model and counters. It does nothing to
// a hop that runs this build already, and fails when iface has no hop
// attached. The caller holds the pin root's lock.
func (l *Pins) Upgrade(iface string) (*Status, error) {
	if err := kernel.CheckCaps(); err != nil {
		return nil, err
	}
	ifi, err := qdisc.LookupInterface(iface)
	if err != nil {
		return nil, err
	}
	ns, err := pin.CurrentNetns()
	if err != nil {
		return nil, err
	}
	var keys []pin.IfaceKey
	if ifi != nil {
		if keys, err = l.findHops(ifi.Name, ifi.Index, ns); err != nil {
			return nil, err
		}
	}
	for _, k := range keys {
		st := l.readHop(k)
		if !st.Attached || k.Index != ifi.Index {
			continue
		}
		if !st.UpgradeAvailable {
			return &st, nil
		}
		return l.upgradeHop(k, nil, nil)
	}
	return nil, kernel.NewError(kernel.KindNotAttached, "attach one: ccload int hop --iface "+iface+" --rate RATE", nil,
		"no INT hop is attached to %s", iface)
}

// upgradeHop swaps this build in for the hop k runs (see above), and
// writes cfg's model into its config when cfg is not nil. notes go first
// in the status it returns.
func (l *Pins) upgradeHop(k pin.IfaceKey, cfg *Config, notes []string) (*Status, error) {
	dir := l.dir(k)
	iface := pin.IfaceNow(k)
	conf, err := ebpf.LoadPinnedMap(filepath.Join(dir, intHopMapHopConfig), nil)
	if err != nil {
		return nil, fmt.Errorf("open the INT hop's config: %w", err)
	}
	defer conf.Close()
	var cur intHopHopConfig
	if err := conf.Lookup(uint32(0), &cur); err != nil {
		return nil, fmt.Errorf("read the INT hop's config: %w", err)
	}
	curCfg := configFrom(cur)
	curCfg.Iface = iface
	if cfg != nil && cfg.ACKPadding != curCfg.ACKPadding {
		return nil, kernel.NewError(kernel.KindAlreadyAttached,
			fmt.Sprintf("remove it first (ccload int hop --iface %s --off), then attach it with the ACK padding you want", iface), nil,
			"the INT hop on %s is another build's, and an upgrade in place keeps its ACK padding (%v)", iface, curCfg.ACKPadding)
	}

	spec, err := loadIntHop()
	if err != nil {
		return nil, kernel.NewError(kernel.KindBadObject, "rebuild ccload", err, "read the embedded INT hop object")
	}
	pinned, incompatible, err := l.pinnedMaps(dir, spec)
	defer pin.CloseMaps(pinned)
	if err != nil {
		return nil, err
	}
	if incompatible != nil {
		want := curCfg
		if cfg != nil {
			want = *cfg
		}
		return l.reattach(k, want, incompatible, notes)
	}

	objs := new(intHopObjects)
	if err := spec.LoadAndAssign(objs, &ebpf.CollectionOptions{MapReplacements: pinned}); err != nil {
		return nil, kernel.LoadError("the new build of the INT hop", err)
	}
	defer objs.Close()
	pin.KillPoint("hop-upgrade-loaded")
	for _, p := range curCfg.programs(objs) {
		if err := qdisc.ReplacePinned(iface, p.dir, qdisc.SidePin(dir, p.dir), p.prog); err != nil {
			return nil, kernel.LoadError("the new build of the INT hop", fmt.Errorf("swap it in on %s %s: %w", iface, p.dir, err))
		}
		pin.KillPoint("hop-upgrade-" + p.dir.String() + "-swapped")
	}
	notes = append(notes, fmt.Sprintf("the INT hop on %s was upgraded in place to this ccload's build (object %s); its queue model and counters are kept", iface, l.object().Short()))
	if cfg != nil {
		code, err := cfg.check()
		if err != nil {
			return nil, err
		}
		if want := cfg.config(code); want != cur {
			if err := conf.Update(uint32(0), want, ebpf.UpdateExist); err != nil {
				return nil, fmt.Errorf("write the INT hop's config: %w", err)
			}
			notes = append(notes, "its model (rate, buffer, burst, ECN threshold) was updated")
		}
		if cfg.Method != qdisc.MethodAuto {
			if st := qdisc.InspectPinnedSides(iface, dir); st.Method != cfg.Method {
				notes = append(notes, fmt.Sprintf("it stays attached with %s, as it was: an upgrade in place keeps the attach method", st.Method))
			}
		}
		pin.KillPoint("hop-upgrade-configured")
	}
	if err := pin.ReplaceObject(filepath.Join(dir, pinObject), l.object()); err != nil {
		return nil, fmt.Errorf("record the new build of the INT hop (it runs; the next attach records it): %w", err)
	}
	pin.KillPoint("hop-upgrade-recorded")
	st := l.readHop(k)
	st.Notes = append(notes, st.Notes...)
	return &st, nil
}

// pinnedMaps opens the maps pinned in the hop directory dir, by their
// names, and checks each against its spec in spec. incompatible is the
// first error of a map that the new build cannot use; the maps opened
// are returned either way.
func (l *Pins) pinnedMaps(dir string, spec *ebpf.CollectionSpec) (maps map[string]*ebpf.Map, incompatible, err error) {
	pins := map[string]string{}
	for _, name := range []string{intHopMapHopConfig, intHopMapHopFlows, intHopMapHopQueue, intHopMapHopStats} {
		pins[name] = name
	}
	if maps, err = pin.OpenMaps(dir, pins); err != nil {
		return nil, nil, fmt.Errorf("open the INT hop's maps: %w", err)
	}
	return maps, pin.Incompatible(spec, maps), nil
}

// reattach detaches the hop k and attaches this build afresh with cfg:
// the upgrade when the new build cannot use the pinned maps.
func (l *Pins) reattach(k pin.IfaceKey, cfg Config, why error, notes []string) (*Status, error) {
	cfg.Iface = pin.IfaceNow(k)
	if cfg.Method == qdisc.MethodAuto {
		cfg.Method = qdisc.InspectPinnedSides(cfg.Iface, l.dir(k)).Method
	}
	if err := l.removeHop(k); err != nil {
		return nil, err
	}
	pin.KillPoint("hop-upgrade-removed")
	k.Name = cfg.Iface
	st, err := l.attachNew(cfg, k, notes)
	if err != nil {
		return nil, fmt.Errorf("attach the new build of the INT hop on %s after detaching the old one (it has no hop now; attach it again): %w", cfg.Iface, err)
	}
	st.Notes = append(st.Notes, fmt.Sprintf("the new build of the INT hop cannot use the pinned maps (%v): the hop was detached and attached afresh, so its queue model and counters restarted, and packets that crossed %s in between carry no record of this hop", why, cfg.Iface))
	return st, nil
}

// recoverReplace finishes or undoes, on each side of the hop pinned in
// dir on iface, a qdisc.ReplacePinned that a killed upgrade left.
func recoverReplace(iface, dir string) error {
	for _, side := range qdisc.Sides() {
		if _, err := qdisc.RecoverReplace(iface, side, qdisc.SidePin(dir, side)); err != nil {
			return fmt.Errorf("INT hop on %s: %w", iface, err)
		}
	}
	return nil
}
