package loader

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

const (
	sysctlAvailable = "net/ipv4/tcp_available_congestion_control"
	sysctlDefault   = "net/ipv4/tcp_congestion_control"
)

func readSysctl(procSys, name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(procSys, name))
	if err != nil {
		return "", fmt.Errorf("read sysctl %s: %w", name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func writeSysctl(procSys, name, value string) error {
	if err := os.WriteFile(filepath.Join(procSys, name), []byte(value), 0o644); err != nil {
		return fmt.Errorf("write sysctl %s=%s: %w", name, value, err)
	}
	return nil
}

// registeredCCs lists the congestion controls the kernel knows now.
func registeredCCs(procSys string) ([]string, error) {
	s, err := readSysctl(procSys, sysctlAvailable)
	if err != nil {
		return nil, err
	}
	return strings.Fields(s), nil
}

func isRegistered(procSys, name string) (bool, error) {
	ccs, err := registeredCCs(procSys)
	if err != nil {
		return false, err
	}
	return slices.Contains(ccs, name), nil
}
