package qdisc

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"

	"github.com/ccload/ccload/internal/percpu"
)

// edtStatNames names enum edt_stat of bpf/edt_delay.c, in order.
var edtStatNames = [...]string{"packets", "delayed", "kept"}

// EDTStats are the counters of the EDT program, summed over CPUs.
type EDTStats struct {
	// Packets is the number of packets the program saw while the delay
	// was above 0.
	Packets uint64
	// Delayed is the number of packets whose departure time it set to
	// now + delay.
	Delayed uint64
	// Kept is the number of packets that already had a later departure
	// time, which it kept.
	Kept uint64
}

// EDTDelay is the edt_delay tc program, loaded into the kernel with its
// maps. It gives every packet an earliest departure time (EDT) of now +
// delay, or keeps the packet's own if that is later; an fq qdisc on the
// same interface then holds the packet until then (see InstallFQ). Attach
// it on egress with Attach(iface, e.Program(), ...).
//
// Departure times of a flow never go backwards while the delay is
// constant, so fq does not reorder. Lowering the delay while packets are
// queued may reorder them.
type EDTDelay struct {
	objs edtDelayObjects
}

// LoadEDTDelay loads the program with a delay of 0: it passes packets
// through until SetDelay.
func LoadEDTDelay() (*EDTDelay, error) {
	var e EDTDelay
	if err := loadEdtDelayObjects(&e.objs, nil); err != nil {
		return nil, fmt.Errorf("load edt_delay program: %w", err)
	}
	return &e, nil
}

// Program returns the tc program, to pass to Attach. It stays owned by e.
func (e *EDTDelay) Program() *ebpf.Program {
	return e.objs.EdtDelay
}

// SetDelay sets the delay of every packet from now on; 0 passes packets
// through untouched. fq drops packets delayed beyond its horizon
// (FQConfig.Horizon, 10 s by default).
func (e *EDTDelay) SetDelay(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("set edt delay: %v is negative", d)
	}
	cfg := edtDelayEdtConfig{DelayNs: uint64(d.Nanoseconds())}
	if err := e.objs.EdtConfig.Put(uint32(0), &cfg); err != nil {
		return fmt.Errorf("set edt delay to %v: %w", d, err)
	}
	return nil
}

// Delay returns the delay the program applies now.
func (e *EDTDelay) Delay() (time.Duration, error) {
	var cfg edtDelayEdtConfig
	if err := e.objs.EdtConfig.Lookup(uint32(0), &cfg); err != nil {
		return 0, fmt.Errorf("read edt delay: %w", err)
	}
	return time.Duration(cfg.DelayNs), nil
}

// Stats reads the program's counters.
func (e *EDTDelay) Stats() (EDTStats, error) {
	sums, err := percpu.SumAll(e.objs.EdtStats, len(edtStatNames))
	if err != nil {
		return EDTStats{}, fmt.Errorf("read edt counters: %w", err)
	}
	if len(sums) < len(edtStatNames) {
		return EDTStats{}, fmt.Errorf("read edt counters: the map holds %d, want %d", len(sums), len(edtStatNames))
	}
	return EDTStats{Packets: sums[0], Delayed: sums[1], Kept: sums[2]}, nil
}

// Close unloads the program and its maps. The program stays attached
// wherever an Attachment still holds it; close those first. It is
// idempotent.
func (e *EDTDelay) Close() error {
	var errs []error
	for _, c := range []interface{ Close() error }{e.objs.EdtDelay, e.objs.EdtConfig, e.objs.EdtStats} {
		if err := c.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close edt_delay program: %w", err)
	}
	return nil
}
