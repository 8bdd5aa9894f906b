package daemon

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
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

// The record is a pin record (pin.UpdateRecord) beside the pins it describes, holding the
// record as JSON, zero-padded.
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
	var buf []byte
	ok, err := pin.ReadRecord(recordPath(host), recordBytes, &buf)
	if err != nil {
		return o, fmt.Errorf("the daemon's ownership record: %w", err)
	}
	if i := slices.Index(buf, 0); i >= 0 {
		buf = buf[:i]
	}
	if !ok || len(buf) == 0 {
		return o, nil
	}
	if err := json.Unmarshal(buf, &o); err != nil {
		return o, fmt.Errorf("decode the daemon's ownership record %s: %w", recordPath(host), err)
	}
	return o, nil
}

// writeOwned replaces the record with o, creating and pinning it the
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
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	if err := pin.UpdateRecord(path, "ccload_owned", recordBytes, buf); err != nil {
		return fmt.Errorf("the daemon's ownership record: %w", err)
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
