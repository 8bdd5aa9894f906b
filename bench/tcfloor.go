package bench

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/ccload/ccload/qdisc"
)

// tcFloorName is the floor program's name, as the BPF statistics report
// it (OnRampRun.BPF). It does not start with onrampProgramPrefix: it is
// not On-Ramp's, and On-Ramp's share of the CPUs leaves it out.
const tcFloorName = "tc_floor"

// tcFloorPriority is the floor's cls_bpf priority with clsact: lower than
// every ccload filter's (the clock agent's scrub, the INT hop's, On-Ramp's
// onramp.Priority), so that it runs first, as it does on TCX by being
// attached before On-Ramp.
const tcFloorPriority = qdisc.DefaultPriority - 0x0e

// tcFloor is a tc program that does nothing, attached at every hook
// On-Ramp's programs run at (both sides of each interface On-Ramp is
// enabled on) while the BPF statistics time the runs with On-Ramp
// (OnRampConfig.BPFCosts). It returns TC_ACT_UNSPEC, so the programs after
// it run. Its ns per run is what a tc program's run costs at those hooks,
// on that kernel and machine, before the program does anything: the
// hook's dispatch of the run and the statistics' own clock reads. On-Ramp's
// tc programs' ns per run are read against it (OnRampCounters.TCFloorNsPerRun).
type tcFloor struct {
	prog *ebpf.Program
	atts []*qdisc.Attachment
}

// newTCFloor loads the floor program.
func newTCFloor() (*tcFloor, error) {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: tcFloorName, Type: ebpf.SchedCLS, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()}})
	if err != nil {
		return nil, fmt.Errorf("load the tc floor program: %w", err)
	}
	return &tcFloor{prog: prog}, nil
}

// attach attaches the floor to both sides of every place, before On-Ramp
// is enabled there. On error it detaches what it attached.
func (f *tcFloor) attach(places []onrampPlace) error {
	for _, p := range places {
		for _, side := range []qdisc.Direction{qdisc.Egress, qdisc.Ingress} {
			err := p.h.Do(func() error {
				a, err := qdisc.Attach(p.iface, f.prog, qdisc.AttachOptions{Direction: side, Priority: tcFloorPriority})
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

// detach detaches the floor from every hook attach attached it to.
func (f *tcFloor) detach() error {
	var errs []error
	for _, a := range f.atts {
		if err := a.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach the tc floor program: %w", err))
		}
	}
	f.atts = nil
	return errors.Join(errs...)
}

// close detaches the floor and unloads it.
func (f *tcFloor) close() error {
	err := f.detach()
	f.prog.Close()
	return err
}

// floorNsPerRun is the floor program's ns per run among progs (merged over
// its hooks), or nil where it did not run.
func floorNsPerRun(progs []ProgramCost) *float64 {
	for _, p := range progs {
		if p.Program == tcFloorName && p.Type == ProgramTC && p.Runs > 0 {
			ns := p.NsPerRun
			return &ns
		}
	}
	return nil
}
