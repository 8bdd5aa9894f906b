package pin

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// UpdatePinnedLink swaps prog in for the program of the link pinned at
// path (BPF_LINK_UPDATE): the link, its ID and its pin stay, and the hook
// runs the old program or the new one, never neither. It works for every
// link type whose kernel side supports updates: cgroup links (sockops),
// TCX links, and others; prog must have the link's program type and
// attach type. A missing path yields an error that wraps os.ErrNotExist.
func UpdatePinnedLink(path string, prog *ebpf.Program) error {
	lnk, err := link.LoadPinnedLink(path, nil)
	if err != nil {
		return fmt.Errorf("open the link pinned at %s: %w", path, err)
	}
	defer lnk.Close()
	if err := lnk.Update(prog); err != nil {
		return fmt.Errorf("update the link pinned at %s to program %s: %w", path, prog, err)
	}
	return nil
}

// OpenMaps opens the maps pinned in dir that a new build of a pin set's
// object is to reuse: pins maps each pin's file name to the name of the
// map in the object, and the result is keyed by the latter, ready for
// ebpf.CollectionOptions.MapReplacements. On error nothing stays open;
// otherwise the caller closes the maps (CloseMaps).
func OpenMaps(dir string, pins map[string]string) (map[string]*ebpf.Map, error) {
	maps := map[string]*ebpf.Map{}
	for file, name := range pins {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, file), nil)
		if err != nil {
			CloseMaps(maps)
			return nil, fmt.Errorf("open the pinned map %s: %w", filepath.Join(dir, file), err)
		}
		maps[name] = m
	}
	return maps, nil
}

// CloseMaps closes every map of maps.
func CloseMaps(maps map[string]*ebpf.Map) {
	for _, m := range maps {
		m.Close()
	}
}

// Incompatible says why spec, a new build's objects, cannot load on the
// pinned maps: a map it lacks, or one whose type, sizes or flags differ
// (ebpf.MapSpec.Compatible). It returns nil when all of them fit.
func Incompatible(spec *ebpf.CollectionSpec, maps map[string]*ebpf.Map) error {
	var why error
	for name, m := range maps {
		ms := spec.Maps[name]
		if ms == nil {
			why = errors.Join(why, fmt.Errorf("the new build has no map %s", name))
		} else if err := ms.Compatible(m); err != nil {
			why = errors.Join(why, fmt.Errorf("map %s: %w", name, err))
		}
	}
	return why
}
