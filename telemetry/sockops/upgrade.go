package sockops

import (
	"fmt"
	"net/netip"
	"path/filepath"

	"github.com/cilium/ebpf"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
)

// In-place upgrade. INT's pins record the object its program was built
// from (the "object" pin, pin.WriteObject). When this ccload's build
// differs, Enable and Upgrade load the new build with the pinned maps in
// place of its own (the config, the peer tries, the counters, and the INT
// store, which keeps its identity for the CCs that share it), and swap
// its program in on the pinned cgroup link (BPF_LINK_UPDATE): every
// socket's next sockops callback runs the new program, and no segment
// goes untagged. Then the record is updated. The steps, with their kill
// points:
//
//  1. load the new build on the pinned maps ("int-upgrade-loaded");
//  2. update the link ("int-upgrade-swapped");
//  3. update the record ("int-upgrade-recorded").
//
// Nothing is pinned before step 3, so a kill before step 2 leaves INT as
// it was. A kill between steps 2 and 3 leaves the new program running
// under a record that names the old build: harmless, since the maps are
// the same, and the next Enable or Upgrade swaps the same build in again
// and fixes the record, so Recover has nothing to do for it.
//
// When a pinned map is not compatible with the new build's (another
// type, key or value size, size or flags), the swap cannot keep it: INT
// is disabled and enabled afresh with the same settings, and the notes
// say so. Its counters then restart; segments sent in the moment between
// carry no INT option, and the INT store, which other holders keep, is
// not touched.

// UpgradeAvailable reports whether INT is enabled with a program built
// from another object than this ccload's (or one whose pins record none).
func (n *INT) UpgradeAvailable() (bool, error) {
	if !kernel.Exists(filepath.Join(n.dir(), pinLink)) {
		return false, nil
	}
	obj, known, err := pin.ReadObject(filepath.Join(n.dir(), pinObject))
	if err != nil {
		return false, err
	}
	return !known || obj != n.object(), nil
}

// Upgrade swaps this ccload's build of the INT sockops program in for the
// one attached, in place, keeping INT's settings, counters and store. It
// does nothing when the attached program is already this build, and fails
// when INT is not enabled. The caller holds the pin root's lock.
func (n *INT) Upgrade() (*Status, error) {
	if err := kernel.CheckCaps(); err != nil {
		return nil, err
	}
	if !kernel.Exists(filepath.Join(n.dir(), pinLink)) {
		return nil, kernel.NewError(kernel.KindNotAttached, "enable it: ccload int enable --peers PREFIXES", nil, "INT is not enabled")
	}
	notes, err := n.upgrade(nil)
	if err != nil {
		return nil, err
	}
	st, err := n.Status()
	if err != nil {
		return nil, err
	}
	st.Notes = append(notes, st.Notes...)
	return st, nil
}

// upgrade swaps this build in when INT runs another (see above). cfg is
// the configuration to enable afresh with when the maps are not
// compatible; nil keeps the one pinned. It returns notes for the user.
func (n *INT) upgrade(cfg *Config) ([]string, error) {
	due, err := n.UpgradeAvailable()
	if err != nil || !due {
		return nil, err
	}
	spec, err := loadIntSockops()
	if err != nil {
		return nil, kernel.NewError(kernel.KindBadObject, "rebuild ccload", err, "read the embedded INT sockops object")
	}
	pinned, incompatible, err := n.pinnedMaps(spec)
	defer pin.CloseMaps(pinned)
	if err != nil {
		return nil, err
	}
	if incompatible != nil {
		return n.reenable(cfg, incompatible)
	}

	// The store keeps its identity: the CCs that read INT hold it too.
	store, err := n.store.Acquire(storeHolderID, spec.Maps[intSockopsMapIntStore])
	if err != nil {
		return nil, err
	}
	defer store.Close()
	pinned[intSockopsMapIntStore] = store
	var objs intSockopsObjects
	if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: pinned}); err != nil {
		return nil, kernel.LoadError("the new build of the INT sockops program", err)
	}
	defer objs.Close()
	pin.KillPoint("int-upgrade-loaded")
	if err := pin.UpdatePinnedLink(filepath.Join(n.dir(), pinLink), objs.IntSockops); err != nil {
		return nil, kernel.LoadError("the new build of the INT sockops program", fmt.Errorf("swap it in: %w", err))
	}
	pin.KillPoint("int-upgrade-swapped")
	if err := pin.ReplaceObject(filepath.Join(n.dir(), pinObject), n.object()); err != nil {
		return nil, fmt.Errorf("record the new build of the INT sockops program (it runs; the next enable records it): %w", err)
	}
	pin.KillPoint("int-upgrade-recorded")
	return []string{"the INT sockops program was upgraded in place to this ccload's build (object " + n.object().Short() + "); its settings, counters and store are kept"}, nil
}

// pinnedMaps opens INT's pinned maps under the names of spec's maps, and
// checks each against its spec. incompatible is the first error of a map
// that the new build cannot use; the maps opened are returned either way.
func (n *INT) pinnedMaps(spec *ebpf.CollectionSpec) (maps map[string]*ebpf.Map, incompatible, err error) {
	maps, err = pin.OpenMaps(n.dir(), map[string]string{pinConfig: intSockopsMapIntConfig, pinPeers4: intSockopsMapIntPeersV4,
		pinPeers6: intSockopsMapIntPeersV6, pinStats: intSockopsMapIntStats})
	if err != nil {
		return nil, nil, fmt.Errorf("open INT's maps: %w", err)
	}
	return maps, pin.Incompatible(spec, maps), nil
}

// reenable disables INT and enables it again with cfg, or with the
// settings pinned when cfg is nil: the upgrade when the new build cannot
// use the pinned maps.
func (n *INT) reenable(cfg *Config, why error) ([]string, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	} else {
		st, err := n.Status()
		if err != nil {
			return nil, err
		}
		c = Config{Cgroup: st.Cgroup, Every: st.Every, TSOOnly: st.TSOOnly, Slots: st.Slots}
		for _, p := range st.Peers {
			pfx, err := netip.ParsePrefix(p)
			if err != nil {
				return nil, fmt.Errorf("read the pinned peer %q: %w", p, err)
			}
			c.Peers = append(c.Peers, pfx)
		}
		if err := c.normalize(); err != nil {
			return nil, err
		}
	}
	if err := n.remove(); err != nil {
		return nil, err
	}
	pin.KillPoint("int-upgrade-removed")
	if err := n.attach(c); err != nil {
		return nil, fmt.Errorf("enable the new build of INT after disabling the old one (INT is disabled now; enable it again): %w", err)
	}
	return []string{fmt.Sprintf("the new build of the INT sockops program cannot use the pinned maps (%v): INT was disabled and enabled afresh, so its counters restarted, and segments sent in between carried no INT option", why)}, nil
}
