package pin

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
)

// A record is a small value that lives exactly as long as the pins beside
// it: a one-entry array map pinned in bpffs, so that a reboot clears both
// and a process in a container finds it through the same mount as the
// pins. The object a pin set was built from (Object), a CC's generation
// and the daemon's ownership record are records.

// recordKey is the key of a record's one entry.
const recordKey = uint32(0)

// newRecord creates an unpinned record map called name, of size bytes,
// holding value (anything cilium/ebpf marshals to size bytes).
func newRecord(name string, size uint32, value any) (*ebpf.Map, error) {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: name, Type: ebpf.Array, KeySize: 4, ValueSize: size, MaxEntries: 1})
	if err != nil {
		return nil, fmt.Errorf("create the record %s: %w", name, err)
	}
	if err := m.Update(recordKey, value, ebpf.UpdateAny); err != nil {
		m.Close()
		return nil, fmt.Errorf("write the record %s: %w", name, err)
	}
	return m, nil
}

// PinRecord creates a record called name (the map's name, as bpftool
// shows it) of size bytes holding value, and pins it at path, a new file
// on a bpf filesystem (in a Stage, or in a pin set's directory).
func PinRecord(path, name string, size uint32, value any) error {
	m, err := newRecord(name, size, value)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := m.Pin(path); err != nil {
		return fmt.Errorf("pin the record %s at %s: %w", name, path, err)
	}
	return nil
}

// openRecord opens the record pinned at path and checks that it is a
// record of size bytes. A missing pin is an error wrapping
// os.ErrNotExist.
func openRecord(path string, size uint32) (*ebpf.Map, error) {
	m, err := ebpf.LoadPinnedMap(path, nil)
	if err != nil {
		return nil, err
	}
	if m.Type() != ebpf.Array || m.KeySize() != 4 || m.ValueSize() != size || m.MaxEntries() != 1 {
		m.Close()
		return nil, fmt.Errorf("%s is not a ccload record of %d bytes", path, size)
	}
	return m, nil
}

// ReadRecord reads the record of size bytes pinned at path into value (a
// pointer). It returns false, and no error, when nothing is pinned there.
func ReadRecord(path string, size uint32, value any) (bool, error) {
	m, err := openRecord(path, size)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open the record %s: %w", path, err)
	}
	defer m.Close()
	if err := m.Lookup(recordKey, value); err != nil {
		return false, fmt.Errorf("read the record %s: %w", path, err)
	}
	return true, nil
}

// UpdateRecord makes the record of size bytes pinned at path hold value:
// it updates it in place, or pins a new one, called name, when path has
// none. The caller holds the pin root's Lock: a reader that does not may
// see a record half written.
func UpdateRecord(path, name string, size uint32, value any) error {
	m, err := openRecord(path, size)
	if errors.Is(err, os.ErrNotExist) {
		return PinRecord(path, name, size, value)
	}
	if err != nil {
		return fmt.Errorf("open the record %s: %w", path, err)
	}
	defer m.Close()
	if err := m.Update(recordKey, value, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("update the record %s: %w", path, err)
	}
	return nil
}
