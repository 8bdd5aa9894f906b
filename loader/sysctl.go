package loader

import (
	"slices"
	"strings"

	"github.com/ccload/ccload/internal/kernel"
)

// The sysctls of TCP congestion control, below /proc/sys.
const (
	sysctlAvailable = "net/ipv4/tcp_available_congestion_control"
	sysctlDefault   = "net/ipv4/tcp_congestion_control"
)

// registeredCCs lists the congestion controls the kernel knows now.
func registeredCCs(procSys string) ([]string, error) {
	s, err := kernel.ReadSysctl(procSys, sysctlAvailable)
	if err != nil {
		return nil, kernel.NewError(kernel.KindSysctl, "ccload needs /proc/sys of the network namespace it acts in", err,
			"read the registered congestion controls")
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
