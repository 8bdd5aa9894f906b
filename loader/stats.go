package loader

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/ccload/ccload/internal/percpu"
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
	"hist_starts",
	"repairs",
	"build_inits",
	"rtt_held",
	"ref_updates",
}

// Stats are a CC's counters, summed over CPUs, keyed by name.
type Stats map[string]uint64

// SocketsInUse is the number of sockets that have the CC now.
func (s Stats) SocketsInUse() int64 {
	return int64(s["sock_init"]) - int64(s["sock_release"])
}

func readStats(m *ebpf.Map) (Stats, error) {
	sums, err := percpu.SumAll(m, len(statNames))
	if err != nil {
		return nil, fmt.Errorf("read CC counters: %w", err)
	}
	out := Stats{}
	for i, v := range sums {
		out[statNames[i]] = v
	}
	return out, nil
}

// Stats returns the counters of the attached CC name.
func (l *Loader) Stats(name string) (Stats, error) {
	cc, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	st, err := l.inspectAttached(cc)
	if err != nil {
		return nil, err
	}
	defer st.close()
	return readStats(st.stats)
}
