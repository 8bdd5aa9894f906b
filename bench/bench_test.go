package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/telemetry/sockops"
)

// compileSchema compiles results.schema.json.
func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	return compileSchemaDoc(t, Schema(), SchemaID)
}

// compileSchemaDoc compiles the JSON Schema raw, whose $id is id.
func compileSchemaDoc(t *testing.T, raw []byte, id string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(id, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(id)
	if err != nil {
		t.Fatalf("compile %s: %v", id, err)
	}
	return s
}

// validate checks a results.json document against the schema.
func validate(t *testing.T, s *jsonschema.Schema, js []byte) {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
	if err != nil {
		t.Fatalf("results.json is not JSON: %v", err)
	}
	if err := s.Validate(doc); err != nil {
		t.Fatalf("results.json does not match results.schema.json: %v", err)
	}
}

// TestSchemaRejectsBadResults checks that the schema has teeth: a document
// missing a required field, or with a value out of range, is rejected.
func TestSchemaRejectsBadResults(t *testing.T) {
	s := compileSchema(t)
	good := Results{Schema: SchemaID, Scenario: ScenarioLongflow, Started: time.Unix(0, 0).UTC(),
		Machine:  Machine{Kernel: "6.18", CPUs: 2},
		Topology: Topology{Kind: "dumbbell", Senders: 1, RateBps: 1e9, BufferBytes: 1 << 20},
		Workload: Workload{DurationSeconds: 3, SampleMicros: 100, Seed: 1},
		Repeat:   1, Order: [][]string{{"cubic"}},
		CCs: []CCResult{{CC: "cubic", KernelCCs: []string{"cubic"},
			Figures: map[string]Spread{"throughput_bps": {Median: 1e9, Min: 1e9, Max: 1e9, N: 1}},
			FCT:     []PooledFCT{{Bucket: "all", Count: 20, P50Us: 10, TailP: 50, TailUs: 10}},
			Runs: []RunResult{{KernelCCs: []string{"cubic"}, FCT: []FCTBucket{
				{Bucket: "all", Count: 1, P50Us: 10, P99Us: 10, P999Us: 10}}}}}},
	}
	js, err := json.Marshal(good)
	if err != nil {
		t.Fatal(err)
	}
	validate(t, s, js)

	for _, tc := range []struct {
		name string
		edit func(m map[string]any)
	}{
		{"no ccs", func(m map[string]any) { delete(m, "ccs") }},
		{"empty ccs", func(m map[string]any) { m["ccs"] = []any{} }},
		{"unknown scenario", func(m map[string]any) { m["scenario"] = "bulk" }},
		{"no repeat", func(m map[string]any) { delete(m, "repeat") }},
		{"cc without runs", func(m map[string]any) { delete(cc0(m), "runs") }},
		{"run without throughput", func(m map[string]any) { delete(run0(m), "throughput_bps") }},
		{"negative queue", func(m map[string]any) { run0(m)["queue_p99_bytes"] = -1 }},
		{"unknown bucket", func(m map[string]any) { cc0(m)["fct"].([]any)[0].(map[string]any)["bucket"] = "huge" }},
		{"unsupported tail percentile", func(m map[string]any) { cc0(m)["fct"].([]any)[0].(map[string]any)["tail_p"] = 97 }},
		{"spread without median", func(m map[string]any) {
			delete(cc0(m)["figures"].(map[string]any)["throughput_bps"].(map[string]any), "median")
		}},
		{"cpu over 1", func(m map[string]any) { run0(m)["cpu_busy"] = 1.5 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m map[string]any
			if err := json.Unmarshal(js, &m); err != nil {
				t.Fatal(err)
			}
			tc.edit(m)
			bad, _ := json.Marshal(m)
			doc, _ := jsonschema.UnmarshalJSON(bytes.NewReader(bad))
			if err := s.Validate(doc); err == nil {
				t.Fatalf("the schema accepted %s", bad)
			}
		})
	}
}

// cc0 and run0 are the first CC and its first run of a decoded
// results.json.
func cc0(m map[string]any) map[string]any { return m["ccs"].([]any)[0].(map[string]any) }
func run0(m map[string]any) map[string]any {
	return cc0(m)["runs"].([]any)[0].(map[string]any)
}

// TestConfigValidation checks the errors of bad configurations.
func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"unknown scenario", Config{Scenario: "bulk"}, "unknown scenario"},
		{"load too high", Config{Scenario: ScenarioWebsearch, Load: 1.5}, "load 1.5"},
		{"duplicate cc", Config{Scenario: ScenarioLongflow, CCs: []string{"cubic", "cubic"}}, "distinct"},
		{"short duration", Config{Scenario: ScenarioLongflow, Duration: time.Millisecond}, "duration"},
		{"one fairness flow", Config{Scenario: ScenarioFairness, Flows: 1}, "fairness flows"},
		{"fine sampling", Config{Scenario: ScenarioLongflow, SampleInterval: time.Microsecond}, "sample interval"},
		{"too many repeats", Config{Scenario: ScenarioLongflow, Repeat: MaxRepeat + 1}, "repeat"},
		{"negative repeats", Config{Scenario: ScenarioLongflow, Repeat: -1}, "repeat"},
		{"unknown marker", Config{Scenario: ScenarioLongflow, Marker: "red"}, `ECN marker "red"`},
		{"fq_codel without K", Config{Scenario: ScenarioLongflow, Marker: MarkerFQCodel, NoECN: true}, "no ECN threshold"},
		{"INT tag nth=0", Config{Scenario: ScenarioLongflow, INTTag: "nth=0"}, "INT tag nth=0"},
		{"unknown INT tag", Config{Scenario: ScenarioLongflow, INTTag: "some"}, `INT tag "some"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.withDefaults().validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
	if err := (Config{Scenario: ScenarioIncast}).withDefaults().validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if c := (Config{Scenario: ScenarioIncast}).withDefaults(); c.Marker != MarkerHop || c.INTTag != DefaultINTTag {
		t.Errorf("default marker %q and INT tag %q, want %q and %q", c.Marker, c.INTTag, MarkerHop, DefaultINTTag)
	}
}

// netnsWithPrefix lists the named network namespaces that start with
// prefix, as `ip netns list` shows them.
func netnsWithPrefix(t *testing.T, prefix string) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns list: %v", err)
	}
	var got []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix) {
			got = append(got, f[0])
		}
	}
	return got
}

// TestINTTagInEffect checks which tagging the bench records and runs the
// INT CCs with: the requested one while INT is off, and an enabled INT's
// own, which a different --int-tag must not claim to override.
func TestINTTagInEffect(t *testing.T) {
	testutil.RequireRoot(t)
	n := sockops.New(testutil.Host(t))
	if tag, err := intTagInEffect(n, "nth=2", true); err != nil || tag != "nth=2" {
		t.Fatalf("INT off: tag %q, %v; want the requested nth=2", tag, err)
	}
	if _, err := n.Enable(sockops.Config{Peers: intPeers(), Every: 4}); err != nil {
		t.Fatalf("enable INT: %v (fix: %s)", err, kernel.FixOf(err))
	}
	t.Cleanup(func() {
		if _, err := n.Disable(); err != nil {
			t.Errorf("disable INT: %v", err)
		}
	})
	for _, tc := range []struct {
		requested string
		want      string // the tag in effect; "" when it must fail
	}{
		{"", "nth=4"},
		{"nth=4", "nth=4"},
		{"every", ""},
		{"tso-head", ""},
	} {
		t.Run("requested "+tc.requested, func(t *testing.T) {
			tag, err := intTagInEffect(n, Config{INTTag: tc.requested}.withDefaults().INTTag, tc.requested != "")
			switch {
			case tc.want == "" && (err == nil || !strings.Contains(err.Error(), "already enabled with tag nth=4")):
				t.Fatalf("tag %q, %v; want an error naming the enabled nth=4", tag, err)
			case tc.want != "" && (err != nil || tag != tc.want):
				t.Fatalf("tag %q, %v; want %q", tag, err, tc.want)
			}
		})
	}
}

// TestQuickScenarios runs every scenario in --quick mode with every
// default CC, as CI's smoke run (longflow twice per CC, to cover repeats),
// and checks that each CC moved traffic, that results.json validates
// against the schema, that the plots exist, that the ECN probe found the
// CCs that need ECN, and that nothing is left behind: no netns, no
// attached CC, no INT.
func TestQuickScenarios(t *testing.T) {
	testutil.RequireRoot(t)
	host := testutil.Host(t)
	n := sockops.New(host)
	l := loader.New(host, loader.WithSharedMaps(n.Store()))
	before, err := l.List()
	if err != nil {
		t.Fatal(err)
	}
	schema := compileSchema(t)
	for _, sc := range Scenarios() {
		t.Run(sc, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cfg := Config{Scenario: sc, Quick: true, Prefix: "cbt"}
			if sc == ScenarioLongflow {
				cfg.Repeat = 2
			}
			var progress bytes.Buffer
			rep, err := Run(ctx, l, n, cfg, &progress)
			t.Logf("progress:\n%s", progress.String())
			if left := netnsWithPrefix(t, "cbt"); len(left) > 0 {
				t.Errorf("network namespaces left behind: %v", left)
			}
			if err != nil {
				t.Fatalf("run: %v (fix: %s)", err, kernel.FixOf(err))
			}
			var table bytes.Buffer
			if err := rep.Table(&table); err != nil {
				t.Fatal(err)
			}
			t.Logf("\n%s", table.String())
			dir := t.TempDir()
			files, err := rep.Write(dir)
			if err != nil {
				t.Fatalf("write: %v", err)
			}
			js, err := os.ReadFile(filepath.Join(dir, "results.json"))
			if err != nil {
				t.Fatal(err)
			}
			validate(t, schema, js)
			if len(files) < 3 {
				t.Errorf("wrote only %v", files)
			}
			if len(rep.Results.CCs) != len(DefaultCCs()) {
				t.Fatalf("%d results for %d CCs", len(rep.Results.CCs), len(DefaultCCs()))
			}
			repeats := max(cfg.Repeat, 1)
			if len(rep.Results.Order) != repeats || rep.Results.Order[0][0] != DefaultCCs()[0] ||
				(repeats > 1 && rep.Results.Order[1][0] != DefaultCCs()[1]) {
				t.Errorf("run order %v: want %d repeats, each rotated by one place", rep.Results.Order, repeats)
			}
			for _, c := range rep.Results.CCs {
				if len(c.Runs) != repeats {
					t.Fatalf("%s: %d runs, want %d", c.CC, len(c.Runs), repeats)
				}
				for _, run := range c.Runs {
					if run.Utilization < 0.2 || run.FlowsFailed > 0 {
						t.Errorf("%s repeat %d: utilisation %.2f, %d of %d flows failed",
							c.CC, run.Repeat, run.Utilization, run.FlowsFailed, run.Flows)
					}
					if sc == ScenarioFairness && run.Jain == nil {
						t.Errorf("%s: no fairness index", c.CC)
					}
				}
				if tp := c.Figures["throughput_bps"]; tp.N != repeats || tp.Min > tp.Median || tp.Median > tp.Max {
					t.Errorf("%s: throughput spread %+v over %d runs", c.CC, tp, repeats)
				}
				if (sc == ScenarioIncast || sc == ScenarioWebsearch) && len(c.FCT) == 0 {
					t.Errorf("%s: no FCTs", c.CC)
				}
				if wantECN := c.CC == "bpf_dctcp"; c.ECN != wantECN {
					t.Errorf("%s: the ECN probe says %v, want %v", c.CC, c.ECN, wantECN)
				}
				if c.CC == "bpf_dctcp" && !slices.Equal(c.KernelCCs, []string{"bpf_dctcp"}) {
					t.Errorf("bpf_dctcp ran as %v: ECN was not negotiated", c.KernelCCs)
				}
			}
		})
	}
	after, err := l.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("attached CCs before the bench %v, after %v", before, after)
	}
	if st, err := n.Status(); err != nil || st.Enabled {
		t.Errorf("INT left enabled (%v)", err)
	}
}
