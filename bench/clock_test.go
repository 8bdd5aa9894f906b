package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/ccload/ccload/internal/testutil"
)

// TestClockScenarioQuick runs `ccload bench --scenario clock --quick` at
// two loads, ptp4l beside the agents, and checks what the scenario
// promises: every estimate has samples at every load, the figures are
// finite, the series and the files are written. Its one bound on accuracy
// (published p50 under 100 µs with no load, against injected offsets of
// milliseconds) would catch an estimator that follows the injected
// clocks' skew, not noise; the accuracy itself is the bench's to report.
func TestClockScenarioQuick(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := ptp4lPath(); err != nil {
		testutil.Skip(t, "ptp4l not installed: apt-get install linuxptp")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	report, err := RunClock(ctx, ClockConfig{Quick: true, Loads: []float64{0, 0.4}, PTP: true, Seed: 7}, io.Discard)
	if err != nil {
		t.Fatalf("run the clock scenario: %v", err)
	}
	res := report.Results
	if res.Schema != ClockSchemaID || res.Scenario != ScenarioClock || len(res.Clocks) != res.Agents {
		t.Errorf("header: schema %q, scenario %q, %d clocks for %d agents", res.Schema, res.Scenario, len(res.Clocks), res.Agents)
	}
	if len(res.Loads) != 2 {
		t.Fatalf("%d loads, want 2", len(res.Loads))
	}
	for _, l := range res.Loads {
		for name, s := range map[string]ErrorSummary{
			"published": l.Published, "direct": l.Direct, "midpoint": l.Midpoint,
			"across bottleneck": l.AcrossBottleneck, "drift": l.DriftPPM,
		} {
			if s.N == 0 {
				t.Errorf("load %.1f: no %s samples", l.Load, name)
			}
			for _, v := range []float64{s.P50, s.P99, s.Max} {
				if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
					t.Errorf("load %.1f: %s summary %+v is not a distance", l.Load, name, s)
					break
				}
			}
		}
		if l.Windows == 0 || len(l.Series) == 0 {
			t.Errorf("load %.1f: %d windows counted, %d series points", l.Load, l.Windows, len(l.Series))
		}
		if l.PTP4L.N == 0 && l.PTP4LError == "" {
			t.Logf("load %.1f: ptp4l printed no sample in the quick run", l.Load)
		}
		t.Logf("load %.1f: published p50 %.0f ns p99 %.0f ns, drift p50 %.3f ppm, pure %.0f%%",
			l.Load, l.Published.P50, l.Published.P99, l.DriftPPM.P50, 100*l.PureShare)
	}
	if p50 := res.Loads[0].Published.P50; p50 > 100_000 {
		t.Errorf("published |offset error| p50 %.0f ns with no load: the agents do not recover the injected offsets", p50)
	}

	dir := t.TempDir()
	files, err := report.Write(dir)
	if err != nil {
		t.Fatalf("write the results: %v", err)
	}
	if len(files) != 2 {
		t.Errorf("wrote %v, want results.json and clock-error.png", files)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back ClockResults
	if err := json.Unmarshal(raw, &back); err != nil || len(back.Loads) != 2 {
		t.Errorf("results.json does not decode to the results: %v", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if err := compileSchemaDoc(t, ClockSchema(), ClockSchemaID).Validate(doc); err != nil {
		t.Errorf("results.json does not match clock.schema.json: %v", err)
	}
	if err := report.Table(io.Discard); err != nil {
		t.Errorf("print the table: %v", err)
	}
}

// TestClockSchemaRejectsBadResults checks that the clock schema has
// teeth: a document missing a required field, or with a value out of
// range, is rejected, and a good one passes.
func TestClockSchemaRejectsBadResults(t *testing.T) {
	s := compileSchemaDoc(t, ClockSchema(), ClockSchemaID)
	good := ClockResults{Schema: ClockSchemaID, Scenario: ScenarioClock, Started: time.Unix(0, 0).UTC(),
		Machine: Machine{Kernel: "6.18", CPUs: 2}, RateBps: 1e9, Agents: 5, WindowMs: 2000, ProbeRate: 100,
		Clocks: []InjectedClock{{Host: "snd0", Addr: "198.18.0.2", OffsetNs: 1_300_000, DriftPPM: 5}},
		Loads: []ClockLoad{{Load: 0.8, AchievedLoad: 0.78, Windows: 33, Published: ErrorSummary{N: 10, P50: 1, P99: 2, Max: 3},
			Series: []ClockPoint{{AtMs: 8000, ErrorNs: 12}}}},
	}
	check := func(name string, mutate func(m map[string]any), wantOK bool) {
		t.Run(name, func(t *testing.T) {
			raw, err := json.Marshal(good)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			mutate(m)
			raw, _ = json.Marshal(m)
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Validate(doc); (err == nil) != wantOK {
				t.Errorf("valid: %v, want %v (%v)", err == nil, wantOK, err)
			}
		})
	}
	load := func(m map[string]any) map[string]any { return m["loads"].([]any)[0].(map[string]any) }
	check("good", func(map[string]any) {}, true)
	check("no loads", func(m map[string]any) { delete(m, "loads") }, false)
	check("wrong schema", func(m map[string]any) { m["schema"] = SchemaID }, false)
	check("load of 1", func(m map[string]any) { load(m)["load"] = 1.0 }, false)
	check("negative error", func(m map[string]any) { load(m)["published"].(map[string]any)["p99"] = -1.0 }, false)
	check("unknown field", func(m map[string]any) { load(m)["surprise"] = 1 }, false)
}
