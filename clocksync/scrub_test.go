package clocksync

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/qdisc"
	"github.com/ccload/ccload/testbed"
)

// The size of struct __sk_buff and the offset of its tstamp field.
const (
	skbCtxSize   = testutil.SkbCtxSize
	skbTstampOff = testutil.SkbTstampOff
)

// TestScrubClearsOnlyReceiveStamps runs clock_scrub under
// BPF_PROG_TEST_RUN on packets whose skb->tstamp holds each kind of time
// a packet can carry at egress, and checks that it clears the wall-clock
// receive stamps and nothing else. (BPF_PROG_TEST_RUN takes only
// tstamp_type 0; that the program leaves monotonic departure times of
// type 1 alone is what TCP through the e2e tests' fq shows.)
func TestScrubClearsOnlyReceiveStamps(t *testing.T) {
	testutil.RequireRoot(t)
	spec, err := loadClock()
	if err != nil {
		t.Fatal(err)
	}
	var objs struct {
		Prog *ebpf.Program `ebpf:"clock_scrub"`
	}
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		t.Fatalf("load clock_scrub: %v", err)
	}
	defer objs.Prog.Close()

	clock := func(id int32) uint64 {
		var ts unix.Timespec
		if err := unix.ClockGettime(id, &ts); err != nil {
			t.Fatal(err)
		}
		return uint64(ts.Nano())
	}
	realtime, tai, mono := clock(unix.CLOCK_REALTIME), clock(unix.CLOCK_TAI), clock(unix.CLOCK_MONOTONIC)
	tests := []struct {
		name    string
		stamp   uint64
		cleared bool
	}{
		{"no stamp", 0, false},
		{"receive stamp just taken", realtime - uint64(time.Millisecond), true},
		{"receive stamp a minute old", realtime - uint64(time.Minute), true},
		{"realtime three minutes ago: no packet waits that long", realtime - uint64(3*time.Minute), false},
		{"monotonic departure time", mono + uint64(time.Millisecond), false},
		// A second ahead, not the usual milliseconds: a slow guest takes
		// longer than that to get from here to the run, and a launch
		// time already past is dropped by etf either way.
		{"SO_TXTIME launch time on CLOCK_TAI", tai + uint64(time.Second), false},
	}
	// An Ethernet frame with an IPv4 header is enough: the program reads
	// only the skb's fields.
	frame := make([]byte, 14+20)
	binary.BigEndian.PutUint16(frame[12:], unix.ETH_P_IP)
	frame[14] = 0x45
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := make([]byte, skbCtxSize)
			binary.LittleEndian.PutUint64(in[skbTstampOff:], tt.stamp)
			out := make([]byte, skbCtxSize)
			ret, err := objs.Prog.Run(&ebpf.RunOptions{Data: frame, Context: in, ContextOut: out})
			if err != nil {
				t.Fatalf("run clock_scrub: %v", err)
			}
			if int32(ret) != -1 {
				t.Errorf("verdict %d, want -1 (let the packet go on)", int32(ret))
			}
			got := binary.LittleEndian.Uint64(out[skbTstampOff:])
			want := tt.stamp
			if tt.cleared {
				want = 0
			}
			if got != want {
				t.Errorf("tstamp %d after the program, want %d", got, want)
			}
		})
	}
}

// TestScrubReplacesFilterOfDeadAgent leaves clock_scrub's cls_bpf filter
// behind on every interface of a netns, as an agent killed on a kernel
// without TCX does, and checks that the next agent's scrubber takes the
// priority over, detaches cleanly, and refuses to remove a filter there
// that runs another program.
func TestScrubReplacesFilterOfDeadAgent(t *testing.T) {
	testutil.RequireRoot(t)
	pair := testnet.NewPair(t)
	h := pair.A
	iface, err := h.Interface()
	if err != nil {
		t.Fatal(err)
	}

	leave := func(prog *ebpf.Program) {
		t.Helper()
		err := h.Do(func() error {
			a, err := qdisc.Attach(iface, prog, qdisc.AttachOptions{Direction: qdisc.Egress, Method: qdisc.MethodClsact, Priority: scrubPriority})
			if err != nil {
				return err
			}
			return a.Release()
		})
		if err != nil {
			t.Fatalf("leave a filter on %s: %v", iface, err)
		}
	}
	filters := func() int {
		t.Helper()
		n := 0
		err := h.Do(func() error {
			removed, err := qdisc.RemoveStaleFilter(iface, qdisc.Egress, scrubPriority, scrubProgName)
			if removed {
				n++
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	// A dead agent's filter.
	dead, err := newScrubberIn(t, h, qdisc.MethodClsact)
	if err != nil {
		t.Fatalf("first scrubber: %v", err)
	}
	// Killed: the kernel keeps its filters, the process's handles go.
	for _, a := range dead.attached {
		if err := a.Release(); err != nil {
			t.Fatal(err)
		}
	}
	dead.prog.Close()
	dead.ns.Close()
	next, err := newScrubberIn(t, h, qdisc.MethodClsact)
	if err != nil {
		t.Fatalf("scrubber after a dead agent's filter: %v", err)
	}
	h.Do(func() error { next.close(); return nil })
	if n := filters(); n != 0 {
		t.Errorf("%d clock_scrub filters left after close", n)
	}

	// Someone else's program at the same priority stays.
	other := loadPassProgram(t)
	leave(other)
	if _, err := newScrubberIn(t, h, qdisc.MethodClsact); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Errorf("scrubber over another program's filter: %v, want the attach's EEXIST", err)
	}
}

// newScrubberIn starts a scrubber in h's netns.
func newScrubberIn(t *testing.T, h *testbed.Host, method qdisc.Method) (*scrubber, error) {
	t.Helper()
	var s *scrubber
	err := h.Do(func() error {
		var err error
		s, err = newScrubber(method)
		return err
	})
	return s, err
}

// loadPassProgram loads a tc program named other_prog that lets every
// packet pass.
func loadPassProgram(t *testing.T) *ebpf.Program {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "other_prog", Type: ebpf.SchedCLS, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()},
	})
	if err != nil {
		t.Fatalf("load a pass program: %v", err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog
}
