package main

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
)

// testResult is one test's outcome in the guest.
type testResult struct {
	Name   string `json:"name"`
	Status string `json:"status"` // pass, fail or skip
	Reason string `json:"reason,omitempty"`
}

// pkgResult is one test binary's run in the guest.
type pkgResult struct {
	Package  string       `json:"package"`
	ExitCode int          `json:"exit_code"`
	Finished bool         `json:"finished"`
	Tests    []testResult `json:"tests"`
}

func (p pkgResult) count(status string) int {
	n := 0
	for _, t := range p.Tests {
		if t.Status == status {
			n++
		}
	}
	return n
}

// guestStatus is what `ccload status --json` printed in the guest.
type guestStatus struct {
	OK     bool `json:"ok"`
	Checks []struct {
		Name   string `json:"name"`
		OK     bool   `json:"ok"`
		Detail string `json:"detail"`
	} `json:"checks"`
}

func (g guestStatus) detail(name string) string {
	for _, c := range g.Checks {
		if c.Name == name {
			return c.Detail
		}
	}
	return ""
}

// kernelResult is everything learned from one guest.
type kernelResult struct {
	Series        string      `json:"series"`
	Release       string      `json:"release"`
	Package       string      `json:"package"`
	Accel         string      `json:"accel"`
	Seconds       float64     `json:"seconds"`
	Available     string      `json:"available_congestion_control"`
	InsmodFailed  []string    `json:"insmod_failed,omitempty"`
	Status        guestStatus `json:"status"`
	Packages      []pkgResult `json:"packages"`
	Error         string      `json:"error,omitempty"`
	ConsoleLogLoc string      `json:"console_log"`
	// Notes say what happened beside the tests, e.g. a retried boot.
	Notes []string `json:"notes,omitempty"`
	// Bench is the guest's bench run (--bench), which replaces the tests.
	Bench *benchResult `json:"bench,omitempty"`
}

func (k kernelResult) ok() bool {
	if k.Bench != nil {
		return k.Error == "" && k.Bench.Exit == 0 && k.Bench.Dir != ""
	}
	if k.Error != "" || len(k.Packages) == 0 {
		return false
	}
	for _, p := range k.Packages {
		if !p.Finished || p.ExitCode != 0 || p.count("fail") > 0 || p.count("skip") > 0 || len(p.Tests) == 0 {
			return false
		}
	}
	return true
}

var (
	reResult = regexp.MustCompile(`^(\s*)--- (PASS|FAIL|SKIP): (\S+)`)
	reHeader = regexp.MustCompile(`^=== (?:RUN|CONT|NAME|PAUSE)\s+(\S+)`)
	reLog    = regexp.MustCompile(`^\s+\S+\.go:\d+: (.*)$`)
)

// parseConsole reads the markers and `go test -v` output of one guest.
func parseConsole(text string, r *kernelResult) {
	var cur *pkgResult
	var status strings.Builder
	inStatus := false
	current := ""                  // the test whose output follows
	lastLog := map[string]string{} // test -> its last log line
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "CCLOAD-VMTEST booted "):
			r.Release = strings.TrimPrefix(line, "CCLOAD-VMTEST booted ")
		case strings.HasPrefix(line, "CCLOAD-VMTEST insmod-failed "):
			r.InsmodFailed = append(r.InsmodFailed, strings.TrimPrefix(line, "CCLOAD-VMTEST insmod-failed "))
		case line == "CCLOAD-VMTEST status-begin":
			inStatus = true
		case line == "CCLOAD-VMTEST status-end":
			inStatus = false
			json.Unmarshal([]byte(status.String()), &r.Status)
		case inStatus:
			status.WriteString(line + "\n")
		case strings.HasPrefix(line, "CCLOAD-VMTEST available "):
			r.Available = strings.TrimPrefix(line, "CCLOAD-VMTEST available ")
		case strings.HasPrefix(line, "CCLOAD-VMTEST begin "):
			r.Packages = append(r.Packages, pkgResult{Package: strings.TrimPrefix(line, "CCLOAD-VMTEST begin "), ExitCode: -1})
			cur = &r.Packages[len(r.Packages)-1]
		case strings.HasPrefix(line, "CCLOAD-VMTEST end "):
			if cur != nil {
				cur.Finished = true
				if i := strings.Index(line, "exit="); i >= 0 {
					cur.ExitCode, _ = strconv.Atoi(strings.TrimSpace(line[i+5:]))
				}
			}
			cur = nil
		case cur != nil:
			if m := reResult.FindStringSubmatch(line); m != nil {
				t := testResult{Name: m[3], Status: strings.ToLower(m[2])}
				if t.Status != "pass" {
					t.Reason = lastLog[t.Name]
				}
				cur.Tests = append(cur.Tests, t)
			} else if m := reHeader.FindStringSubmatch(line); m != nil {
				current = m[1]
			} else if m := reLog.FindStringSubmatch(line); m != nil {
				lastLog[current] = m[1]
			}
		}
	}
}
