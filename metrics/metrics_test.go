package metrics

// Tests that need no kernel state: the names of every family against the
// Prometheus conventions (by rule, by client_golang's linter and by
// promtool), and a Collector on pin roots that hold nothing or cannot be
// read.

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/loader"
)

// sample is a prometheus.Collector that sends one series of every family
// of a Collector, with made-up label values, so that the names can be
// checked without kernel state.
type sample struct{ c *Collector }

func (s sample) Describe(ch chan<- *prometheus.Desc) { s.c.Describe(ch) }

func (s sample) Collect(ch chan<- prometheus.Metric) {
	for _, f := range s.c.fs.all {
		labels := make([]string, len(f.labels))
		for i := range labels {
			labels[i] = "x"
		}
		ch <- prometheus.MustNewConstMetric(f.desc, f.kind, 1, labels...)
	}
	s.c.errs.Collect(ch)
}

func TestFamilyNames(t *testing.T) {
	var (
		nameRE  = regexp.MustCompile(`^ccload_[a-z][a-z0-9_]*[a-z0-9]$`)
		labelRE = regexp.MustCompile(`^[a-z][a-z_]*$`)
		// Units that are not base units, as names would spell them.
		badUnits = regexp.MustCompile(`_(ms|us|ns|msec|usec|nsec|milliseconds|microseconds|nanoseconds|bits|kb|mb|kib|mib|percent)(_|$)`)
	)
	seen := map[string]bool{scrapeErrorsName: true}
	for _, f := range newFamilies().all {
		t.Run(f.name, func(t *testing.T) {
			if !nameRE.MatchString(f.name) || strings.Contains(f.name, "__") {
				t.Errorf("not a snake_case name with the ccload_ prefix")
			}
			if seen[f.name] {
				t.Errorf("defined twice")
			}
			seen[f.name] = true
			switch isTotal := strings.HasSuffix(f.name, "_total"); f.kind {
			case prometheus.CounterValue:
				if !isTotal {
					t.Errorf("a counter whose name does not end in _total")
				}
			case prometheus.GaugeValue:
				if isTotal {
					t.Errorf("a gauge whose name ends in _total")
				}
			default:
				t.Errorf("type %v: only counters and gauges are exported", f.kind)
			}
			if badUnits.MatchString(f.name) {
				t.Errorf("not in a base unit (seconds, bytes)")
			}
			if strings.Contains(f.name, "second") && !strings.Contains(f.name, "_seconds") {
				t.Errorf("a time not in _seconds")
			}
			if f.help == "" || !strings.HasSuffix(f.help, ".") {
				t.Errorf("help %q: missing, or not a sentence", f.help)
			}
			for _, l := range f.labels {
				if !labelRE.MatchString(l) {
					t.Errorf("label %q is not snake_case", l)
				}
			}
		})
	}
}

// TestCountersComplete checks that the counter tables name every counter
// once, and only counters the loader has.
func TestCountersComplete(t *testing.T) {
	for _, tt := range []struct {
		name string
		defs []counterDef
	}{
		{"cc", ccCounters[:]},
		{"int", intCounters[:]},
	} {
		t.Run(tt.name, func(t *testing.T) {
			keys, suffixes := map[string]bool{}, map[string]bool{}
			for _, d := range tt.defs {
				if keys[d.key] || suffixes[d.suffix] {
					t.Errorf("%s (%s) is listed twice", d.key, d.suffix)
				}
				keys[d.key], suffixes[d.suffix] = true, true
			}
		})
	}
}

func TestLint(t *testing.T) {
	mfs := gather(t, sample{NewCollector(kernel.DefaultHost())})
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

func TestPromtoolOnEveryFamily(t *testing.T) {
	mfs := gather(t, sample{NewCollector(kernel.DefaultHost())})
	if want := len(newFamilies().all) + 1; len(mfs) != want {
		t.Errorf("gathered %d families, want %d", len(mfs), want)
	}
	promtoolCheck(t, exposition(t, mfs))
}

// emptyHost is a host whose pin root is an empty directory of the test's
// (not a bpffs: nothing is pinned there, and nothing can be).
func emptyHost(t *testing.T) kernel.Host {
	h := kernel.DefaultHost()
	h.BPFFS = t.TempDir()
	return h
}

// TestCollectNothingPinned collects a pin root that holds nothing: every
// CC shows as detached, the parts that are not enabled have no series,
// and nothing counts as an error.
func TestCollectNothingPinned(t *testing.T) {
	var mu sync.Mutex
	var errs []error
	c := NewCollector(emptyHost(t), WithErrorHandler(func(part string, err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, errors.New(part+": "+err.Error()))
	}))
	mfs := gather(t, c)
	if len(errs) != 0 {
		t.Errorf("errors: %v", errs)
	}
	for _, cc := range loader.Builtin() {
		if v := value(t, mfs, "ccload_cc_attached", map[string]string{"cc": cc.Name}); v != 0 {
			t.Errorf("%s: attached = %v on an empty pin root", cc.Name, v)
		}
	}
	for _, p := range parts {
		if v := value(t, mfs, scrapeErrorsName, map[string]string{"part": p}); v != 0 {
			t.Errorf("%s: %v scrape errors", p, v)
		}
	}
	for _, name := range []string{"ccload_cc_acks_total", "ccload_int_hop_packets_total", "ccload_onramp_pauses_total",
		"ccload_clock_offset_seconds", "ccload_bpf_program_runs_total"} {
		if s := series(mfs, name, nil); len(s) != 0 {
			t.Errorf("%s: %d series on an empty pin root", name, len(s))
		}
	}
	if v := value(t, mfs, "ccload_int_enabled", nil); v != 0 {
		t.Errorf("ccload_int_enabled = %v on an empty pin root", v)
	}
	promtoolCheck(t, exposition(t, mfs))
}

// TestCollectBrokenParts points the Collector at a /proc/sys without the
// sysctls it reads: the CC and program parts fail and are counted, once
// per scrape, and the other parts are still collected.
func TestCollectBrokenParts(t *testing.T) {
	h := emptyHost(t)
	h.ProcSys = t.TempDir()
	failed := map[string]int{}
	var mu sync.Mutex
	c := NewCollector(h, WithErrorHandler(func(part string, err error) {
		mu.Lock()
		defer mu.Unlock()
		failed[part]++
		t.Logf("%s: %v", part, err)
	}))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	for scrape := 1; scrape <= 2; scrape++ {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatalf("scrape %d: %v", scrape, err)
		}
		for _, p := range parts {
			want := 0.0
			if p == partCC || p == partPrograms {
				want = float64(scrape)
			}
			if v := value(t, mfs, scrapeErrorsName, map[string]string{"part": p}); v != want {
				t.Errorf("scrape %d: %s{part=%q} = %v, want %v", scrape, scrapeErrorsName, p, v, want)
			}
		}
		if v := value(t, mfs, "ccload_int_enabled", nil); v != 0 {
			t.Errorf("scrape %d: the INT part was not collected", scrape)
		}
	}
	if failed[partCC] != 2 || failed[partPrograms] != 2 || len(failed) != 2 {
		t.Errorf("the error handler saw %v, want cc and programs twice each", failed)
	}
}

// TestPinWalkSkipsStaging checks the pin walk on plain files: a pin root
// that is missing is no error, and a staging directory is not entered.
func TestPinWalkSkipsStaging(t *testing.T) {
	root := t.TempDir()
	if objs, err := readPins(filepath.Join(root, "missing")); err != nil || len(objs.maps)+len(objs.progs) != 0 {
		t.Errorf("missing pin root: %v, %+v", err, objs)
	}
	// Not bpffs, so any file the walk opens is an error: one in a
	// staging directory must not be opened.
	if err := os.MkdirAll(filepath.Join(root, "staging-x-1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "staging-x-1", "stats"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readPins(root); err != nil {
		t.Errorf("the walk entered the staging directory: %v", err)
	}
	if err := os.WriteFile(filepath.Join(root, "junk"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readPins(root); err == nil {
		t.Errorf("a file that is no BPF object was read without error")
	}
}

func TestOwners(t *testing.T) {
	for _, tt := range []struct {
		dir, part string
	}{
		{"theta_powertcp", partCC},
		{"int", partINT},
		{"shared", partINT},
		{"hop/eth0-3-ns4026531840", partHop},
		{"onramp/eth0-3-ns4026531840", partOnRamp},
		{"clock/ns4026531840", partClock},
		{".", "other"},
		{"nosuchcc", "other"},
	} {
		if got := partOf(tt.dir); got != tt.part {
			t.Errorf("partOf(%q) = %q, want %q", tt.dir, got, tt.part)
		}
	}
	own, shared, pinned := owner{"int", rankOwnMap}, owner{"shared", rankSharedMap}, owner{"zzz", rankPinned}
	if !own.better(shared) || shared.better(own) || !pinned.better(own) {
		t.Errorf("ranking: pinned > own map > shared map does not hold")
	}
}

func TestOwnerByName(t *testing.T) {
	objs := &pinnedObjects{progs: map[ebpf.ProgramID]owner{}, maps: map[ebpf.MapID]owner{},
		ccs: []string{"powertcp", "theta_powertcp"}}
	for _, tt := range []struct {
		typ   ebpf.ProgramType
		name  string
		owner string // "" for none
	}{
		{ebpf.StructOps, "theta_powertcp_ssthresh", "theta_powertcp"},
		{ebpf.StructOps, "powertcp_undo_cwnd", "powertcp"},
		{ebpf.StructOps, "hpcc_ssthresh", ""},
		{ebpf.StructOps, "powertcpx_init", ""},
		{ebpf.SchedCLS, "powertcp_init", ""},
	} {
		o, ok := objs.ownerOf(1, &ebpf.ProgramInfo{Type: tt.typ, Name: tt.name})
		if ok != (tt.owner != "") || o.dir != tt.owner {
			t.Errorf("%v %s: owner %q (%v), want %q", tt.typ, tt.name, o.dir, ok, tt.owner)
		}
	}
}
