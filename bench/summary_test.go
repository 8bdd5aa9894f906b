package bench

import (
	"slices"
	"testing"
	"time"

	"github.com/ccload/ccload/bench/stats"
)

func TestRunOrder(t *testing.T) {
	ccs := []string{"a", "b", "c"}
	for i, want := range [][]string{{"a", "b", "c"}, {"b", "c", "a"}, {"c", "a", "b"}, {"a", "b", "c"}} {
		if got := runOrder(ccs, i); !slices.Equal(got, want) {
			t.Errorf("runOrder(%v, %d) = %v, want %v", ccs, i, got, want)
		}
	}
	if !slices.Equal(ccs, []string{"a", "b", "c"}) {
		t.Errorf("runOrder changed its input: %v", ccs)
	}
}

func TestSpreadOf(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want Spread
	}{
		{[]float64{5}, Spread{5, 5, 5, 1}},
		{[]float64{3, 1}, Spread{2, 1, 3, 2}},
		{[]float64{9, 1, 4}, Spread{4, 1, 9, 3}},
		{[]float64{4, 1, 9, 2}, Spread{3, 1, 9, 4}},
	} {
		if got := spreadOf(tc.in); got != tc.want {
			t.Errorf("spreadOf(%v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

// TestPooledFCT checks that percentiles appear only where the pooled
// sample supports them.
func TestPooledFCT(t *testing.T) {
	flows := func(n int, bytes int64) []stats.FCT {
		out := make([]stats.FCT, n)
		for i := range out {
			out[i] = stats.FCT{Bytes: bytes, Duration: time.Duration(i+1) * time.Microsecond}
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		small      int
		wantTailP  float64
		wantP99    bool
		wantP999   bool
		wantTailUs float64
	}{
		{"too few for a median", 10, 0, false, false, 0},
		{"a median only", 50, 50, false, false, 25},
		{"p98 but not p99", 615, 98, false, false, 603},
		{"p99", 1000, 99, true, false, 990},
		{"p99.9", 10000, 99.9, true, true, 9990},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fcts := append(flows(tc.small, 1000), flows(3, 5_000_000)...)
			got := pooledFCT(fcts, func(int64) time.Duration { return time.Microsecond })
			var small *PooledFCT
			for i := range got {
				if got[i].Bucket == stats.BucketSmall {
					small = &got[i]
				}
				if got[i].Bucket == stats.BucketMedium {
					t.Errorf("an empty bucket is reported: %+v", got[i])
				}
			}
			if small == nil || small.Count != tc.small {
				t.Fatalf("small bucket %+v, want %d flows", small, tc.small)
			}
			if small.TailP != tc.wantTailP || small.TailUs != tc.wantTailUs {
				t.Errorf("tail p%v = %v us, want p%v = %v us", small.TailP, small.TailUs, tc.wantTailP, tc.wantTailUs)
			}
			if (small.P99Us != nil) != tc.wantP99 || (small.P999Us != nil) != tc.wantP999 {
				t.Errorf("p99 present %v, p99.9 present %v; want %v, %v", small.P99Us != nil, small.P999Us != nil, tc.wantP99, tc.wantP999)
			}
			if tc.wantTailP > 0 && small.TailSlowdown != tc.wantTailUs {
				t.Errorf("tail slowdown %v, want %v (ideal 1 us)", small.TailSlowdown, tc.wantTailUs)
			}
		})
	}
}

func TestACKCost(t *testing.T) {
	floor := 80.0
	progs := []ProgramCost{ // busiest first, as programCosts.since sorts them
		{Program: "int_sockops", Type: ProgramSockOps, Runs: 3000, NsPerRun: 200},
		{Program: "powertcp_cong_c", Type: ProgramStructOps, Runs: 1000, NsPerRun: 300},
		{Program: "powertcp_init", Type: ProgramStructOps, Runs: 4, NsPerRun: 900},
		{Program: "int_hop_egress", Type: ProgramTC, Runs: 5000, NsPerRun: 50},
	}
	c := ackCost(progs, &floor)
	if c == nil || c.Program != "powertcp_cong_c" || c.ACKs != 1000 || c.NsPerRun != 300 {
		t.Fatalf("ackCost = %+v", c)
	}
	for name, tc := range map[string]struct {
		got  *float64
		want float64
	}{
		"above floor":            {c.NsAboveFloor, 220},
		"sockops runs per ACK":   {c.SockopsRunsPerACK, 3},
		"sockops ns per ACK":     {c.SockopsNsPerACK, 600},
		"sockops ns above floor": {c.SockopsNsPerACKAboveFloor, 360},
		"floor":                  {c.FloorNsPerRun, 80},
	} {
		if tc.got == nil || *tc.got != tc.want {
			t.Errorf("%s = %v, want %v", name, tc.got, tc.want)
		}
	}
	if c := ackCost(progs, nil); c == nil || c.NsAboveFloor != nil || c.SockopsNsPerACKAboveFloor != nil {
		t.Errorf("without a floor: %+v", c)
	}
	if c := ackCost(progs[3:], &floor); c != nil {
		t.Errorf("a run without a CC program has an ACK cost: %+v", c)
	}
}

// TestSummarise checks the figures' spreads and that figures a run lacks
// are left out.
func TestSummarise(t *testing.T) {
	j1, j2 := 0.9, 0.7
	runs := []RunResult{
		{KernelCCs: []string{"cubic"}, ThroughputBps: 9e8, Drops: 3, Jain: &j1, ConvergenceMillis: []float64{10, 20}, durationMs: 16000},
		{KernelCCs: []string{"cubic"}, ThroughputBps: 8e8, Drops: 1, Jain: &j2, ConvergenceMillis: []float64{5, -1}, durationMs: 16000},
		{KernelCCs: []string{"reno"}, ThroughputBps: 7e8, Drops: 2, durationMs: 16000},
	}
	res := summarise("cubic", runs, nil, nil)
	if !slices.Equal(res.KernelCCs, []string{"cubic", "reno"}) {
		t.Errorf("kernel CCs %v", res.KernelCCs)
	}
	for name, want := range map[string]Spread{
		"throughput_bps":     {8e8, 7e8, 9e8, 3},
		"drops":              {2, 1, 3, 3},
		"jain":               {0.8, 0.7, 0.9, 2},
		"convergence_max_ms": {8010, 20, 16000, 2},
	} {
		if got := res.Figures[name]; got != want {
			t.Errorf("%s: %+v, want %+v", name, got, want)
		}
	}
	if _, ok := res.Figures["cc_ns_per_run"]; ok {
		t.Error("a cost figure without any cost")
	}
	if len(res.FCT) != 0 {
		t.Errorf("FCTs without flows: %+v", res.FCT)
	}
}

func TestTailQueue(t *testing.T) {
	us := time.Microsecond
	flow := func(fct, queue time.Duration) stats.FCT {
		return stats.FCT{Bytes: 1000, Duration: fct, QueueDelay: queue, Queued: true}
	}
	for _, tc := range []struct {
		name   string
		fcts   []stats.FCT
		tailUs float64
		want   *TailQueue
	}{
		{"no queue readings", []stats.FCT{{Bytes: 1000, Duration: 900 * us}}, 500, nil},
		{"the slow flows saw the queue", []stats.FCT{flow(100*us, 0), flow(200*us, 0), flow(900*us, 300*us), flow(1000*us, 700*us)}, 900,
			&TailQueue{Flows: 2, P50Us: 300, MaxUs: 700, BucketUs: 0}},
		{"a slow flow with no reading is left out", []stats.FCT{flow(100*us, 50*us), {Bytes: 1000, Duration: 2000 * us}, flow(1500*us, 20*us)}, 1000,
			&TailQueue{Flows: 1, P50Us: 20, MaxUs: 20, BucketUs: 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tailQueue(tc.fcts, tc.tailUs)
			if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
				t.Errorf("tailQueue = %+v, want %+v", got, tc.want)
			}
		})
	}
}
