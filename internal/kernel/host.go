package kernel

import (
	"os"
	"path/filepath"
)

// Host names the kernel interfaces ccload uses. Tests point them
// elsewhere to exercise error paths and to keep their pins apart;
// everything else uses DefaultHost.
type Host struct {
	BTFPath string // kernel BTF, normally /sys/kernel/btf/vmlinux
	BPFFS   string // bpffs mount point, normally /sys/fs/bpf
	PinDir  string // ccload's directory below BPFFS, normally "ccload"
	ProcSys string // /proc/sys of the network namespace to act in
}

// DefaultHost returns the standard locations.
func DefaultHost() Host {
	return Host{
		BTFPath: "/sys/kernel/btf/vmlinux",
		BPFFS:   "/sys/fs/bpf",
		PinDir:  "ccload",
		ProcSys: "/proc/sys",
	}
}

// IsDefaultBPFFS reports whether h pins on the system's bpffs, the one
// ccload may mount when nothing is mounted there.
func (h Host) IsDefaultBPFFS() bool { return h.BPFFS == DefaultHost().BPFFS }

// PinRoot is the directory that holds all of ccload's pins.
func (h Host) PinRoot() string { return filepath.Join(h.BPFFS, h.PinDir) }

// Exists reports whether path exists (a pin, a directory, anything).
func Exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
