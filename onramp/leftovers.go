package onramp

import (
	"strings"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/qdisc"
)

// ProgramsAlive lists the kernel's BPF programs named like On-Ramp's
// (onramp_egress, onramp_ingress, onramp_sockops), for checks that disable
// left nothing running. The kernel frees a program some time after its
// last reference goes, so a caller polls.
func ProgramsAlive() []string {
	var names []string
	// A walk that fails lists what it found: the callers poll.
	_ = kernel.WalkPrograms(func(_ ebpf.ProgramID, _ *ebpf.Program, info *ebpf.ProgramInfo) bool {
		if strings.HasPrefix(info.Name, "onramp_") {
			names = append(names, info.Name)
		}
		return true
	})
	return names
}

// PrepareSender gives iface, an interface of the calling thread's network
// namespace, what On-Ramp's pauses need and what a comparison without
// On-Ramp must share: an fq root with options opts (qdisc.EnsureFQRoot,
// refusing a foreign root; an fq root already there keeps its own
// options) and a GSO size of at most gsoMaxSize bytes, which bounds what a
// flow keeps in fq and so what a pause cannot hold (docs/onramp.md).
func PrepareSender(iface string, gsoMaxSize int, opts qdisc.FQConfig) error {
	if _, err := qdisc.EnsureFQRoot(iface, opts, false); err != nil {
		return err
	}
	l, err := netlink.LinkByName(iface)
	if err != nil {
		return err
	}
	return netlink.LinkSetGSOMaxSize(l, gsoMaxSize)
}
