package loader

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// statNames names the counters of bpf/include/ccload.h's enum ccload_stat,
// in order.
var statNames = [...]string{
	"sock_init",
	"sock_release",
	"acks",
	"rtt_samples",
	"cwnd_updates",
	"loss_events",
	"ecn_ce_rounds",
	"fallbacks",
	"int_samples",
	"no_int_acks",
}

// Stats are a CC's counters, summed over CPUs, keyed by name.
type Stats map[string]uint64

// SocketsInUse is the number of sockets that have the CC now.
func (s Stats) SocketsInUse() int64 {
	return int64(s["sock_init"]) - int64(s["sock_release"])
}

func readStats(m *ebpf.Map) (Stats, error) {
	out := Stats{}
	for i, name := range statNames {
		if uint32(i) >= m.MaxEntries() {
			break
		}
		var perCPU []uint64
		if err := m.Lookup(uint32(i), &perCPU); err != nil {
			return nil, fmt.Errorf("read counter %s: %w", name, err)
		}
		var sum uint64
		for _, v := range perCPU {
			sum += v
		}
		out[name] = sum
	}
	return out, nil
}
