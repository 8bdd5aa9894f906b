package sockops

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
)

// Store is the INT store: the BPF_MAP_TYPE_SK_STORAGE map (struct int_sk
// of bpf/include/int.h) where the sockops program leaves each socket's
// newest echoed INT records, and where powertcp and hpcc read them on the
// same ACK. Every program that uses it must get the same map, so it is
// pinned at <pin root>/shared/int_store while anything holds it.
//
// Each holder (the sockops program, each CC that reads INT) is recorded as
// an empty directory <pin root>/shared/holders/<name>; the map is unpinned
// when the last one is released, so a later user starts from a fresh map.
// Store implements loader.SharedMaps.
type Store struct {
	host kernel.Host
}

// The store's pins, below the pin root.
const (
	sharedDir  = "shared"
	storePin   = intSockopsMapIntStore // the map's own name
	holdersDir = "holders"
)

// NewStore returns the INT store of host's pin root.
func NewStore(host kernel.Host) *Store { return &Store{host: host} }

func (s *Store) dir() string { return filepath.Join(s.host.PinRoot(), sharedDir) }

// Acquire returns the store, creating and pinning it from spec when
// nothing holds it yet, and records holder as one of its holders.
func (s *Store) Acquire(holder string, spec *ebpf.MapSpec) (*ebpf.Map, error) {
	if spec == nil {
		return nil, kernel.NewError(kernel.KindBadObject, "rebuild ccload", nil, "the object of %s has no INT store", holder)
	}
	path := filepath.Join(s.dir(), storePin)
	m, err := ebpf.LoadPinnedMap(path, nil)
	switch {
	case err == nil:
		if m.Type() != spec.Type || m.ValueSize() != spec.ValueSize {
			m.Close()
			return nil, kernel.NewError(kernel.KindVersionMismatch,
				"detach every INT user (ccload int disable; ccload detach powertcp hpcc) and try again",
				nil, "the pinned %s was made by another ccload version", path)
		}
	case errors.Is(err, os.ErrNotExist):
		if m, err = ebpf.NewMap(spec); err != nil {
			return nil, kernel.LoadError("the INT store", err)
		}
		if err := os.MkdirAll(s.dir(), 0o700); err != nil {
			m.Close()
			return nil, fmt.Errorf("create %s: %w", s.dir(), err)
		}
		if err := m.Pin(path); err != nil {
			m.Close()
			return nil, fmt.Errorf("pin the INT store at %s: %w", path, err)
		}
		pin.KillPoint("int-store-created")
	default:
		return nil, fmt.Errorf("open the INT store %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Join(s.dir(), holdersDir, holder), 0o700); err != nil {
		m.Close()
		return nil, errors.Join(fmt.Errorf("record %s as a holder of the INT store: %w", holder, err), s.Release(holder))
	}
	return m, nil
}

// Release drops holder, and unpins the store once no holder is left.
// Releasing a holder that holds nothing is not an error.
func (s *Store) Release(holder string) error {
	holders := filepath.Join(s.dir(), holdersDir)
	if err := os.RemoveAll(filepath.Join(holders, holder)); err != nil {
		return fmt.Errorf("drop %s from the INT store's holders: %w", holder, err)
	}
	pin.KillPoint("int-store-released")
	return s.unpinIfUnheld()
}

// unpinIfUnheld unpins the store when no holder is left.
func (s *Store) unpinIfUnheld() error {
	holders := filepath.Join(s.dir(), holdersDir)
	left, err := os.ReadDir(holders)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("list the INT store's holders: %w", err)
	}
	if len(left) > 0 {
		return nil
	}
	if err := os.RemoveAll(s.dir()); err != nil {
		return fmt.Errorf("unpin the INT store: %w", err)
	}
	return nil
}

// Holders lists who holds the store now.
func (s *Store) Holders() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(s.dir(), holdersDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the INT store's holders: %w", err)
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil
}

// Sweep drops every holder for which holds reports false, as Release
// would, and unpins the store when no holder is left, also when a command
// died between pinning the store and recording its holder. It returns the
// holders it dropped. Only the next command's recovery calls it, under
// pin.Lock: a holder that is still being attached would look dead.
func (s *Store) Sweep(holds func(holder string) bool) (dropped []string, err error) {
	if !kernel.Exists(s.dir()) {
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
		if err := os.RemoveAll(filepath.Join(s.dir(), holdersDir, h)); err != nil {
			return dropped, fmt.Errorf("drop %s from the INT store's holders: %w", h, err)
		}
		dropped = append(dropped, h)
	}
	return dropped, s.unpinIfUnheld()
}
