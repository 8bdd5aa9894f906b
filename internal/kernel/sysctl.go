package kernel

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ReadSysctl returns the value of the sysctl name (as a path below
// procSys, e.g. net/ipv4/tcp_congestion_control), trimmed.
func ReadSysctl(procSys, name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(procSys, name))
	if err != nil {
		return "", fmt.Errorf("read sysctl %s: %w", name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// WriteSysctl sets the sysctl name below procSys to value.
func WriteSysctl(procSys, name, value string) error {
	if err := os.WriteFile(filepath.Join(procSys, name), []byte(value), 0o644); err != nil {
		return fmt.Errorf("write sysctl %s=%s: %w", name, value, err)
	}
	return nil
}
