package onramp

// In-place upgrades. Each pin set records the object it was built from
// (pin.WriteObject at <dir>/object): an interface's the tc object of
// bpf/onramp.c, the sockops program's the object of bpf/onramp_sockops.c.
// When Enable finds a running set of another object (or one from before
// the records), it loads this build's programs on the set's own maps, so
// that flows keep their state (the flow table with each flow's pause and
// β, the peers' histograms, the counters, the parameters, the sockets'
// storage), and swaps them in without detaching anything:
//
//   - the tc programs with qdisc.ReplacePinned: a TCX link is updated
//     (BPF_LINK_UPDATE), a cls_bpf filter gets the new program under the
//     same priority and handle;
//   - the sockops program with a cgroup link update (pin.UpdatePinnedLink).
//
// The record is replaced last. A kill between the steps leaves programs of
// both builds running on the same maps, which is a usable state (a side
// runs one build or the other, never neither), and the record still names
// the old object, so the next Enable does the swap again; the swaps are
// idempotent. When the new build's maps differ from the pinned ones
// (ebpf.ErrMapIncompatible), the swap cannot keep them: the set is built
// anew, with a gap that the notes describe.

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/ccload/ccload/clocksync"
	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
	"github.com/ccload/ccload/qdisc"
)

// object is the identity of this build's tc object.
func (o *OnRamp) object() pin.Object { return pin.ObjectOf(_OnrampBytes, o.salt) }

// sockopsObject is the identity of this build's sockops object.
func (o *OnRamp) sockopsObject() pin.Object { return pin.ObjectOf(_OnrampSockopsBytes, o.salt) }

// isCurrent reports whether the record in dir names want. A set without
// a record, or whose record cannot be read, is not current.
func isCurrent(dir string, want pin.Object) bool {
	cur, ok, err := pin.ReadObject(filepath.Join(dir, pinObject))
	return err == nil && ok && cur == want
}

// upgradeAvailable reports whether instance k or the sockops program runs
// another build than this one.
func (o *OnRamp) upgradeAvailable(k pin.IfaceKey) bool {
	if !isCurrent(o.dir(k), o.object()) {
		return true
	}
	return o.sockopsComplete() && !isCurrent(o.sockopsDir(), o.sockopsObject())
}

// upgradeTC swaps this build's tc programs in for those of instance k, an
// attached instance of the calling thread's network namespace, when they
// are another build's. reattach says that the new build cannot use the
// pinned maps, so that the instance must be built anew.
func (o *OnRamp) upgradeTC(k pin.IfaceKey) (reattach bool, notes []string, err error) {
	dir := o.dir(k)
	want := o.object()
	if isCurrent(dir, want) {
		return false, nil, nil
	}
	objs, err := o.loadOnPinned(dir)
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		return true, []string{fmt.Sprintf("this build's On-Ramp maps differ from those pinned on %s (%v): On-Ramp was attached anew, and its flows lost their state: flows paused then resumed at once, and each flow's β starts over", k.Name, err)}, nil
	}
	if err != nil {
		return false, nil, err
	}
	defer objs.Close()
	pin.KillPoint("onramp-upgrade-loaded")
	iface := pin.IfaceNow(k)
	for _, side := range qdisc.Sides() {
		if err := qdisc.ReplacePinned(iface, side, qdisc.SidePin(dir, side), objs.program(side)); err != nil {
			return false, nil, fmt.Errorf("upgrade On-Ramp's %s program on %s: %w", side, iface, err)
		}
		pin.KillPoint("onramp-upgrade-" + side.String() + "-swapped")
	}
	if err := pin.ReplaceObject(filepath.Join(dir, pinObject), want); err != nil {
		return false, nil, err
	}
	pin.KillPoint("onramp-upgrade-recorded")
	return false, []string{fmt.Sprintf("upgraded On-Ramp's tc programs on %s in place to object %s: the flows kept their state", iface, want.Short())}, nil
}

// loadOnPinned loads this build's tc programs on the maps pinned in dir,
// an interface's pin set of the calling thread's network namespace, on
// the namespace's clock map and on the shared maps. An error that wraps
// ebpf.ErrMapIncompatible says that this build's maps differ from those.
func (o *OnRamp) loadOnPinned(dir string) (*onrampObjects, error) {
	spec, err := loadOnramp()
	if err != nil {
		return nil, kernel.NewError(kernel.KindBadObject, "rebuild ccload", err, "read the embedded On-Ramp object")
	}
	names := map[string]string{}
	for name := range (&onrampObjects{}).pinned() {
		names[name] = name
	}
	pinned, err := pin.OpenMaps(dir, names)
	if err != nil {
		return nil, err
	}
	defer pin.CloseMaps(pinned)
	clock, err := clocksync.DataPathMap(o.host)
	if err != nil {
		return nil, err
	}
	pinned[onrampMapClockOffsets] = clock
	shared, err := o.acquireShared(spec)
	if err != nil {
		return nil, err
	}
	maps.Copy(pinned, shared) // closed with the others
	var objs onrampObjects
	err = spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: pinned})
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		return nil, err
	}
	if err != nil {
		return nil, kernel.LoadError("On-Ramp's tc programs", err)
	}
	return &objs, nil
}

// upgradeSockops swaps this build's sockops program in for the pinned one
// when that is another build's: the cgroup link stays, and the new
// program takes over the pinned prefixes and counters and the socket
// storage of the old one (which is not pinned: it is found through the
// attached program), so that live connections keep getting room for
// On-Ramp's options, and it shares the room map with the tc programs. When the maps differ, it detaches the old program
// and attaches the new one to the same cgroup instead: connections made
// before then get no more room for options until they close.
func (o *OnRamp) upgradeSockops() (notes []string, err error) {
	dir := o.sockopsDir()
	want := o.sockopsObject()
	if isCurrent(dir, want) {
		return nil, nil
	}
	linkPath := filepath.Join(dir, pinLink)
	pinned, err := pin.OpenMaps(dir, map[string]string{pinPeers4: onrampSockopsMapOnrampPeersV4,
		pinPeers6: onrampSockopsMapOnrampPeersV6, pinSockStats: onrampSockopsMapOnrampSockopsStats})
	if err != nil {
		return nil, err
	}
	defer pin.CloseMaps(pinned)
	lnk, err := link.LoadPinnedLink(linkPath, nil)
	if err != nil {
		return nil, fmt.Errorf("open On-Ramp's sockops link: %w", err)
	}
	info, err := lnk.Info()
	lnk.Close()
	if err != nil {
		return nil, fmt.Errorf("read On-Ramp's sockops link: %w", err)
	}
	sk, err := programMap(info.Program, onrampSockopsMapOnrampSk)
	if err != nil {
		return nil, fmt.Errorf("find the socket storage of On-Ramp's sockops program: %w", err)
	}
	pinned[onrampSockopsMapOnrampSk] = sk
	spec, err := loadOnrampSockops()
	if err != nil {
		return nil, kernel.NewError(kernel.KindBadObject, "rebuild ccload", err, "read the embedded On-Ramp sockops object")
	}
	shared, err := o.acquireShared(spec)
	if err != nil {
		return nil, err
	}
	maps.Copy(pinned, shared) // closed with the others
	var objs onrampSockopsObjects
	err = spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: pinned})
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		return o.reattachSockops(info, err)
	}
	if err != nil {
		return nil, kernel.LoadError("On-Ramp's sockops program", err)
	}
	defer objs.Close()
	pin.KillPoint("onramp-upgrade-sockops-loaded")
	if err := pin.UpdatePinnedLink(linkPath, objs.OnrampSockops); err != nil {
		return nil, fmt.Errorf("upgrade On-Ramp's sockops program: %w", err)
	}
	pin.KillPoint("onramp-upgrade-sockops-swapped")
	if err := pin.ReplaceObject(filepath.Join(dir, pinObject), want); err != nil {
		return nil, err
	}
	pin.KillPoint("onramp-upgrade-sockops-recorded")
	return []string{fmt.Sprintf("upgraded On-Ramp's sockops program in place to object %s: connections kept their state", want.Short())}, nil
}

// reattachSockops replaces the sockops program whose link info is old
// with this build's, on the same cgroup, when the new build cannot use
// the old maps (why).
func (o *OnRamp) reattachSockops(old *link.Info, why error) ([]string, error) {
	cgroup := ""
	if cg := old.Cgroup(); cg != nil {
		cgroup = kernel.CgroupPath(uint64(cg.CgroupId))
	}
	if err := o.removeSockops(); err != nil {
		return nil, err
	}
	if err := o.attachSockops(cgroup); err != nil {
		return nil, err
	}
	return []string{fmt.Sprintf("this build's On-Ramp sockops maps differ from those pinned (%v): its program was attached anew, and connections opened before get no room for On-Ramp's options, so no pauses, until they close", why)}, nil
}

// maxObjName is how much of a map's name the kernel keeps
// (BPF_OBJ_NAME_LEN less the NUL).
const maxObjName = 15

// programMap opens the map called name that program id uses.
func programMap(id ebpf.ProgramID, name string) (*ebpf.Map, error) {
	prog, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return nil, fmt.Errorf("open program %d: %w", id, err)
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		return nil, fmt.Errorf("read program %d: %w", id, err)
	}
	ids, ok := info.MapIDs()
	if !ok {
		return nil, fmt.Errorf("the kernel does not list the maps of program %d", id)
	}
	short := name[:min(len(name), maxObjName)]
	for _, mid := range ids {
		m, err := ebpf.NewMapFromID(mid)
		if err != nil {
			continue
		}
		if mi, err := m.Info(); err == nil && mi.Name == short {
			return m, nil
		}
		m.Close()
	}
	return nil, fmt.Errorf("program %d uses no map called %s", id, name)
}
