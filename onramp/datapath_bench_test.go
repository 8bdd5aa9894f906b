package onramp

import (
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// BenchmarkDataPath times On-Ramp's tc programs in the kernel
// (BPF_PROG_TEST_RUN), one run at a time so that each run gets its own
// copy of the packet, over one flow's cycle of four packets:
//
//   - egress/stamp: the sender's egress turns a data segment's PAD into a
//     STAMP and gives it its departure time;
//   - ingress/stamp: the receiver's ingress takes the STAMP's one-way
//     delay, with the sender's clock offset from the clock map;
//   - egress/echo: the receiver's egress writes that sample into a pure
//     ACK's PAD;
//   - ingress/echo: the sender's ingress runs the control on the echo
//     (a delay under T: no pause, β unchanged).
//
// Each step's mean is reported as STEP-ns/run: the program alone, as the
// kernel timed it, without the stack around it and without the BPF
// statistics' clock reads. floor-ns/run is a tc program that returns at
// once, run the same way on the data segment: what a run costs that is
// not On-Ramp's (the test run's timer, a cold start per packet). The
// sockops program that makes the PADs' room is not timed here. Needs
// root; run as
//
//	go test ./onramp -run '^$' -bench DataPath
func BenchmarkDataPath(b *testing.B) {
	for _, c := range conns {
		b.Run(c.name, func(b *testing.B) {
			rg := newRig(b).use(b, Config{Threshold: time.Millisecond})
			rg.putClock(c.sender, 0, 200)
			null, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "dp_floor", Type: ebpf.SchedCLS, License: "GPL",
				Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
			if err != nil {
				b.Fatalf("load a null tc program: %v", err)
			}
			defer null.Close()
			steps := []struct {
				name  string
				prog  *ebpf.Program
				frame func() []byte
			}{
				{"egress/stamp", rg.objs.OnrampEgress, func() []byte { return c.data(pad(StampLen)) }},
				{"ingress/stamp", rg.objs.OnrampIngress, func() []byte {
					return c.data(stampOpt(uint32(taiNow(b)-uint64(100*time.Microsecond)), 0))
				}},
				{"egress/echo", rg.objs.OnrampEgress, func() []byte { return c.ack(pad(EchoLen)) }},
				{"ingress/echo", rg.objs.OnrampIngress, func() []byte {
					return echoAt(b, c, 100*time.Microsecond, 120*time.Microsecond, 0)
				}},
				{"floor", null, func() []byte { return c.data(pad(StampLen)) }},
			}
			spent := make([]time.Duration, len(steps))
			b.ResetTimer()
			for range b.N {
				for i, s := range steps {
					frame := s.frame()
					ret, d, err := s.prog.Benchmark(frame, 1, nil)
					if err != nil || ret != 0 {
						b.Fatalf("%s: verdict %d, %v; want TC_ACT_OK", s.name, ret, err)
					}
					spent[i] += d
				}
			}
			b.StopTimer()
			// The cycle took the paths it names: every data segment
			// stamped, every stamp echoed, every echo used.
			for _, want := range []struct {
				counter string
				min     uint64
			}{{"stamped", uint64(b.N)}, {"rx_stamps", uint64(b.N)}, {"echoed", uint64(b.N)}, {"echoes", uint64(b.N)}} {
				if got := rg.stat(want.counter); got < want.min {
					b.Fatalf("%s = %d after %d cycles: a step did not take its path", want.counter, got, b.N)
				}
			}
			if got := rg.stat("pauses"); got != 0 {
				b.Fatalf("%d pauses on echoes under T", got)
			}
			for i, s := range steps {
				b.ReportMetric(float64(spent[i].Nanoseconds())/float64(b.N), s.name+"-ns/run")
			}
		})
	}
}
