package perack

import (
	"slices"
	"testing"

	"github.com/ccload/ccload/internal/testutil"
)

// TestMeasureArithmetic loads the arithmetic programs into the kernel,
// runs each under BPF_PROG_TEST_RUN, and checks that every CC of
// ArithCCs gets a timing and that the state they left is a sane window:
// packets in [2, clamp] and a pacing rate. It asserts no time: the
// numbers belong to the bench.
func TestMeasureArithmetic(t *testing.T) {
	testutil.RequireRoot(t)
	costs, err := MeasureArithmetic(ArithConfig{Calls: 20_000, Rounds: 3})
	if err != nil {
		t.Fatalf("MeasureArithmetic: %v", err)
	}
	var got []string
	for _, c := range costs {
		got = append(got, c.CC)
		if c.NsPerCall <= 0 || c.FloorNs < 0 || c.NsAboveFloor != c.NsPerCall-c.FloorNs {
			t.Errorf("%s: %+v, want a positive time and its difference from the floor", c.CC, c)
		}
		t.Logf("%s: %.0f ns per call, %.0f above the test loop's %.0f", c.CC, c.NsPerCall, c.NsAboveFloor, c.FloorNs)
	}
	if !slices.Equal(got, ArithCCs()) {
		t.Errorf("timed %v, want %v", got, ArithCCs())
	}
}

// TestArithmeticState runs each arithmetic program many times and checks
// the window it computes stays in range, so that the timed work is the
// steady path and not a clamp or an early return.
func TestArithmeticState(t *testing.T) {
	testutil.RequireRoot(t)
	var objs arithObjects
	if err := loadArithObjects(&objs, nil); err != nil {
		t.Fatalf("load: %v", err)
	}
	defer objs.Close()
	frame := make([]byte, 64)
	for _, cc := range ArithCCs() {
		t.Run(cc, func(t *testing.T) {
			if _, _, err := objs.program(cc).Benchmark(frame, 10_000, nil); err != nil {
				t.Fatalf("run: %v", err)
			}
			var pkts, rate uint64
			if err := objs.ArithOutPkts.Get(&pkts); err != nil {
				t.Fatal(err)
			}
			if err := objs.ArithOutRate.Get(&rate); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s after 10,000 ACKs: %d packets, %d B/s", cc, pkts, rate)
			if pkts <= 2 || pkts >= 10000 {
				t.Errorf("%s: window %d packets, want strictly between the floor (2) and the clamp (10000)", cc, pkts)
			}
			if rate == 0 {
				t.Errorf("%s: pacing rate 0", cc)
			}
		})
	}
}
