package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/ccload/ccload/internal/kernel"
)

// Owned is what the daemon took charge of in its last reconcile: the
// things its config named then. A later config that no longer names one of
// them has it removed; anything not in Owned (made by the CLI, say) is
// never touched.
type Owned struct {
	CCs     []string `json:"ccs,omitempty"`
	Default string   `json:"default,omitempty"`
	INT     bool     `json:"int,omitempty"`
	Hops    []string `json:"hops,omitempty"`
	OnRamp  []string `json:"onramp,omitempty"`
}

// ownedOf is what d names.
func ownedOf(d *Desired) Owned {
	var o Owned
	for _, c := range d.CCs {
		o.CCs = append(o.CCs, c.Name)
	}
	o.Default = d.Default
	o.INT = d.INT != nil
	for _, h := range d.Hops {
		o.Hops = append(o.Hops, h.Iface)
	}
	for _, r := range d.OnRamp {
		o.OnRamp = append(o.OnRamp, r.Iface)
	}
	return o
}

// The record lives in bpffs, beside what it describes, so that it has the
// same lifetime: a reboot clears both, and a daemon in a container finds
// it through the same bind mount as the pins. It is one element of an
// array map holding the record as JSON, zero-padded.
const (
	recordDir   = "daemon"
	recordPin   = "owned"
	recordBytes = 16 << 10
)

func recordPath(host kernel.Host) string {
	return filepath.Join(host.PinRoot(), recordDir, recordPin)
}

// readOwned returns the record; none yet is an empty record.
func readOwned(host kernel.Host) (Owned, error) {
	var o Owned
	m, err := ebpf.LoadPinnedMap(recordPath(host), nil)
	if errors.Is(err, os.ErrNotExist) {
		return o, nil
	}
	if err != nil {
		return o, fmt.Errorf("open the daemon's ownership record: %w", err)
	}
	defer m.Close()
	buf := make([]byte, m.ValueSize())
	if err := m.Lookup(uint32(0), &buf); err != nil {
		return o, fmt.Errorf("read the daemon's ownership record: %w", err)
	}
	if i := slices.Index(buf, 0); i >= 0 {
		buf = buf[:i]
	}
	if len(buf) == 0 {
		return o, nil
	}
	if err := json.Unmarshal(buf, &o); err != nil {
		return o, fmt.Errorf("decode the daemon's ownership record %s: %w", recordPath(host), err)
	}
	return o, nil
}

// writeOwned replaces the record with o, creating and pinning the map the
// first time.
func writeOwned(host kernel.Host, o Owned) error {
	data, err := json.Marshal(o)
	if err != nil {
		return err
	}
	if len(data) >= recordBytes {
		return fmt.Errorf("the daemon's ownership record is %d bytes, more than %d: the config names too much", len(data), recordBytes)
	}
	buf := make([]byte, recordBytes)
	copy(buf, data)
	path := recordPath(host)
	m, err := ebpf.LoadPinnedMap(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
		}
		m, err = ebpf.NewMap(&ebpf.MapSpec{Name: "ccload_owned", Type: ebpf.Array, KeySize: 4, ValueSize: recordBytes, MaxEntries: 1})
		if err != nil {
			return fmt.Errorf("create the daemon's ownership record: %w", err)
		}
		if err := m.Pin(path); err != nil {
			m.Close()
			return fmt.Errorf("pin the daemon's ownership record: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("open the daemon's ownership record: %w", err)
	}
	defer m.Close()
	if err := m.Update(uint32(0), buf, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write the daemon's ownership record: %w", err)
	}
	return nil
}

// removeOwned deletes the record.
func removeOwned(host kernel.Host) error {
	dir := filepath.Join(host.PinRoot(), recordDir)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}
