package perack

import (
	"fmt"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/ccload/ccload/internal/kernel"
)

// ArithCost is the arithmetic of one CC's ACK timed alone (bpf/perack_arith.c):
// the same inline functions its cong_control program calls, run from a tc
// program under BPF_PROG_TEST_RUN, with no socket, map lookup, counter or
// BPF statistics around them.
type ArithCost struct {
	// CC is the congestion control whose arithmetic was timed.
	CC string `json:"cc"`
	// NsPerCall is the median, over the rounds, of the mean time per run.
	NsPerCall float64 `json:"ns_per_call"`
	// FloorNs is the same for a program that returns at once: the test
	// loop's own cost per run. NsAboveFloor is NsPerCall less it.
	FloorNs      float64 `json:"floor_ns"`
	NsAboveFloor float64 `json:"ns_above_floor"`
}

// ArithCCs lists, in order, the CCs whose arithmetic MeasureArithmetic
// times.
func ArithCCs() []string { return []string{"theta_powertcp", "powertcp", "hpcc"} }

// program is the program that runs cc's arithmetic, or nil.
func (o *arithObjects) program(cc string) *ebpf.Program {
	switch cc {
	case "theta_powertcp":
		return o.ArithTheta
	case "powertcp":
		return o.ArithPowertcp
	case "hpcc":
		return o.ArithHpcc
	}
	return nil
}

// ArithConfig says how long MeasureArithmetic measures.
type ArithConfig struct {
	// Calls is how many runs each BPF_PROG_TEST_RUN makes; 0 means 200,000.
	Calls int
	// Rounds is how many times each program is timed, interleaved with the
	// others; the result is the median round. 0 means 5.
	Rounds int
}

// MeasureArithmetic loads the arithmetic programs and times each CC's
// arithmetic and the empty program, interleaved, cfg.Rounds times of
// cfg.Calls runs each. The kernel reports each timing as a whole number of
// nanoseconds per run. It needs CAP_BPF and CAP_NET_ADMIN (tc programs)
// and BPF_PROG_TEST_RUN for tc programs (Linux 4.12).
func MeasureArithmetic(cfg ArithConfig) ([]ArithCost, error) {
	if cfg.Calls <= 0 {
		cfg.Calls = 200_000
	}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 5
	}
	var objs arithObjects
	if err := loadArithObjects(&objs, nil); err != nil {
		return nil, fmt.Errorf("load the arithmetic programs: %w", kernel.LoadError("perack_arith", err))
	}
	defer objs.Close()

	// A minimal Ethernet frame: tc test runs need at least a header.
	frame := make([]byte, 64)
	ccs := ArithCCs()
	times := make(map[string][]float64, len(ccs)+1)
	run := func(name string, p *ebpf.Program) error {
		ret, per, err := p.Benchmark(frame, cfg.Calls, nil)
		if err != nil {
			return fmt.Errorf("time %s's arithmetic (BPF_PROG_TEST_RUN on a tc program): %w", name, err)
		}
		if ret != 0 {
			return fmt.Errorf("time %s's arithmetic: the program returned %d, want 0", name, ret)
		}
		times[name] = append(times[name], float64(per.Nanoseconds()))
		return nil
	}
	for range cfg.Rounds {
		if err := run("null", objs.ArithNull); err != nil {
			return nil, err
		}
		for _, cc := range ccs {
			if err := run(cc, objs.program(cc)); err != nil {
				return nil, err
			}
		}
	}
	floor := median(times["null"])
	out := make([]ArithCost, 0, len(ccs))
	for _, cc := range ccs {
		ns := median(times[cc])
		out = append(out, ArithCost{CC: cc, NsPerCall: ns, FloorNs: floor, NsAboveFloor: ns - floor})
	}
	return out, nil
}

// median is the median of v, 0 for none.
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
