package kernel

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Capabilities ccload needs: loading struct_ops programs needs CAP_BPF and
// CAP_PERFMON (or CAP_SYS_ADMIN, which implies both on kernels before 5.8
// and still grants them), and changing the netns default CC needs
// CAP_NET_ADMIN.
var requiredCaps = []struct {
	name string
	bit  uint
}{
	{"CAP_BPF", unix.CAP_BPF},
	{"CAP_PERFMON", unix.CAP_PERFMON},
	{"CAP_NET_ADMIN", unix.CAP_NET_ADMIN},
}

// effectiveCaps returns the effective capability set of this thread.
func effectiveCaps() (uint64, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, fmt.Errorf("capget: %w", err)
	}
	return uint64(data[0].Effective) | uint64(data[1].Effective)<<32, nil
}

// CheckCaps returns a KindMissingCaps error naming every missing capability.
func CheckCaps() error {
	eff, err := effectiveCaps()
	if err != nil {
		return NewError(KindMissingCaps, "run ccload as root", err, "cannot read capabilities")
	}
	has := func(bit uint) bool { return eff&(1<<bit) != 0 }
	var missing []string
	for _, c := range requiredCaps {
		if has(c.bit) {
			continue
		}
		if c.bit != unix.CAP_NET_ADMIN && has(unix.CAP_SYS_ADMIN) {
			continue
		}
		missing = append(missing, c.name)
	}
	if len(missing) == 0 {
		return nil
	}
	return NewError(KindMissingCaps,
		"run as root (sudo ccload ...), or grant the capabilities: setcap cap_bpf,cap_perfmon,cap_net_admin+ep $(command -v ccload); in Kubernetes add them to securityContext.capabilities.add",
		nil, "missing %s", strings.Join(missing, ", "))
}
