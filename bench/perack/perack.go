// Package perack holds what the bench needs to measure the per-ACK cost of
// ccload's congestion controls honestly: a null CC, whose callbacks return
// at once, registered only while the bench runs a flow through it. Its
// programs' run time under the kernel's BPF statistics is the floor that
// every struct_ops program pays per run (the call and the statistics' own
// clock reads); the bench reports each CC's cost above it. It is a package
// of its own, not a loader CC, so that users never see it among the CCs
// they can attach.
package perack

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/ccload/ccload/internal/kernel"
)

// NullName is the null CC's name in the kernel, as sockets select it.
const NullName = "ccload_null"

// NullProgramPrefix begins the names of the null CC's programs, as the
// kernel's program info reports them.
const NullProgramPrefix = "null_"

// NullCC is the null congestion control while it is registered.
type NullCC struct {
	coll *ebpf.Collection
	link link.Link
}

// RegisterNull registers the null CC with the kernel until Close. It needs
// struct_ops links (Linux 6.4), and fails, naming the fix, when a CC of the
// same name is registered already.
func RegisterNull() (_ *NullCC, err error) {
	host := kernel.DefaultHost()
	avail, err := kernel.ReadSysctl(host.ProcSys, "net/ipv4/tcp_available_congestion_control")
	if err != nil {
		return nil, fmt.Errorf("register %s: %w", NullName, err)
	}
	if slices.Contains(strings.Fields(avail), NullName) {
		return nil, fmt.Errorf("register %s: a CC of that name is registered already: another bench is measuring its floor, "+
			"or one was killed before it could unregister it; it goes away when its owner exits (bpftool struct_ops list shows it)", NullName)
	}
	spec, err := loadNull()
	if err != nil {
		return nil, fmt.Errorf("register %s: read its object: %w", NullName, err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, fmt.Errorf("register %s: %w", NullName, kernel.LoadError(NullName, err))
	}
	defer func() {
		if err != nil {
			coll.Close()
		}
	}()
	l, err := link.AttachStructOps(link.StructOpsOptions{Map: coll.Maps[nullMapCcloadNull]})
	if err != nil {
		return nil, fmt.Errorf("register %s (needs struct_ops links, Linux 6.4): %w", NullName, err)
	}
	return &NullCC{coll: coll, link: l}, nil
}

// Close unregisters the null CC. Sockets still using it keep it until they
// close.
func (n *NullCC) Close() error {
	return errors.Join(n.link.Close(), func() error { n.coll.Close(); return nil }())
}
