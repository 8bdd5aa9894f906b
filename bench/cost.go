package bench

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/bench/perack"
	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/testbed"
)

// programCosts reads the kernel's per-program run counters, which exist
// while BPF statistics are enabled (BPF_ENABLE_STATS, the syscall behind
// kernel.bpf_stats_enabled; needs CAP_SYS_ADMIN and Linux 5.8).
type programCosts struct {
	stats io.Closer
	err   error
}

// progCounter is one program's counters at one moment.
type progCounter struct {
	name    string
	typ     ebpf.ProgramType
	runs    uint64
	runtime time.Duration
}

func newProgramCosts() *programCosts {
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	return &programCosts{stats: c, err: err}
}

func (p *programCosts) close() {
	if p.stats != nil {
		p.stats.Close()
	}
}

// costTypes are the program types whose cost a bench reports: the CCs
// (struct_ops), INT tagging (sockops) and the INT hop (tc).
var costTypes = [...]ebpf.ProgramType{ebpf.StructOps, ebpf.SockOps, ebpf.SchedCLS}

// snapshot reads the counters of every program of costTypes.
func (p *programCosts) snapshot() map[ebpf.ProgramID]progCounter {
	out := map[ebpf.ProgramID]progCounter{}
	if p.err != nil {
		return out
	}
	// A program the walk cannot read, and those after a walk that fails,
	// are left out: their costs are then missing from the run, not wrong.
	_ = kernel.WalkPrograms(func(id ebpf.ProgramID, prog *ebpf.Program, info *ebpf.ProgramInfo) bool {
		if !slices.Contains(costTypes[:], info.Type) {
			return true
		}
		if st, err := prog.Stats(); err == nil {
			out[id] = progCounter{name: info.Name, typ: info.Type, runs: st.RunCount, runtime: st.Runtime}
		}
		return true
	})
	return out
}

// since returns the programs that ran since before, with their mean run
// time, busiest first.
func (p *programCosts) since(before map[ebpf.ProgramID]progCounter) []ProgramCost {
	var out []ProgramCost
	for id, now := range p.snapshot() {
		was := before[id]
		runs := now.runs - was.runs
		if runs == 0 || now.runs < was.runs {
			continue
		}
		out = append(out, ProgramCost{Program: now.name, Type: programType(now.typ), Runs: runs,
			NsPerRun: float64(now.runtime-was.runtime) / float64(runs)})
	}
	slices.SortFunc(out, busiestFirst)
	return out
}

// busiestFirst orders program costs by runs, most first, then by name.
func busiestFirst(a, b ProgramCost) int {
	if c := cmp.Compare(b.Runs, a.Runs); c != 0 {
		return c
	}
	return strings.Compare(a.Program, b.Program)
}

// programType names a program type as results.json does.
func programType(t ebpf.ProgramType) string {
	switch t {
	case ebpf.StructOps:
		return ProgramStructOps
	case ebpf.SockOps:
		return ProgramSockOps
	case ebpf.SchedCLS:
		return ProgramTC
	}
	return t.String()
}

// Program types of ProgramCost.Type.
const (
	ProgramStructOps = "struct_ops"
	ProgramSockOps   = "sockops"
	ProgramTC        = "tc"
)

// ackCost is the per-ACK cost of a run whose programs cost progs, against
// floor (the null CC's ns per run in the same repeat, or nil). The CC's
// program is the busiest struct_ops program, which runs once per ACK; a
// run without one (a kernel CC) has no ACK cost.
func ackCost(progs []ProgramCost, floor *float64) *ACKCost {
	var cc, sockops *ProgramCost
	for i, p := range progs { // busiest first
		switch {
		case p.Type == ProgramStructOps && cc == nil:
			cc = &progs[i]
		case p.Type == ProgramSockOps && sockops == nil:
			sockops = &progs[i]
		}
	}
	if cc == nil || cc.Runs == 0 {
		return nil
	}
	c := &ACKCost{Program: cc.Program, ACKs: cc.Runs, NsPerRun: cc.NsPerRun, FloorNsPerRun: floor}
	if floor != nil {
		v := cc.NsPerRun - *floor
		c.NsAboveFloor = &v
	}
	if sockops != nil {
		perACK := float64(sockops.Runs) / float64(cc.Runs)
		ns := sockops.NsPerRun * perACK
		c.SockopsRunsPerACK, c.SockopsNsPerACK = &perACK, &ns
		if floor != nil {
			above := (sockops.NsPerRun - *floor) * perACK
			c.SockopsNsPerACKAboveFloor = &above
		}
	}
	return c
}

// cpuTimes is the first line of /proc/stat: jiffies per state, summed
// over all CPUs.
type cpuTimes struct {
	busy, total uint64
}

// readBacklogDrops sums, over the CPUs, the packets the kernel dropped
// because a CPU's input backlog was full (/proc/net/softnet_stat, second
// column): drops that no qdisc counts, as when veth peers deliver bursts
// faster than the receiving CPU takes them in.
func readBacklogDrops() (uint64, error) {
	b, err := os.ReadFile("/proc/net/softnet_stat")
	if err != nil {
		return 0, err
	}
	return parseBacklogDrops(string(b))
}

// parseBacklogDrops is readBacklogDrops on the file's text.
func parseBacklogDrops(text string) (uint64, error) {
	var sum uint64
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			return 0, fmt.Errorf("softnet_stat: short line %q", line)
		}
		v, err := strconv.ParseUint(fields[1], 16, 32)
		if err != nil {
			return 0, fmt.Errorf("softnet_stat: %w", err)
		}
		sum += v
	}
	return sum, nil
}

func readCPUTimes() (cpuTimes, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return cpuTimes{}, errors.New("/proc/stat is empty")
	}
	fields := strings.Fields(sc.Text())
	if len(fields) < 5 || fields[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("/proc/stat: unexpected first line %q", sc.Text())
	}
	var t cpuTimes
	for i, f := range fields[1:] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("/proc/stat: %w", err)
		}
		// user nice system idle iowait irq softirq steal guest guest_nice;
		// guest time is already counted in user and nice.
		if i >= 8 {
			break
		}
		t.total += v
		if i != 3 && i != 4 {
			t.busy += v
		}
	}
	return t, nil
}

// busySince is the busy fraction of all CPUs between before and t.
func (t cpuTimes) busySince(before cpuTimes) float64 {
	if t.total <= before.total {
		return 0
	}
	return float64(t.busy-before.busy) / float64(t.total-before.total)
}

// machine describes this host.
func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU()}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource"); err == nil {
		m.Clocksource = strings.TrimSpace(string(b))
	}
	return m
}

// floorFlow is how long the null CC's flow runs in each repeat: long
// enough for tens of thousands of ACKs.
const floorFlow = time.Second

// measureFloor measures the floor of the per-ACK cost for one repeat: the
// mean run time of the null CC's busiest program (bench/perack) over a
// flow from the first sender, under the same BPF statistics as the CCs'
// runs. It returns nil, and says why, when it cannot.
func (r *runner) measureFloor(ctx context.Context, costs *programCosts) *float64 {
	if costs.err != nil {
		return nil
	}
	null, err := perack.RegisterNull()
	if err != nil {
		r.say("note: no per-ACK floor in this repeat: %v", err)
		return nil
	}
	defer null.Close()
	sink, err := testbed.StartSink(r.topo.Receiver, netip.AddrPortFrom(r.topo.Receiver.Addr, 0))
	if err != nil {
		r.say("note: no per-ACK floor in this repeat: %v", err)
		return nil
	}
	defer sink.Close()
	before := costs.snapshot()
	if _, err := testbed.SendFlow(ctx, r.topo.Senders[0], sink.Addr, testbed.FlowConfig{
		CC: perack.NullName, For: floorFlow, Seed: 5, Timeout: floorFlow + 10*time.Second}); err != nil {
		r.say("note: no per-ACK floor in this repeat: the null CC's flow: %v", err)
		return nil
	}
	for _, p := range costs.since(before) { // busiest first
		if p.Type == ProgramStructOps && strings.HasPrefix(p.Program, perack.NullProgramPrefix) {
			ns := p.NsPerRun
			r.say("per-ACK floor: %.0f ns per run of the null CC (%d runs)", ns, p.Runs)
			return &ns
		}
	}
	r.say("note: no per-ACK floor in this repeat: the null CC's programs did not run")
	return nil
}

// measureArith times, for one repeat, the per-ACK arithmetic of the CCs
// that have an arithmetic program (bench/perack.MeasureArithmetic), by CC
// name. It returns nil, and says why, when it cannot.
func (r *runner) measureArith(costs *programCosts) map[string]perack.ArithCost {
	if costs.err != nil {
		return nil
	}
	arith, err := perack.MeasureArithmetic(perack.ArithConfig{})
	if err != nil {
		r.say("note: no arithmetic timing in this repeat: %v", err)
		return nil
	}
	out := make(map[string]perack.ArithCost, len(arith))
	parts := make([]string, 0, len(arith))
	for _, a := range arith {
		out[a.CC] = a
		parts = append(parts, fmt.Sprintf("%s %.0f", a.CC, a.NsAboveFloor))
	}
	r.say("per-ACK arithmetic alone, ns above the test loop's %.0f: %s", arith[0].FloorNs, strings.Join(parts, ", "))
	return out
}
