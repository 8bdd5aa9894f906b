// Package sharedmaps owns the BPF maps that programs of separate objects,
// attached by separate commands, must share: one object fills a map that
// another reads on the same socket. It exists because these maps belong
// to no single one of their users, and must outlive whichever of them
// came first:
//
//   - int_store (struct int_sk, bpf/include/int.h): the INT sockops program
//     leaves each socket's newest echoed INT records there, and powertcp
//     and hpcc read them on the same ACK;
//   - onramp_holds (struct onramp_holds, bpf/include/onramp.h): On-Ramp's
//     tc egress marks there how long it held a socket's segments back, and
//     θ-PowerTCP with onramp_holds=1 takes its RTT samples without those
//     holds;
//   - onramp_room (struct onramp_room, bpf/include/onramp.h): On-Ramp's
//     tc egress writes there when a quiet flow's data next needs room for
//     a STAMP, and its sockops program, loaded by another path and
//     upgraded on its own, reserves the room only then.
//
// Every user of a map must get the same map, so each is pinned at
// <pin root>/shared/<map name> while anything holds it. Each holder (a CC,
// the INT sockops program, On-Ramp) is recorded as an empty directory
// <pin root>/shared/holders/<name>; the maps are unpinned when the last
// holder is released, so a later user starts from fresh maps. A holder
// holds every shared map its objects declare, under one name.
package sharedmaps

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
)

// The shared maps, by the name every object that declares them gives them.
const (
	INTStore    = "int_store"
	OnRampHolds = "onramp_holds"
	OnRampRoom  = "onramp_room"
)

// Names are the maps a Store shares.
func Names() []string { return []string{INTStore, OnRampHolds, OnRampRoom} }

// what names a map for users, in errors.
func what(name string) string {
	switch name {
	case INTStore:
		return "the INT store"
	case OnRampHolds:
		return "On-Ramp's holds map"
	case OnRampRoom:
		return "On-Ramp's room map"
	}
	return name
}

// Store is the shared maps of one pin root. It implements
// loader.SharedMaps.
type Store struct {
	host kernel.Host
}

// The pins, below the pin root.
const (
	sharedDir  = "shared"
	holdersDir = "holders"
)

// New returns the shared maps of host's pin root.
func New(host kernel.Host) *Store { return &Store{host: host} }

// Dir is the directory the maps and their holders are pinned in.
func (s *Store) Dir() string { return filepath.Join(s.host.PinRoot(), sharedDir) }

// PinPath is where the shared map name is pinned while anything holds it.
func (s *Store) PinPath(name string) string { return filepath.Join(s.Dir(), name) }

// Acquire returns the shared map that spec declares (by its name),
// creating and pinning it from spec when nothing holds it yet, and
// records holder as one of the holders of the shared maps.
func (s *Store) Acquire(holder string, spec *ebpf.MapSpec) (*ebpf.Map, error) {
	if spec == nil || !slices.Contains(Names(), spec.Name) {
		return nil, kernel.NewError(kernel.KindBadObject, "rebuild ccload", nil, "the object of %s declares no map that ccload shares", holder)
	}
	path := s.PinPath(spec.Name)
	m, err := ebpf.LoadPinnedMap(path, nil)
	switch {
	case err == nil:
		if m.Type() != spec.Type || m.ValueSize() != spec.ValueSize {
			m.Close()
			return nil, kernel.NewError(kernel.KindVersionMismatch,
				"detach every user of it (ccload int disable; ccload onramp disable; ccload detach powertcp hpcc theta_powertcp) and try again",
				nil, "the pinned %s (%s) was made by another ccload version", path, what(spec.Name))
		}
	case errors.Is(err, os.ErrNotExist):
		if m, err = ebpf.NewMap(spec); err != nil {
			return nil, kernel.LoadError(what(spec.Name), err)
		}
		if err := os.MkdirAll(s.Dir(), 0o700); err != nil {
			m.Close()
			return nil, fmt.Errorf("create %s: %w", s.Dir(), err)
		}
		if err := m.Pin(path); err != nil {
			m.Close()
			return nil, fmt.Errorf("pin %s at %s: %w", what(spec.Name), path, err)
		}
		pin.KillPoint(spec.Name + "-created") // one per map: a CC may take two
	default:
		return nil, fmt.Errorf("open %s %s: %w", what(spec.Name), path, err)
	}
	if err := os.MkdirAll(filepath.Join(s.Dir(), holdersDir, holder), 0o700); err != nil {
		m.Close()
		return nil, errors.Join(fmt.Errorf("record %s as a holder of the shared maps: %w", holder, err), s.Release(holder))
	}
	return m, nil
}

// Release drops holder, and unpins the shared maps once no holder is left.
// Releasing a holder that holds nothing is not an error.
func (s *Store) Release(holder string) error {
	holders := filepath.Join(s.Dir(), holdersDir)
	if err := os.RemoveAll(filepath.Join(holders, holder)); err != nil {
		return fmt.Errorf("drop %s from the shared maps' holders: %w", holder, err)
	}
	pin.KillPoint("shared-released")
	return s.unpinIfUnheld()
}

// unpinIfUnheld unpins the shared maps when no holder is left.
func (s *Store) unpinIfUnheld() error {
	holders := filepath.Join(s.Dir(), holdersDir)
	left, err := os.ReadDir(holders)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("list the shared maps' holders: %w", err)
	}
	if len(left) > 0 {
		return nil
	}
	if err := os.RemoveAll(s.Dir()); err != nil {
		return fmt.Errorf("unpin the shared maps: %w", err)
	}
	return nil
}

// Holders lists who holds the shared maps now.
func (s *Store) Holders() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(s.Dir(), holdersDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the shared maps' holders: %w", err)
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil
}

// Sweep drops every holder for which holds reports false, as Release
// would, and unpins the shared maps when no holder is left, also when a command
// died between pinning a map and recording its holder. It returns the
// holders it dropped. Only the next command's recovery calls it, under
// pin.Lock: a holder that is still being attached would look dead.
func (s *Store) Sweep(holds func(holder string) bool) (dropped []string, err error) {
	if !kernel.Exists(s.Dir()) {
		return nil, nil
	}
	holders, err := s.Holders()
	if err != nil {
		return nil, err
	}
	for _, h := range holders {
		if holds(h) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(s.Dir(), holdersDir, h)); err != nil {
			return dropped, fmt.Errorf("drop %s from the shared maps' holders: %w", h, err)
		}
		dropped = append(dropped, h)
	}
	return dropped, s.unpinIfUnheld()
}
