package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/ccload/ccload/bench/plot"
	"github.com/ccload/ccload/bench/stats"
	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/qdisc"
	"github.com/ccload/ccload/telemetry/sockops"
	"github.com/ccload/ccload/testbed"
)

// TestOnRampConfigValidation checks that bad onramp configurations fail
// with errors that name their flags, and that the defaults pass.
func TestOnRampConfigValidation(t *testing.T) {
	if err := (OnRampConfig{}).Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if err := (OnRampConfig{Quick: true}).Validate(); err != nil {
		t.Fatalf("quick defaults: %v", err)
	}
	for _, tc := range []struct {
		name string
		cfg  OnRampConfig
		want string
	}{
		{"duplicate cc", OnRampConfig{CCs: []string{"cubic", "cubic"}}, "--cc"},
		{"cc with plus", OnRampConfig{CCs: []string{"cubic+onramp"}}, "--cc"},
		{"short run", OnRampConfig{Duration: time.Second}, "--duration"},
		{"no fanout", OnRampConfig{Fanout: -1}, "--fanout"},
		{"huge response", OnRampConfig{ResponseBytes: 1 << 30}, "--incast-size"},
		{"incast load 1", OnRampConfig{IncastLoad: 1}, "--incast-load"},
		{"loads over 1", OnRampConfig{Load: 0.7, IncastLoad: 0.4}, "together"},
		{"tiny gso", OnRampConfig{GSOBytes: 100}, "--gso"},
		{"long max pause", OnRampConfig{MaxPause: time.Second}, "--onramp-max-pause"},
		{"long threshold", OnRampConfig{Threshold: 2 * time.Second}, "--onramp-threshold"},
		{"unknown marker", OnRampConfig{Marker: "red"}, "--marker"},
		{"too many repeats", OnRampConfig{Repeat: MaxRepeat + 1}, "--repeat"},
		{"small buffer", OnRampConfig{BufferBytes: 1500}, "--buffer"},
		{"slow senders", OnRampConfig{SenderRateBps: 1000}, "--sender-rate"},
		{"senders beyond fq's maxrate", OnRampConfig{SenderRateBps: 40_000_000_000}, "--sender-rate"},
		{"observe with the strawman", OnRampConfig{Observe: true, Strawman: true}, "--onramp-observe"},
		{"observe with holds", OnRampConfig{Observe: true, CCHolds: true}, "--onramp-cc-holds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
	c := OnRampConfig{}.withDefaults()
	if c.RateBps != 100_000_000 || c.Fanout != 16 || c.ResponseBytes != 64<<10 || c.Load != 0.4 ||
		c.GSOBytes != 8<<10 || c.Threshold != 2*time.Millisecond || c.MaxPause != 100*time.Millisecond {
		t.Errorf("defaults %+v: want 100 Mbit/s, fanout 16, 64 KiB responses, load 0.4, GSO 8 KiB, T 2 ms, max pause 100 ms", c)
	}
	for _, tc := range []struct {
		name   string
		cfg    OnRampConfig
		want   uint64
		hostBW uint64 // the CCs' host_bw: the cap, else the bottleneck's rate
	}{
		{"default: the bottleneck's rate", OnRampConfig{}, 100_000_000, 100_000_000},
		{"default follows --rate", OnRampConfig{RateBps: 50_000_000}, 50_000_000, 50_000_000},
		{"given", OnRampConfig{SenderRateBps: 1_000_000_000}, 1_000_000_000, 1_000_000_000},
		{"none", OnRampConfig{UnlimitedSenders: true, SenderRateBps: 5_000_000}, 0, 100_000_000},
	} {
		c := tc.cfg.withDefaults()
		if c.SenderRateBps != tc.want || c.senderFQ().FlowMaxRateBps != tc.want {
			t.Errorf("%s: sender rate %d, fq max rate %d; want %d", tc.name, c.SenderRateBps, c.senderFQ().FlowMaxRateBps, tc.want)
		}
		if hb := c.hostBWBps(); hb != tc.hostBW {
			t.Errorf("%s: host_bw %d bit/s, want %d", tc.name, hb, tc.hostBW)
		}
		if err := tc.cfg.Validate(); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if got, want := senderRateText(100_000_000), "flows at most 100 Mbit/s"; got != want {
		t.Errorf("senderRateText(100 Mbit/s) = %q, want %q", got, want)
	}
	if got, want := senderRateText(0), "flows uncapped"; got != want {
		t.Errorf("senderRateText(0) = %q, want %q", got, want)
	}
	if slices.Contains(Scenarios(), ScenarioOnRamp) {
		t.Errorf("--scenario all includes %s, which needs sch_fq", ScenarioOnRamp)
	}
	if got := len(c.requestArrivals(3)); got == 0 || got > c.maxRequests() {
		t.Errorf("%d requests in a default run", got)
	}
	q := OnRampConfig{Quick: true}.withDefaults()
	if got := len(q.requestArrivals(3)); got > quickOnRampRequests {
		t.Errorf("%d requests in a quick run, want at most %d", got, quickOnRampRequests)
	}
}

// TestOnRampComparisonAndSchema builds results from made-up runs and
// checks the comparisons, the verdict, the table and that results.json
// validates against onramp.schema.json, which must reject a document
// with a field missing.
func TestOnRampComparisonAndSchema(t *testing.T) {
	ideal := func(int64) time.Duration { return time.Millisecond }
	run := func(rctUs, longBps float64, on bool) OnRampRun {
		r := OnRampRun{Requests: 10, RequestsCompleted: 10, RCTP50Us: rctUs / 2, RCTP99Us: rctUs, RCTMaxUs: rctUs,
			LongFlowBps: longBps, KernelCCs: []string{"cubic"}, FCT: []FCTBucket{}, DurationMillis: 1000,
			Responses: 160, BackgroundFlows: 3, SinkResults: 164, CPUBusy: 0.40,
			TCPExt:   map[string]uint64{"TCPLossProbes": 7, "TCPSackRecovery": 2, "TCPRenoRecovery": 1, "TCPDSACKUndo": 3},
			LongFlow: &LongFlowState{CwndP50: 20, SRTTP50Us: 1500, MSS: 1436, BusyMs: 1000, SndbufLimitedMs: 250},
			Runtime:  &RuntimeFigures{SchedLatencyP99Us: 2000, SchedLatencyMaxUs: 8000, GCCycles: 3, GCPauseMaxUs: 500, AllocatedMB: 12}}
		r.BPF = []ProgramCost{{Program: "int_hop", Type: ProgramTC, Runs: 900, NsPerRun: 400}}
		if on {
			busy, above := 0.004, 0.35
			r.OnRamp = &OnRampCounters{Pauses: 5, PauseSeconds: 0.1, Interfaces: 3, Counters: map[string]uint64{"pauses": 5}, BPFBusy: &busy,
				AboveThresholdShare: &above}
			r.BPF = append(r.BPF, ProgramCost{Program: "onramp_egress", Type: ProgramTC, Runs: 800, NsPerRun: 500})
			r.CPUBusy = 0.43
		}
		return r
	}
	rcts := func(base float64) []float64 {
		var out []float64
		for i := range 100 {
			out = append(out, base*(1+float64(i)/100))
		}
		return out
	}
	// 250 small flows support a p95, 1,000 medium ones the p99, and 10
	// large ones no tail percentile at all.
	fcts := func(d time.Duration) []stats.FCT {
		var out []stats.FCT
		for _, b := range []struct {
			n     int
			bytes int64
			d     time.Duration
		}{{250, 5000, d}, {1000, 50_000, 2 * d}, {10, 5_000_000, 10 * d}} {
			for range b.n {
				out = append(out, stats.FCT{Bytes: b.bytes, Duration: b.d})
			}
		}
		return out
	}
	vs := []onrampVariant{{"cubic", false}, {"cubic", true}}
	variants := []OnRampVariant{
		summariseOnRamp(vs[0], []OnRampRun{run(400_000, 40e6, false)}, rcts(100_000), fcts(10*time.Millisecond), ideal),
		summariseOnRamp(vs[1], []OnRampRun{run(100_000, 39e6, true)}, rcts(25_000), fcts(12*time.Millisecond), ideal),
	}
	variants[0].NetRCT, variants[1].NetRCT = summariseRCT(rcts(80_000)), summariseRCT(rcts(40_000))
	variants[1].RCTTail = rctTail([]requestDetail{{rctUs: 49_000, rto: true}, {rctUs: 30_000}}, variants[1].RCT.TailUs, true)
	oneRepeat := []variantSamples{
		{rcts: [][]float64{rcts(100_000)}, fcts: [][]stats.FCT{fcts(10 * time.Millisecond)}},
		{rcts: [][]float64{rcts(25_000)}, fcts: [][]stats.FCT{fcts(12 * time.Millisecond)}},
	}
	cmp, verdict := compareOnRamp([]string{"cubic"}, variants, oneRepeat)
	if len(cmp) != 1 || cmp[0].RCTP99Ratio == nil || math.Abs(*cmp[0].RCTP99Ratio-4) > 1e-9 {
		t.Fatalf("comparison %+v: want an RCT p99 ratio of 4", cmp)
	}
	if r := cmp[0].NetRCTP99Ratio; r == nil || math.Abs(*r-2) > 1e-9 {
		t.Errorf("network RCT p99 ratio %v, want 2", r)
	}
	if l := cmp[0].LongFlowLoss; l == nil || math.Abs(*l-0.025) > 1e-9 {
		t.Errorf("long-flow loss %v, want 0.025", l)
	}
	if l := cmp[0].LongFlowPairedLoss; l == nil || math.Abs(l.Median-0.025) > 1e-9 || l.N != 1 {
		t.Errorf("paired long-flow loss %+v, want 0.025 over one repeat", l)
	}
	if a := cmp[0].CPUAdded; a == nil || math.Abs(a.Median-0.03) > 1e-9 || a.N != 1 || cmp[0].CPUBusier != 1 {
		t.Errorf("CPU added %+v, busier in %d repeats; want 0.03 over one repeat, busier in it", a, cmp[0].CPUBusier)
	}
	if verdict.RCTMet == nil || !*verdict.RCTMet || !verdict.LongFlowMet {
		t.Errorf("verdict %+v: want both targets met", verdict)
	}
	if !slices.Equal(cmp[0].WorseFCT, []string{stats.BucketSmall, stats.BucketMedium}) || cmp[0].WorseRCT {
		t.Errorf("worse: RCT %v, FCT %v; want FCT in the buckets with a tail percentile (20%% slower), not RCT", cmp[0].WorseRCT, cmp[0].WorseFCT)
	}
	for _, x := range cmp[0].FCT {
		want := map[string]float64{stats.BucketSmall: 95, stats.BucketMedium: 99, stats.BucketLarge: 0, stats.BucketAll: 99}[x.Bucket]
		if x.TailP != want || (want > 0) != (x.TailRatio != nil) {
			t.Errorf("bucket %s of %d flows: tail p%g (ratio %v), want p%g", x.Bucket, x.CountWith, x.TailP, x.TailRatio, want)
		}
	}
	rep := &OnRampReport{Results: OnRampResults{Schema: OnRampSchemaID, Scenario: ScenarioOnRamp, Started: time.Unix(0, 0).UTC(),
		Machine:  Machine{Kernel: "6.12", CPUs: 2},
		Topology: OnRampTopology{Kind: "dumbbell", Servers: 16, BackgroundSenders: 4, RateBps: 1e8, BufferBytes: 1 << 18, GSOBytes: 8192, SenderQdisc: "fq", ECNMarker: MarkerHop},
		Workload: OnRampWorkload{DurationSeconds: 1, Fanout: 16, ResponseBytes: 65536, IncastLoad: 0.2, RequestRate: 2.4, MaxRequests: 10,
			BackgroundLoad: 0.4, LongFlows: 1, SampleMicros: 1000, Seed: 1},
		OnRamp: OnRampSettings{ThresholdNs: 2e6, MaxPauseNs: 1e8, Gain: 1.0 / 16, Peers: []string{"198.18.0.0/15"}, Interfaces: 21, BPFStats: true, Strawman: true},
		Repeat: 1, Order: [][]string{{"cubic", "cubic+onramp"}}, Variants: variants, Comparisons: cmp,
		Targets: OnRampTargets{RCTRatio: 3, RCTCC: "cubic", LongFlowLoss: 0.05, WorseMargin: 0.1}, Verdict: verdict,
	}, rcts: [][]float64{rcts(100_000), rcts(25_000)}}
	var table bytes.Buffer
	if err := rep.Table(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cubic+onramp", "4.00x", "- met", "worse with On-Ramp: cubic: background FCT p95 <10KB; cubic: background FCT p99 10KB-1MB", "p95: 0.83x", "On-Ramp BPF %", " 0.40 ", "paired loss %", "2.5 (2.5-2.5)", " 1/1 ", "the strawman: pauses of O - T", "loss probes", "TCPSpuriousRtxHostQueues", "sndbuf-limited %", " 1.50 ", "bg mean FCT ratio >1MB", "echoes > T %", " 35.0 ", "cpu points added", "3.0 (3.0-3.0)"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, table.String())
		}
	}
	for _, v := range rep.Results.Variants {
		if got := v.Figures["recoveries"]; got.Median != 3 {
			t.Errorf("%s: recoveries %+v, want TCPSackRecovery + TCPRenoRecovery = 3", v.Name, got)
		}
		if got := v.Figures["gc_cycles"]; got.Median != 3 {
			t.Errorf("%s: GC cycles %+v, want 3", v.Name, got)
		}
		if got := v.Figures["long_flow_sndbuf_limited_share"]; got.Median != 0.25 {
			t.Errorf("%s: send-buffer-limited share %+v, want 250/1000", v.Name, got)
		}
	}
	noStats := *rep
	noStats.Results.OnRamp.BPFStats = false
	var plain bytes.Buffer
	if err := noStats.Table(&plain); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain.String(), "On-Ramp BPF") {
		t.Errorf("a run without BPF statistics has an On-Ramp BPF column:\n%s", plain.String())
	}
	// Observing only, the targets are not judged; what is worse is still
	// named, as the cost of On-Ramp's presence.
	observed := noStats
	observed.Results.OnRamp.Strawman, observed.Results.OnRamp.Observe = false, true
	var obs bytes.Buffer
	if err := observed.Table(&obs); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"observe only: it paused nothing", "targets: not judged", "worse with On-Ramp observing: cubic: background FCT p95 <10KB"} {
		if !strings.Contains(obs.String(), want) {
			t.Errorf("the table of an observing run lacks %q:\n%s", want, obs.String())
		}
	}
	if strings.Contains(obs.String(), "- met") {
		t.Errorf("the table of an observing run judges a target:\n%s", obs.String())
	}
	dir := t.TempDir()
	files, err := rep.Write(dir)
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	if len(files) != 4 {
		t.Errorf("wrote %v, want results.json and three plots", files)
	}
	schema := compileSchemaDoc(t, OnRampSchema(), OnRampSchemaID)
	js, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	validate(t, schema, js)
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatal(err)
	}
	delete(m["variants"].([]any)[0].(map[string]any), "rct")
	bad, _ := json.Marshal(m)
	doc, _ := jsonschema.UnmarshalJSON(bytes.NewReader(bad))
	if err := schema.Validate(doc); err == nil {
		t.Errorf("the schema accepted a variant without rct")
	}

	// The same runs without a long flow (--onramp-long-flow=false): no
	// long-flow figures, no loss, and a target the table says was not
	// measured.
	noLong := func(r OnRampRun) OnRampRun {
		r.LongFlowBps, r.LongFlow = 0, nil
		r.SinkResults--
		return r
	}
	short := []OnRampVariant{
		summariseOnRamp(vs[0], []OnRampRun{noLong(run(400_000, 40e6, false))}, rcts(100_000), fcts(10*time.Millisecond), ideal),
		summariseOnRamp(vs[1], []OnRampRun{noLong(run(100_000, 39e6, true))}, rcts(25_000), fcts(12*time.Millisecond), ideal),
	}
	for _, v := range short {
		for _, fig := range []string{"long_flow_bps", "long_flow_cwnd_p50", "long_flow_sndbuf_limited_share"} {
			if got, ok := v.Figures[fig]; ok {
				t.Errorf("%s without a long flow: %s %+v, want it absent", v.Name, fig, got)
			}
		}
	}
	cmp, verdict = compareOnRamp([]string{"cubic"}, short, oneRepeat)
	if len(cmp) != 1 || cmp[0].LongFlowLoss != nil || cmp[0].LongFlowPairedLoss != nil || !verdict.LongFlowMet {
		t.Fatalf("without a long flow: comparison %+v, verdict %+v; want no loss and nothing failed", cmp, verdict)
	}
	nl := *rep
	nl.Results.Variants, nl.Results.Comparisons, nl.Results.Verdict = short, cmp, verdict
	nl.Results.Workload.LongFlows = 0
	table.Reset()
	if err := nl.Table(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"4 senders; no long flow;", "long-flow throughput loss with On-Ramp <= 5%: not measured (no long flow)"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("the table without a long flow lacks %q:\n%s", want, table.String())
		}
	}
	// RCT p99 without, with, ratio, p50 ratio, tail ratio, then the net
	// ratio (no net RCTs here), the long flow's rates, loss, paired loss.
	if row := regexp.MustCompile(`(?m)^\s*cubic\s+198\.0\s+49\.5\s+4\.00x\s+4\.00x\s+p90: 4\.00x(\s+-){5}\s`); !row.MatchString(table.String()) {
		t.Errorf("the comparison without a long flow does not show its rates as -:\n%s", table.String())
	}
	writeValid := func(r *OnRampReport) []byte {
		t.Helper()
		dir := t.TempDir()
		if _, err := r.Write(dir); err != nil {
			t.Fatalf("write: %v", err)
		}
		js, err := os.ReadFile(filepath.Join(dir, "results.json"))
		if err != nil {
			t.Fatal(err)
		}
		validate(t, schema, js)
		return js
	}
	writeValid(&nl)

	// Five repeats and more give every tail ratio an interval, and the
	// verdict what is worse beyond the noise.
	iv := &stats.Interval{Lo: 0.7, Hi: 0.9, Level: 0.95, Draws: 1000}
	many := *rep
	many.Results.Repeat = 6
	many.Results.Comparisons = slices.Clone(rep.Results.Comparisons)
	many.Results.Comparisons[0].RCTTailRatioInterval = iv
	many.Results.Comparisons[0].FCT = slices.Clone(rep.Results.Comparisons[0].FCT)
	many.Results.Comparisons[0].FCT[0].TailRatioInterval = iv
	many.Results.Verdict.WorseBeyondNoise = []string{"cubic: background FCT p95 <10KB"}
	if js := writeValid(&many); !bytes.Contains(js, []byte(`"tail_ratio_interval"`)) || !bytes.Contains(js, []byte(`"worse_beyond_noise"`)) {
		t.Errorf("results.json lacks the intervals or worse_beyond_noise:\n%s", js)
	}

	// Runs without a background flow in any size bucket (a short run at
	// a low --load): the FCT plot has nothing to draw and is skipped, and
	// the rest is written.
	nb := *rep
	nb.Results.Comparisons = slices.Clone(rep.Results.Comparisons)
	for i := range nb.Results.Comparisons {
		nb.Results.Comparisons[i].FCT = nil
	}
	dir = t.TempDir()
	files, err = nb.Write(dir)
	if !NothingToPlot(err) {
		t.Fatalf("write without background FCTs: %v, want only a plot with nothing to draw", err)
	}
	if len(files) != 3 || slices.Contains(files, filepath.Join(dir, "onramp-fct-p99.png")) {
		t.Errorf("wrote %v, want results.json and the two RCT plots", files)
	}
}

func TestNothingToPlot(t *testing.T) {
	noData := fmt.Errorf("plot fct x.png: %w", plot.ErrNoData)
	other := errors.New("write x.png: disk full")
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"no error", nil, false},
		{"one plot without data", noData, true},
		{"two plots without data", errors.Join(noData, noData), true},
		{"one of them failed otherwise", errors.Join(noData, other), false},
		{"another failure", other, false},
	}
	for _, tt := range tests {
		if got := NothingToPlot(tt.err); got != tt.want {
			t.Errorf("%s: NothingToPlot(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}

// TestRCTTail checks which requests count as the tail, and that a kernel
// without tcpi_total_rto leaves the timeout count out instead of saying 0.
func TestRCTTail(t *testing.T) {
	reqs := []requestDetail{
		{rctUs: 100, lagUs: 10},
		{rctUs: 400, lagUs: 30, rto: true, retrans: true},
		{rctUs: 500, lagUs: 50, retrans: true},
		{rctUs: 300, lagUs: 20},
	}
	for _, tc := range []struct {
		name             string
		tailUs           float64
		rtos             bool
		want             bool // a tail
		requests, rto    int
		retrans          int
		lagP50           float64
		wantRTOCountNull bool
	}{
		{name: "tail of two", tailUs: 400, rtos: true, want: true, requests: 2, rto: 1, retrans: 2, lagP50: 30},
		{name: "every request", tailUs: 1, rtos: true, want: true, requests: 4, rto: 1, retrans: 2, lagP50: 20},
		{name: "no timeout count", tailUs: 400, want: true, requests: 2, retrans: 2, lagP50: 30, wantRTOCountNull: true},
		{name: "no supported percentile", tailUs: 0, rtos: true},
		{name: "beyond every request", tailUs: 600, rtos: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := rctTail(reqs, tc.tailUs, tc.rtos)
			if !tc.want {
				if got != nil {
					t.Fatalf("got %+v, want no tail", got)
				}
				return
			}
			if got == nil {
				t.Fatal("got no tail")
			}
			if got.Requests != tc.requests || got.WithRetransmit != tc.retrans || got.StartLagP50Us != tc.lagP50 {
				t.Errorf("got %+v, want %d requests, %d retransmitted, lag p50 %v", got, tc.requests, tc.retrans, tc.lagP50)
			}
			switch {
			case tc.wantRTOCountNull && got.WithRTO != nil:
				t.Errorf("with_rto %d on a kernel that does not count timeouts, want it absent", *got.WithRTO)
			case !tc.wantRTOCountNull && (got.WithRTO == nil || *got.WithRTO != tc.rto):
				t.Errorf("with_rto %v, want %d", got.WithRTO, tc.rto)
			}
		})
	}
}

func TestKernelCountsRTOs(t *testing.T) {
	for release, want := range map[string]bool{
		"6.1.0-40-cloud-amd64":       false,
		"6.6.58":                     false,
		"6.7":                        true,
		"6.12.117+deb12-cloud-amd64": true,
		"6.18.44-fc-v657":            true,
		"7.0.1":                      true,
		"5.15.0":                     false,
		"unknown":                    false,
	} {
		if got := kernelCountsRTOs(release); got != want {
			t.Errorf("kernelCountsRTOs(%q) = %v, want %v", release, got, want)
		}
	}
}

// TestPairedByRepeat checks the figures taken between the two runs of a
// repeat: the long flow's loss, the CPU On-Ramp added and a bucket's mean
// FCT ratio. They pair by repeat, not by order; a repeat without both
// runs, or without the figure's base in the run without On-Ramp, is left
// out; the count is of the repeats whose value was larger with On-Ramp.
func TestPairedByRepeat(t *testing.T) {
	loss := func(w, r []OnRampRun) (*Spread, int) { return pairedLoss(w, r), 0 }
	large := func(w, r []OnRampRun) (*Spread, int) { return pairedMeanFCT(w, r, stats.BucketLarge) }
	long := func(repeat int, bps float64) OnRampRun { return OnRampRun{Repeat: repeat, LongFlowBps: bps} }
	busy := func(repeat int, b float64) OnRampRun { return OnRampRun{Repeat: repeat, CPUBusy: b} }
	fct := func(repeat int, large, small float64) OnRampRun {
		r := OnRampRun{Repeat: repeat, FCT: []FCTBucket{}}
		if large > 0 {
			r.FCT = append(r.FCT, FCTBucket{Bucket: stats.BucketLarge, Count: 3, MeanUs: large})
		}
		if small > 0 {
			r.FCT = append(r.FCT, FCTBucket{Bucket: stats.BucketSmall, Count: 9, MeanUs: small})
		}
		return r
	}
	one := func(v float64) *Spread { return &Spread{Median: v, Min: v, Max: v, N: 1} }
	for _, tc := range []struct {
		name          string
		figure        func(without, with []OnRampRun) (*Spread, int)
		without, with []OnRampRun
		want          *Spread
		larger        int
	}{
		{"loss: none", loss, nil, nil, nil, 0},
		{"loss: no run with On-Ramp", loss, []OnRampRun{long(0, 40)}, nil, nil, 0},
		{"loss: one repeat", loss, []OnRampRun{long(0, 40)}, []OnRampRun{long(0, 30)}, one(0.25), 0},
		{"loss: paired by repeat", loss, []OnRampRun{long(0, 40), long(1, 20)}, []OnRampRun{long(1, 22), long(0, 36)},
			&Spread{Median: 0.0, Min: -0.1, Max: 0.1, N: 2}, 0},
		{"loss: a repeat without its pair", loss, []OnRampRun{long(0, 40), long(2, 50)}, []OnRampRun{long(0, 40), long(1, 10)}, one(0), 0},
		{"loss: no long flow without On-Ramp", loss, []OnRampRun{long(0, 0)}, []OnRampRun{long(0, 30)}, nil, 0},
		{"loss: no long flow with On-Ramp, all lost", loss, []OnRampRun{long(0, 40)}, []OnRampRun{long(0, 0)}, one(1), 0},
		{"cpu: none", pairedCPUAdded, nil, nil, nil, 0},
		{"cpu: one repeat, busier", pairedCPUAdded, []OnRampRun{busy(0, 0.5)}, []OnRampRun{busy(0, 0.55)}, one(0.05), 1},
		{"cpu: paired by repeat", pairedCPUAdded, []OnRampRun{busy(0, 0.5), busy(1, 0.4)}, []OnRampRun{busy(1, 0.3), busy(0, 0.6)},
			&Spread{Median: 0, Min: -0.1, Max: 0.1, N: 2}, 1},
		{"cpu: a repeat without its pair", pairedCPUAdded, []OnRampRun{busy(0, 0.5), busy(2, 0.5)}, []OnRampRun{busy(0, 0.5), busy(1, 0.9)}, one(0), 0},
		{"cpu: no figure without On-Ramp", pairedCPUAdded, []OnRampRun{busy(0, 0)}, []OnRampRun{busy(0, 0.5)}, nil, 0},
		{"fct: none", large, nil, nil, nil, 0},
		{"fct: one repeat, slower", large, []OnRampRun{fct(0, 100, 10)}, []OnRampRun{fct(0, 125, 5)}, one(0.8), 1},
		{"fct: paired by repeat", large, []OnRampRun{fct(0, 100, 0), fct(1, 200, 0)}, []OnRampRun{fct(1, 100, 0), fct(0, 125, 0)},
			&Spread{Median: 1.4, Min: 0.8, Max: 2, N: 2}, 1},
		{"fct: a repeat without its pair", large, []OnRampRun{fct(0, 100, 0), fct(2, 50, 0)}, []OnRampRun{fct(0, 100, 0), fct(1, 10, 0)}, one(1), 0},
		{"fct: no flows of the bucket in one run", large, []OnRampRun{fct(0, 0, 10)}, []OnRampRun{fct(0, 100, 10)}, nil, 0},
		{"fct: no flows of the bucket with On-Ramp", large, []OnRampRun{fct(0, 100, 10)}, []OnRampRun{fct(0, 0, 10)}, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, larger := tc.figure(tc.without, tc.with)
			if (got == nil) != (tc.want == nil) || larger != tc.larger {
				t.Fatalf("got %+v, %d larger with On-Ramp; want %+v, %d", got, larger, tc.want, tc.larger)
			}
			if got == nil {
				return
			}
			if got.N != tc.want.N || math.Abs(got.Median-tc.want.Median) > 1e-9 ||
				math.Abs(got.Min-tc.want.Min) > 1e-9 || math.Abs(got.Max-tc.want.Max) > 1e-9 {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestSpreadText checks that a range reaching below zero is printed with
// "to", where a dash would read as a minus sign.
func TestSpreadText(t *testing.T) {
	pct := scaled(100, "%.1f")
	for _, tc := range []struct {
		s    Spread
		want string
	}{
		{Spread{Median: 0.03, Min: 0.01, Max: 0.05, N: 3}, "3.0 (1.0-5.0)"},
		{Spread{Median: 0.01, Min: -0.068, Max: 0.026, N: 3}, "1.0 (-6.8 to 2.6)"},
		{Spread{Median: -0.073, Min: -0.073, Max: -0.073, N: 1}, "-7.3 (-7.3 to -7.3)"},
	} {
		if got := spreadText(tc.s, pct); got != tc.want {
			t.Errorf("spreadText(%+v) = %q, want %q", tc.s, got, tc.want)
		}
	}
}

// TestCompareOnRampIntervals checks the tail ratios' intervals over
// resamples of the repeats: a tail that is worse in every repeat is worse
// beyond the repeats' noise, one that a single repeat's run makes worse is
// not, and fewer than five repeats give no interval and no such verdict.
func TestCompareOnRampIntervals(t *testing.T) {
	// flows is one run's 40 small flows, from scale ms to 39/40 above it.
	flows := func(scale float64) []stats.FCT {
		var out []stats.FCT
		for k := range 40 {
			d := scale * (1 + float64(k)/40)
			out = append(out, stats.FCT{Bytes: 5000, Duration: time.Duration(d * float64(time.Millisecond))})
		}
		return out
	}
	reqs := func(scale float64) []float64 {
		var out []float64
		for k := range 30 {
			out = append(out, scale*1000*(1+float64(k)/30))
		}
		return out
	}
	// build makes n repeats; repeat i's runs have scale i+1, and withSlow
	// says how much slower repeat i's run with On-Ramp is.
	build := func(n int, withSlow func(i int) float64) []variantSamples {
		var without, with variantSamples
		for i := range n {
			scale := float64(i + 1)
			without.add(reqs(scale), flows(scale))
			with.add(reqs(scale), flows(scale*withSlow(i)))
		}
		return []variantSamples{without, with}
	}
	variants := []OnRampVariant{{Name: "cubic", CC: "cubic"}, {Name: "cubic+onramp", CC: "cubic", OnRamp: true}}
	for _, tc := range []struct {
		name         string
		samples      []variantSamples
		wantWorse    bool
		wantBeyond   bool
		wantInterval bool
	}{
		{"slower in every repeat", build(6, func(int) float64 { return 1.3 }), true, true, true},
		{"slower in one repeat only", build(6, func(i int) float64 {
			if i == 5 {
				return 3
			}
			return 1
		}), true, false, true},
		{"the same runs", build(6, func(int) float64 { return 1 }), false, false, true},
		{"too few repeats to tell", build(4, func(int) float64 { return 1.3 }), true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmp, verdict := compareOnRamp([]string{"cubic"}, variants, tc.samples)
			if len(cmp) != 1 {
				t.Fatalf("comparisons %+v: want one", cmp)
			}
			var x *FCTComparison
			for i := range cmp[0].FCT {
				if cmp[0].FCT[i].Bucket == stats.BucketSmall {
					x = &cmp[0].FCT[i]
				}
			}
			if x == nil || x.TailP == 0 {
				t.Fatalf("small flows %+v: want a tail percentile", x)
			}
			small := fmt.Sprintf("cubic: background FCT p%g %s", x.TailP, stats.BucketSmall)
			if got := slices.Contains(verdict.Worse, small); got != tc.wantWorse {
				t.Errorf("worse %v: %q listed %v, want %v", verdict.Worse, small, got, tc.wantWorse)
			}
			if got := slices.Contains(verdict.WorseBeyondNoise, small); got != tc.wantBeyond {
				t.Errorf("worse beyond noise %v: %q listed %v, want %v", verdict.WorseBeyondNoise, small, got, tc.wantBeyond)
			}
			if verdict.WorseBeyondNoise == nil {
				t.Error("worse beyond noise is nil, want an empty list in the JSON")
			}
			for _, iv := range []*stats.Interval{x.TailRatioInterval, cmp[0].RCTTailRatioInterval} {
				if (iv != nil) != tc.wantInterval {
					t.Fatalf("interval %+v: want one %v", iv, tc.wantInterval)
				}
				if iv != nil && (iv.Lo > iv.Hi || iv.Level != onrampIntervalLevel || iv.Draws != onrampIntervalDraws) {
					t.Errorf("interval %+v: want lo <= hi, level %v, %d draws", iv, onrampIntervalLevel, onrampIntervalDraws)
				}
			}
		})
	}
	// The table gives each tail ratio its interval, and names what is
	// worse beyond the noise.
	cmp, verdict := compareOnRamp([]string{"cubic"}, variants, build(6, func(int) float64 { return 1.3 }))
	rep := &OnRampReport{Results: OnRampResults{Repeat: 6, Variants: variants, Comparisons: cmp, Verdict: verdict,
		Targets: OnRampTargets{RCTRatio: 3, RCTCC: "cubic", LongFlowLoss: 0.05, WorseMargin: 0.1}}}
	var table bytes.Buffer
	if err := rep.Table(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"p95: 0.77x (0.77-0.77)", "the middle 95% of that ratio over 1000 resamples of the repeats",
		"worse with On-Ramp beyond the repeats' noise (interval below 1): cubic: background FCT p95 <10KB\n"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, table.String())
		}
	}
}

// TestMergePrograms checks that programs of one name and type, which
// On-Ramp loads once per interface, become one entry whose cost is the
// mean over all their runs, and what share of the CPUs On-Ramp's
// programs took.
func TestMergePrograms(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []ProgramCost
		want []ProgramCost
		busy float64 // over 1 s on 2 CPUs
	}{
		{name: "none", in: nil, want: nil},
		{
			name: "one per interface",
			in: []ProgramCost{
				{Program: "onramp_egress", Type: ProgramTC, Runs: 1000, NsPerRun: 300},
				{Program: "int_hop", Type: ProgramTC, Runs: 1500, NsPerRun: 200},
				{Program: "onramp_egress", Type: ProgramTC, Runs: 3000, NsPerRun: 100},
			},
			want: []ProgramCost{
				{Program: "onramp_egress", Type: ProgramTC, Runs: 4000, NsPerRun: 150},
				{Program: "int_hop", Type: ProgramTC, Runs: 1500, NsPerRun: 200},
			},
			busy: 4000 * 150 / 2e9,
		},
		{
			name: "same name, other type",
			in: []ProgramCost{
				{Program: "onramp_sockops", Type: ProgramSockOps, Runs: 10, NsPerRun: 1000},
				{Program: "onramp_sockops", Type: ProgramTC, Runs: 20, NsPerRun: 500},
				{Program: "bpf_dctcp", Type: ProgramStructOps, Runs: 5000, NsPerRun: 80},
			},
			want: []ProgramCost{
				{Program: "bpf_dctcp", Type: ProgramStructOps, Runs: 5000, NsPerRun: 80},
				{Program: "onramp_sockops", Type: ProgramTC, Runs: 20, NsPerRun: 500},
				{Program: "onramp_sockops", Type: ProgramSockOps, Runs: 10, NsPerRun: 1000},
			},
			busy: (10*1000 + 20*500) / 2e9,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mergePrograms(tc.in)
			if !slices.Equal(got, tc.want) {
				t.Errorf("mergePrograms = %+v, want %+v", got, tc.want)
			}
			if b := onrampBPFBusy(got, time.Second, 2); math.Abs(b-tc.busy) > 1e-12 {
				t.Errorf("onrampBPFBusy = %g, want %g", b, tc.busy)
			}
		})
	}
	if b := onrampBPFBusy([]ProgramCost{{Program: "onramp_egress", Runs: 1, NsPerRun: 1}}, 0, 2); b != 0 {
		t.Errorf("onrampBPFBusy over no time = %g, want 0", b)
	}
}

// TestOnRampScenarioQuick runs `ccload bench --scenario onramp --quick`
// with cubic and bpf_dctcp (a kernel CC, and one of ccload's that needs
// ECN: each CC costs two enables of On-Ramp, over a minute in a TCG
// guest), the servers answering on persistent connections, and again
// with cubic alone and a connection per response (--response-conns new).
// It checks that the results are well formed, not
// how well On-Ramp does: every variant ran once; every request, response,
// background flow and the long flow completed, and the client received
// every byte intact, on one connection per server or one per response; no figure is NaN or infinite (results.json would not
// encode) and the file validates against its schema; the runs with
// On-Ramp have its counters, with echoes and a clock offset for every
// stamp and echo, the costs of its three programs and their share of
// the CPUs, and the costs of the floors run where its programs run, and
// the runs without have none of these;
// the plots exist; and nothing is left behind: no netns, no attached CC,
// no On-Ramp pins. On a kernel without sch_fq it skips (it runs in the
// vmtests guests).
func TestOnRampScenarioQuick(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tc := range []struct {
		name              string
		ccs               []string
		newConns, observe bool
	}{
		{"persistent connections", []string{"cubic", "bpf_dctcp"}, false, false},
		{"a connection per response", []string{"cubic"}, true, false},
		{"observing only", []string{"cubic"}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) { testOnRampScenarioQuick(t, tc.ccs, tc.newConns, tc.observe) })
	}
}

func testOnRampScenarioQuick(t *testing.T, ccs []string, newConns, observe bool) {
	host := testutil.Host(t)
	n := sockops.New(host)
	l := loader.New(host, loader.WithSharedMaps(n.Store()))
	before, err := l.List()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := RunOnRamp(ctx, l, n, OnRampConfig{Quick: true, CCs: ccs, Prefix: "cbq", BPFCosts: true, NewConnPerResponse: newConns,
		Observe: observe}, &progress)
	t.Logf("progress:\n%s", progress.String())
	if left, _ := filepath.Glob("/var/run/netns/cbq*"); len(left) > 0 {
		t.Errorf("network namespaces left behind: %v", left)
	}
	if errors.Is(err, qdisc.ErrNoFQ) {
		testutil.SkipKernelLacks(t, "sch_fq")
	}
	if err != nil {
		t.Fatalf("run: %v (fix: %s)", err, kernel.FixOf(err))
	}
	var table bytes.Buffer
	if err := rep.Table(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())

	res := rep.Results
	if res.Topology.SenderRateBps != res.Topology.RateBps {
		t.Errorf("senders' flows capped at %d bit/s, want the bottleneck's %d by default", res.Topology.SenderRateBps, res.Topology.RateBps)
	}
	if len(res.Variants) != 2*len(ccs) || len(res.Comparisons) != len(ccs) || len(res.Order) != 1 || len(res.Order[0]) != 2*len(ccs) {
		t.Fatalf("%d variants, %d comparisons, order %v for %d CCs", len(res.Variants), len(res.Comparisons), res.Order, len(ccs))
	}
	for _, v := range res.Variants {
		if len(v.Runs) != 1 {
			t.Fatalf("%s: %d runs, want 1", v.Name, len(v.Runs))
		}
		r := v.Runs[0]
		switch {
		case r.Requests == 0 || r.RequestsCompleted != r.Requests:
			t.Errorf("%s: %d of %d requests completed", v.Name, r.RequestsCompleted, r.Requests)
		case r.Responses != r.Requests*res.Workload.Fanout || r.ResponsesFailed > 0:
			t.Errorf("%s: %d responses (%d failed) for %d requests", v.Name, r.Responses, r.ResponsesFailed, r.Requests)
		case r.BackgroundFailed > 0 || r.LongFlowFailed || !(r.LongFlowBps > 0):
			t.Errorf("%s: %d of %d background flows failed; long flow failed %v at %.0f bit/s", v.Name, r.BackgroundFailed, r.BackgroundFlows, r.LongFlowFailed, r.LongFlowBps)
		case newConns && (r.ResponseConns != 0 || res.Workload.ResponseConns != "new"):
			t.Errorf("%s: %d persistent connections (%q), want none with a connection per response", v.Name, r.ResponseConns, res.Workload.ResponseConns)
		case !newConns && (r.ResponseConns != res.Workload.Fanout || r.ResponseConnsFailed > 0 || res.Workload.ResponseConns != "persistent"):
			t.Errorf("%s: %d persistent connections (%d failed, %q), want one per server, %d", v.Name, r.ResponseConns, r.ResponseConnsFailed, res.Workload.ResponseConns, res.Workload.Fanout)
		case r.SinkBad > 0 || r.SinkResults != responseConns(r)+r.BackgroundFlows+1:
			t.Errorf("%s: the client has %d results (%d bad) for %d flows", v.Name, r.SinkResults, r.SinkBad, responseConns(r)+r.BackgroundFlows+1)
		}
		if v.RCT.Count != r.RequestsCompleted || !(v.RCT.P50Us > 0) || v.RCT.P99Us < v.RCT.P50Us {
			t.Errorf("%s: RCT %+v", v.Name, v.RCT)
		}
		if rt := r.Runtime; rt == nil || !(rt.AllocatedMB > 0) || rt.SchedLatencyMaxUs < rt.SchedLatencyP99Us {
			t.Errorf("%s: the bench process's runtime figures %+v: want bytes allocated, and max latency at or above p99", v.Name, rt)
		}
		if v.NetRCT.Count != v.RCT.Count || !(v.NetRCT.P50Us > 0) || v.NetRCT.MaxUs > v.RCT.MaxUs {
			t.Errorf("%s: network RCT %+v against RCT %+v: a request's slowest response cannot outlast the request", v.Name, v.NetRCT, v.RCT)
		}
		if r.QueueSamples == 0 || !(r.Utilization > 0) {
			t.Errorf("%s: %d queue samples, utilisation %v", v.Name, r.QueueSamples, r.Utilization)
		}
		if v.OnRamp != (r.OnRamp != nil) {
			t.Errorf("%s: On-Ramp counters %v", v.Name, r.OnRamp)
		}
		if o := r.OnRamp; o != nil && (o.Interfaces != res.OnRamp.Interfaces || o.Counters["echoes"] == 0 || o.Counters["rx_stamps"] == 0 ||
			o.Counters["no_clock"] > 0 || o.Counters["rx_no_clock"] > 0) {
			t.Errorf("%s: On-Ramp on %d of %d interfaces, counters %v", v.Name, o.Interfaces, res.OnRamp.Interfaces, o.Counters)
		}
		if o := r.OnRamp; o != nil && (o.AboveThresholdShare == nil || *o.AboveThresholdShare < 0 || *o.AboveThresholdShare > 1) {
			t.Errorf("%s: the share of echoes above T is %v, want one in [0, 1]", v.Name, o.AboveThresholdShare)
		}
		if o := r.OnRamp; o != nil && observe && (o.Pauses != 0 || o.Counters["delayed"] != 0 || o.Counters["start_paused"] != 0) {
			t.Errorf("%s: observing only, On-Ramp paused: %d pauses, counters %v", v.Name, o.Pauses, o.Counters)
		}
		var onrampProgs []string
		for _, p := range r.BPF {
			if strings.HasPrefix(p.Program, onrampProgramPrefix) {
				onrampProgs = append(onrampProgs, p.Program)
			}
		}
		slices.Sort(onrampProgs)
		switch want := []string{"onramp_egress", "onramp_ingress", "onramp_sockops"}; {
		case v.OnRamp && !slices.Equal(onrampProgs, want):
			t.Errorf("%s: On-Ramp's programs that ran: %v, want %v (all programs: %+v)", v.Name, onrampProgs, want, r.BPF)
		case !v.OnRamp && len(onrampProgs) > 0:
			t.Errorf("%s: On-Ramp's programs ran without On-Ramp: %v", v.Name, onrampProgs)
		case v.OnRamp && (r.OnRamp == nil || r.OnRamp.BPFBusy == nil || !(*r.OnRamp.BPFBusy > 0)):
			t.Errorf("%s: no share of the CPUs for On-Ramp's programs: %+v", v.Name, r.OnRamp)
		}
		// The floors ran where On-Ramp's programs did, so at least about
		// as often (each packet the interfaces carried while the tc
		// floor was attached, some before On-Ramp was; every sockops
		// callback of the cgroup's sockets), and only in the runs with
		// On-Ramp.
		var tcFloorRuns, sockopsFloorRuns, tcRuns, sockopsRuns uint64
		for _, p := range r.BPF {
			switch p.Program {
			case tcFloorName:
				tcFloorRuns = p.Runs
			case sockopsFloorName:
				sockopsFloorRuns = p.Runs
			case "onramp_egress", "onramp_ingress":
				tcRuns += p.Runs
			case "onramp_sockops":
				sockopsRuns = p.Runs
			}
		}
		switch o := r.OnRamp; {
		case v.OnRamp && (tcFloorRuns < tcRuns/2 || sockopsFloorRuns < sockopsRuns/2 || o == nil ||
			o.TCFloorNsPerRun == nil || !(*o.TCFloorNsPerRun > 0) || o.SockopsFloorNsPerRun == nil || !(*o.SockopsFloorNsPerRun > 0)):
			t.Errorf("%s: the floors ran %d (tc) and %d (sockops) times against On-Ramp's programs' %d and %d, On-Ramp's counters %+v",
				v.Name, tcFloorRuns, sockopsFloorRuns, tcRuns, sockopsRuns, o)
		case !v.OnRamp && tcFloorRuns+sockopsFloorRuns > 0:
			t.Errorf("%s: the floors ran %d (tc) and %d (sockops) times without On-Ramp", v.Name, tcFloorRuns, sockopsFloorRuns)
		}
		if l := r.LongFlow; l == nil || !(l.CwndP50 > 0) || !(l.SRTTP50Us > 0) || l.MSS == 0 || !(l.BusyMs > 0) {
			t.Errorf("%s: the long flow's TCP_INFO %+v", v.Name, l)
		}
		if _, ok := r.TCPExt["TCPLossProbes"]; !ok {
			t.Errorf("%s: no TcpExt counters of the senders: %v", v.Name, r.TCPExt)
		}
		if v.CC == "bpf_dctcp" && !slices.Equal(v.KernelCCs, []string{"bpf_dctcp"}) {
			t.Errorf("%s ran as %v: ECN was not negotiated", v.Name, v.KernelCCs)
		}
	}
	for _, c := range res.Comparisons {
		if c.RCTP99Ratio == nil || c.LongFlowLoss == nil {
			t.Errorf("%s: comparison without a ratio: %+v", c.CC, c)
		}
		if c.CPUAdded == nil || c.CPUAdded.N != 1 {
			t.Errorf("%s: CPU added by On-Ramp %+v, want one repeat's", c.CC, c.CPUAdded)
		}
	}

	dir := t.TempDir()
	files, err := rep.Write(dir)
	if err != nil {
		t.Fatalf("write: %v (results.json must encode: no NaN or Inf)", err)
	}
	if len(files) != 4 {
		t.Errorf("wrote %v, want results.json and three plots", files)
	}
	js, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	validate(t, compileSchemaDoc(t, OnRampSchema(), OnRampSchemaID), js)

	after, err := l.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("attached CCs before the bench %v, after %v", before, after)
	}
	if matches, _ := filepath.Glob(filepath.Join(kernel.DefaultHost().BPFFS, "ccload-bench-onramp-*")); len(matches) > 0 {
		t.Errorf("On-Ramp's bench pins left behind: %v", matches)
	}
	// The kernel frees a closed program after an RCU grace period.
	deadline := time.Now().Add(10 * time.Second)
	for _, name := range []string{tcFloorName, sockopsFloorName} {
		for n := programsNamed(name); n > 0; n = programsNamed(name) {
			if time.Now().After(deadline) {
				t.Errorf("%d %s programs left in the kernel", n, name)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// programsNamed counts the BPF programs in the kernel named name.
func programsNamed(name string) int {
	n := 0
	_ = kernel.WalkPrograms(func(_ ebpf.ProgramID, _ *ebpf.Program, info *ebpf.ProgramInfo) bool {
		if info.Name == name {
			n++
		}
		return true
	})
	return n
}

// responseConns is how many connections carried a run's responses.
func responseConns(r OnRampRun) int {
	if r.ResponseConns > 0 {
		return r.ResponseConns
	}
	return r.Responses
}

func TestParseBacklogDrops(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       uint64
		err        bool
	}{
		{name: "two CPUs", text: "0000a1b2 00000003 00000000 00000000\n0000c3d4 0000000f 00000001 00000000\n", want: 18},
		{name: "none dropped", text: "00000001 00000000 00000000\n", want: 0},
		{name: "short line", text: "00000001\n", err: true},
		{name: "not hex", text: "00000001 zz 00000000\n", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseBacklogDrops(tc.text)
			if (err != nil) != tc.err {
				t.Fatalf("err %v, want an error: %v", err, tc.err)
			}
			if got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

// TestReadTCPExt reads a fresh namespace's counters: every counter the
// bench records is there, and nothing has been counted yet.
func TestReadTCPExt(t *testing.T) {
	testutil.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := testbed.NewPair(ctx, "cbx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	c, err := sumTCPExt([]*testbed.Host{p.A})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range tcpExtNames() {
		if v, ok := c[k]; !ok || v != 0 {
			t.Errorf("%s: %d (present %v), want 0 in a new namespace", k, v, ok)
		}
	}
}

// TestOnRampSummaryLine checks that the progress line names the long flow
// only in runs that had one.
func TestOnRampSummaryLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  OnRampRun
		long bool
	}{
		{name: "long flow", run: OnRampRun{Requests: 2, RequestsCompleted: 2, LongFlowBps: 38.2e6, LongFlow: &LongFlowState{CwndP50: 4}}, long: true},
		{name: "long flow starved", run: OnRampRun{Requests: 2, RequestsCompleted: 2, LongFlow: &LongFlowState{}}, long: true},
		{name: "long flow failed", run: OnRampRun{Requests: 2, RequestsCompleted: 2, LongFlowFailed: true}, long: true},
		{name: "no long flow", run: OnRampRun{Requests: 2, RequestsCompleted: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line := onrampSummaryLine(tc.run)
			if got := strings.Contains(line, "long flow"); got != tc.long {
				t.Errorf("%q: names the long flow %v, want %v", line, got, tc.long)
			}
			if !strings.HasPrefix(line, "2/2 requests, RCT p50 ") || !strings.Contains(line, ", queue p99 ") {
				t.Errorf("%q: lacks the requests or the queue", line)
			}
		})
	}
}
