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
// the walk, or whose info cannot be read, is skipped. It fails only when
// the walk itself does (listing the IDs needs CAP_SYS_ADMIN).
func WalkPrograms(fn func(id ebpf.ProgramID, prog *ebpf.Program, info *ebpf.ProgramInfo) bool) error {
	var id ebpf.ProgramID
	for range maxPrograms {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("walk the kernel's BPF programs: %w", err)
		}
		id = next
		prog, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // unloaded meanwhile
		}
		info, err := prog.Info()
		more := err != nil || fn(id, prog, info)
		prog.Close()
		if !more {
			return nil
		}
	}
	return fmt.Errorf("walk the kernel's BPF programs: more than %d", maxPrograms)
}
