package bench

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/qdisc"
)

// The floor programs' names, as the BPF statistics report them
// (OnRampRun.BPF). They do not start with onrampProgramPrefix: they are
// not On-Ramp's, and On-Ramp's share of the CPUs leaves them out.
const (
	tcFloorName      = "tc_floor"
	sockopsFloorName = "sockops_floor"
)

// tcFloorPriority is the floor's cls_bpf priority with clsact: lower than
// every ccload filter's (the clock agent's scrub, the INT hop's, On-Ramp's
// onramp.Priority), so that it runs first, as it does on TCX by being
// attached before On-Ramp.
const tcFloorPriority = qdisc.DefaultPriority - 0x0e

// bpfFloors are programs that do nothing, attached where On-Ramp's
// programs run while the BPF statistics time the runs with On-Ramp
// (OnRampConfig.BPFCosts): a tc program at every hook of On-Ramp's tc
// programs (both sides of each interface On-Ramp is enabled on), and a
// sockops program on the cgroup On-Ramp's sockops program is attached to,
// which the kernel runs for the same callbacks. The tc program returns
// TC_ACT_UNSPEC, so the programs after it run. Their ns per run is what a
// run costs there, on that kernel and machine, before a program does
// anything: the hook's dispatch of the run and the statistics' own clock
// reads. On-Ramp's programs' ns per run are read against them
// (OnRampCounters.TCFloorNsPerRun, SockopsFloorNsPerRun).
type bpfFloors struct {
	tc, sockops *ebpf.Program
	atts        []*qdisc.Attachment
	cgroup      link.Link
}

// newBPFFloors loads the floor programs.
func newBPFFloors() (*bpfFloors, error) {
	tc, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: tcFloorName, Type: ebpf.SchedCLS, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()}})
	if err != nil {
		return nil, fmt.Errorf("load the tc floor program: %w", err)
	}
	sockops, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: sockopsFloorName, Type: ebpf.SockOps, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Return()}})
	if err != nil {
		tc.Close()
		return nil, fmt.Errorf("load the sockops floor program: %w", err)
	}
	return &bpfFloors{tc: tc, sockops: sockops}, nil
}

// attach attaches the tc floor to both sides of every place, before
// On-Ramp is enabled there, and the sockops floor to the cgroup v2 root,
// where the bench's On-Ramp attaches its sockops program. On error it
// detaches what it attached.
func (f *bpfFloors) attach(places []onrampPlace) error {
	root, err := kernel.Cgroup2Root()
	if err != nil {
		return fmt.Errorf("attach the sockops floor program: find the cgroup v2 hierarchy: %w", err)
	}
	if f.cgroup, err = link.AttachCgroup(link.CgroupOptions{Path: root, Attach: ebpf.AttachCGroupSockOps, Program: f.sockops}); err != nil {
		return fmt.Errorf("attach the sockops floor program to %s: %w", root, err)
	}
	for _, p := range places {
		for _, side := range []qdisc.Direction{qdisc.Egress, qdisc.Ingress} {
			err := p.h.Do(func() error {
				a, err := qdisc.Attach(p.iface, f.tc, qdisc.AttachOptions{Direction: side, Priority: tcFloorPriority})
				if err == nil {
					f.atts = append(f.atts, a)
				}
				return err
			})
			if err != nil {
				return errors.Join(fmt.Errorf("attach the tc floor program on %s: %w", p.h, err), f.detach())
			}
		}
	}
	return nil
}

// detach detaches the floors from everything attach attached them to.
func (f *bpfFloors) detach() error {
	var errs []error
	for _, a := range f.atts {
		if err := a.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach the tc floor program: %w", err))
		}
	}
	f.atts = nil
	if f.cgroup != nil {
		if err := f.cgroup.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach the sockops floor program: %w", err))
		}
		f.cgroup = nil
	}
	return errors.Join(errs...)
}

// close detaches the floors and unloads them.
func (f *bpfFloors) close() error {
	err := f.detach()
	f.tc.Close()
	f.sockops.Close()
	return err
}

// floorNsPerRun is the ns per run, among progs (merged over its hooks), of
// the floor program called name, of type typ, or nil where it did not run.
func floorNsPerRun(progs []ProgramCost, name, typ string) *float64 {
	for _, p := range progs {
		if p.Program == name && p.Type == typ && p.Runs > 0 {
			ns := p.NsPerRun
			return &ns
		}
	}
	return nil
}
