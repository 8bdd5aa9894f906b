package onramp

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
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

// BenchmarkFromOnePeer times On-Ramp's ingress on packets from one peer
// whose connections arrive on every CPU at once, as RSS spreads a peer's
// connections over a NIC's queues, against the same on one CPU: what the
// CPUs cost each other through the state they share per peer.
//
//   - stamp: the receiver's ingress on a data segment's STAMP, which reads
//     the peer's clock entry;
//   - echo: the sender's ingress on an ECHO, which adds the sample to the
//     peer's statistics (onramp_peers). The same echo, run again, is a
//     repeated one: after the statistics, the control stops there.
//
// Each CPU runs a connection of its own, 1000 runs per
// BPF_PROG_TEST_RUN; ns/run is the mean over the CPUs. Needs root; run as
//
//	go test ./onramp -run '^$' -bench FromOnePeer
func BenchmarkFromOnePeer(b *testing.B) {
	rg := newRig(b).use(b, Config{Threshold: time.Millisecond})
	c := conns[0]
	rg.putClock(c.sender, 0, 200)
	rg.putClock(c.receiver, 0, 200)
	tx := uint32(taiNow(b))
	for _, step := range []struct {
		name  string
		frame func(conn) []byte
	}{
		{"stamp", func(c conn) []byte { return c.data(stampOpt(tx, 0)) }},
		{"echo", func(c conn) []byte { return c.ack(echoOpt(int32(100*time.Microsecond), tx, 0)) }},
	} {
		for _, cpus := range []int{1, runtime.NumCPU()} {
			b.Run(fmt.Sprintf("%s/cpus=%d", step.name, cpus), func(b *testing.B) {
				frames := make([][]byte, cpus)
				for i := range cpus {
					conn := c
					conn.sport += uint16(i)
					rg.setFlow(conn.key(true), onrampOnrampFlow{Beta: fpOne})
					frames[i] = step.frame(conn)
				}
				spent := make([]time.Duration, cpus)
				errs := make([]error, cpus)
				// Every CPU starts once all are pinned, so that the runs
				// overlap.
				var wg, pinned sync.WaitGroup
				start := make(chan struct{})
				b.ResetTimer()
				for i := range cpus {
					wg.Add(1)
					pinned.Add(1)
					go func() {
						defer wg.Done()
						runtime.LockOSThread()
						defer runtime.UnlockOSThread()
						var set unix.CPUSet
						set.Set(i)
						err := unix.SchedSetaffinity(0, &set)
						pinned.Done()
						<-start
						if err != nil {
							errs[i] = fmt.Errorf("pin to CPU %d: %w", i, err)
							return
						}
						for range b.N {
							ret, d, err := rg.objs.OnrampIngress.Benchmark(frames[i], 1000, nil)
							if err != nil || ret != 0 {
								errs[i] = fmt.Errorf("CPU %d: verdict %d, %v; want TC_ACT_OK", i, ret, err)
								return
							}
							spent[i] += d
						}
					}()
				}
				pinned.Wait()
				close(start)
				wg.Wait()
				b.StopTimer()
				var sum time.Duration
				for i := range cpus {
					if errs[i] != nil {
						b.Fatal(errs[i])
					}
					sum += spent[i]
				}
				if n := rg.stat("rx_no_clock") + rg.stat("unknown_flow"); n != 0 {
					b.Fatalf("%d packets found no clock or no flow: the runs did not take their paths", n)
				}
				b.ReportMetric(float64(sum.Nanoseconds())/float64(b.N*cpus), "ns/run")
			})
		}
	}
}
