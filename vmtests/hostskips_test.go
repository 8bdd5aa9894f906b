package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ccload/ccload/internal/testutil"
)

const testModule = "github.com/ccload/ccload"

// skipReason is the reason testutil.SkipKernelLacks gives for feature.
func skipReason(t *testing.T, feature string) string {
	t.Setenv(testutil.InVMEnv, "")
	r := &recordTB{TB: t}
	testutil.SkipKernelLacks(r, feature)
	if r.skipped == "" {
		t.Fatalf("SkipKernelLacks(%q) did not skip", feature)
	}
	return r.skipped
}

// recordTB records a skip instead of ending the test.
type recordTB struct {
	testing.TB
	skipped string
}

func (r *recordTB) Helper()                       {}
func (r *recordTB) Skipf(format string, a ...any) { r.skipped = fmt.Sprintf(format, a...) }

// events renders go test -json events, one per line.
func events(t *testing.T, evs ...testEvent) string {
	var b strings.Builder
	for _, e := range evs {
		j, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

func TestReadHostSkips(t *testing.T) {
	fq := "    fq_test.go:34: " + skipReason(t, "sch_fq") + "\n"
	dctcp := "    ecn_test.go:80: " + skipReason(t, "the tcp_dctcp module") + "\n"
	stream := "go: downloading something\n" + events(t,
		testEvent{Action: "run", Package: testModule + "/qdisc", Test: "TestFQEDTDelay"},
		testEvent{Action: "output", Package: testModule + "/qdisc", Test: "TestFQEDTDelay", Output: fq},
		testEvent{Action: "skip", Package: testModule + "/qdisc", Test: "TestFQEDTDelay"},
		// A skip for another reason is not the guests' business.
		testEvent{Action: "output", Package: testModule + "/qdisc", Test: "TestRoot", Output: "    x_test.go:1: needs root\n"},
		testEvent{Action: "skip", Package: testModule + "/qdisc", Test: "TestRoot"},
		// A subtest that skipped, under a parent that passed.
		testEvent{Action: "output", Package: testModule + "/bench", Test: "TestProbeECN/dctcp", Output: dctcp},
		testEvent{Action: "skip", Package: testModule + "/bench", Test: "TestProbeECN/dctcp"},
		testEvent{Action: "pass", Package: testModule + "/bench", Test: "TestProbeECN"},
		// The same words in a test that then passed.
		testEvent{Action: "output", Package: testModule + "/e2e", Test: "TestX", Output: fq},
		testEvent{Action: "pass", Package: testModule + "/e2e", Test: "TestX"},
		testEvent{Action: "pass", Package: testModule + "/qdisc"},
	)
	got, err := readHostSkips(strings.NewReader(stream), testModule)
	if err != nil {
		t.Fatal(err)
	}
	want := []hostSkip{
		{Path: "qdisc", Test: "TestFQEDTDelay", Feature: "sch_fq"},
		{Path: "bench", Test: "TestProbeECN/dctcp", Feature: "the tcp_dctcp module"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestReadHostSkipsErrors(t *testing.T) {
	for _, tc := range []struct {
		name, stream, want string
	}{
		{"broken event", `{"Action":"skip",` + "\n", "line 1: not a go test -json event"},
		{"foreign package", events(t,
			testEvent{Action: "output", Package: "example.com/other", Test: "TestA", Output: testutil.KernelLacksMarker + "sch_fq; x\n"},
			testEvent{Action: "skip", Package: "example.com/other", Test: "TestA"},
		), "package example.com/other is not in module " + testModule},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readHostSkips(strings.NewReader(tc.stream), testModule)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestRunSelects(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"^(TestA|TestB)$", "TestA", true},
		{"^(TestA|TestB)$", "TestC", false},
		{"^(TestA|TestB)$", "TestAB", false},
		{"^(TestA|TestB)$", "TestB/sub", true},
		{"^TestA$/^one$", "TestA/one", true},
		{"^TestA$/^one$", "TestA/two", false},
		{"^TestA$/^one$", "TestA", true},
		{"^Test[AB/]$", "TestA", true},
		{"", "TestAnything", true},
	} {
		got, err := runSelects(tc.pattern, tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("runSelects(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
	if _, err := runSelects("^(TestA$", "TestA"); err == nil {
		t.Error("a broken pattern gave no error")
	}
}

func TestHostSkipsAgainstGuests(t *testing.T) {
	pkgs := []testPackage{
		{name: "qdisc", path: "qdisc", tests: "^(TestFQEDTDelay|TestFQFlowMaxRate)$"},
		{name: "bench", path: "bench", tests: "^TestProbeECN$"},
	}
	skips := []hostSkip{
		{Path: "qdisc", Test: "TestFQEDTDelay", Feature: "sch_fq"},
		{Path: "bench", Test: "TestProbeECN/dctcp", Feature: "the tcp_dctcp module"},
		{Path: "e2e", Test: "TestOnRampIncast", Feature: "sch_fq"},
		{Path: "qdisc", Test: "TestFQNew", Feature: "sch_fq"},
	}
	placed, missing, err := placeInGuests(pkgs, skips)
	if err != nil {
		t.Fatal(err)
	}
	if want := skips[2:]; !slices.Equal(missing, want) {
		t.Errorf("missing: got %v, want %v", missing, want)
	}
	wantPlaced := []hostSkip{skips[0], skips[1]}
	wantPlaced[0].Guest, wantPlaced[1].Guest = "qdisc", "bench"
	if !slices.Equal(placed, wantPlaced) {
		t.Errorf("placed: got %v, want %v", placed, wantPlaced)
	}

	results := []kernelResult{
		{Series: "6.1", Packages: []pkgResult{
			{Package: "qdisc", Tests: []testResult{{Name: "TestFQEDTDelay", Status: "pass"}}},
			{Package: "bench", Tests: []testResult{{Name: "TestProbeECN/dctcp", Status: "pass"}, {Name: "TestProbeECN", Status: "pass"}}},
		}},
		{Series: "6.12", Packages: []pkgResult{
			{Package: "qdisc", Tests: []testResult{{Name: "TestFQEDTDelay", Status: "fail"}}},
		}},
	}
	got := unpassed(placed, results)
	want := []string{
		"qdisc TestFQEDTDelay (this kernel lacks sch_fq): not passed in the 6.12 guest (fail)",
		"bench TestProbeECN/dctcp (this kernel lacks the tcp_dctcp module): not passed in the 6.12 guest (did not run)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("unpassed:\n got %q\nwant %q", got, want)
	}
	if got := unpassed(placed, results[:1]); len(got) != 0 {
		t.Errorf("unpassed with every guest passing: %q", got)
	}
}

// TestGuestPackagePatterns checks that every guest package's pattern
// compiles, since a broken one would select nothing in the guest.
func TestGuestPackagePatterns(t *testing.T) {
	for _, p := range guestPackages() {
		if _, err := runSelects(p.tests, "TestX"); err != nil {
			t.Errorf("package %s: %v", p.path, err)
		}
	}
}
