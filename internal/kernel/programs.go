package kernel

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
)

// maxPrograms bounds WalkPrograms: far more programs than a host loads.
const maxPrograms = 1 << 20

// WalkPrograms calls fn with every BPF program loaded in the kernel, in
// the order of their IDs, with its ID and info, until fn returns false.
// The program is closed when fn returns. A program that goes away during
// the walk is skipped; one that cannot be opened or read for another
// reason is skipped too, and named in the error WalkPrograms returns after
// the walk. It fails at once when the walk itself does (listing the IDs
// needs CAP_SYS_ADMIN).
func WalkPrograms(fn func(id ebpf.ProgramID, prog *ebpf.Program, info *ebpf.ProgramInfo) bool) error {
	var errs []error
	var id ebpf.ProgramID
	for range maxPrograms {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return errors.Join(errs...)
		}
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("walk the kernel's BPF programs: %w", err))...)
		}
		id = next
		prog, err := ebpf.NewProgramFromID(id)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) { // else unloaded meanwhile
				errs = append(errs, fmt.Errorf("open program %d: %w", id, err))
			}
			continue
		}
		info, err := prog.Info()
		more := true
		if err != nil {
			errs = append(errs, fmt.Errorf("read program %d: %w", id, err))
		} else {
			more = fn(id, prog, info)
		}
		prog.Close()
		if !more {
			return errors.Join(errs...)
		}
	}
	return errors.Join(append(errs, fmt.Errorf("walk the kernel's BPF programs: more than %d", maxPrograms))...)
}
