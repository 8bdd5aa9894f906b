// Package percpu reads the per-CPU counters of ccload's BPF programs: the
// value of a key summed over every possible CPU, as one number.
package percpu

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// Sum returns the value of key in the per-CPU array m, summed over CPUs.
func Sum(m *ebpf.Map, key uint32) (uint64, error) {
	var perCPU []uint64
	if err := m.Lookup(key, &perCPU); err != nil {
		return 0, fmt.Errorf("read per-CPU counter %d of %s: %w", key, m, err)
	}
	var sum uint64
	for _, v := range perCPU {
		sum += v
	}
	return sum, nil
}

// SumAll returns the counters 0 to n-1 of the per-CPU array m, each summed
// over CPUs. Keys past the map's size are left out, so a newer ccload can
// read the counters of a map that an older one pinned.
func SumAll(m *ebpf.Map, n int) ([]uint64, error) {
	if max := int(m.MaxEntries()); n > max {
		n = max
	}
	out := make([]uint64, n)
	for i := range out {
		v, err := Sum(m, uint32(i))
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}
