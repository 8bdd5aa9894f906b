package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/ccload/ccload/internal/testutil"
)

// hostSkip is a test that skipped on the host because the host's kernel
// lacks a feature that the guests' kernels have (testutil.SkipKernelLacks).
// The guests must run it: on the host it ran nowhere.
type hostSkip struct {
	Path    string // the package's directory in the module, as testPackage.path
	Test    string // the test's full name, subtests included
	Feature string // what the host's kernel lacks, as the skip named it
}

func (s hostSkip) String() string {
	return fmt.Sprintf("%s %s (this kernel lacks %s)", s.Path, s.Test, s.Feature)
}

// testEvent is the part of a `go test -json` event (cmd/test2json) that
// readHostSkips reads.
type testEvent struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// readHostSkips reads a `go test -json` event stream of the host's test run
// (gotestsum --jsonfile writes one) and returns the tests that skipped
// because the host's kernel lacks a feature, in the order they skipped.
// module is the module's path, which the events' package paths start with.
func readHostSkips(r io.Reader, module string) ([]hostSkip, error) {
	type key struct{ pkg, test string }
	lacks := map[key]string{} // test -> the feature its skip named
	var out []hostSkip
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(b) == 0 || b[0] != '{' {
			continue // go test prints a few lines that are not events
		}
		var e testEvent
		if err := json.Unmarshal(b, &e); err != nil {
			return nil, fmt.Errorf("line %d: not a go test -json event: %w", line, err)
		}
		if e.Test == "" {
			continue
		}
		k := key{e.Package, e.Test}
		switch e.Action {
		case "output":
			if _, rest, ok := strings.Cut(e.Output, testutil.KernelLacksMarker); ok {
				feature, _, _ := strings.Cut(rest, ";")
				lacks[k] = strings.TrimSpace(feature)
			}
		case "skip":
			feature, ok := lacks[k]
			if !ok {
				continue
			}
			path, ok := strings.CutPrefix(e.Package, module+"/")
			switch {
			case e.Package == module:
				path = "."
			case !ok:
				return nil, fmt.Errorf("line %d: package %s is not in module %s", line, e.Package, module)
			}
			out = append(out, hostSkip{Path: path, Test: e.Test, Feature: feature})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// readHostSkipsFile is readHostSkips on a file, with the module's path
// read from root's go.mod.
func readHostSkipsFile(name, root string) ([]hostSkip, error) {
	module, err := modulePath(root)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("host test events: %w", err)
	}
	defer f.Close()
	skips, err := readHostSkips(f, module)
	if err != nil {
		return nil, fmt.Errorf("host test events %s: %w", name, err)
	}
	return skips, nil
}

// modulePath reads the module line of root's go.mod.
func modulePath(root string) (string, error) {
	b, err := os.ReadFile(root + "/go.mod")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(l), "module "); ok {
			return strings.Trim(strings.TrimSpace(m), `"`), nil
		}
	}
	return "", fmt.Errorf("%s/go.mod has no module line", root)
}

// guestRuns reports whether pkgs run test s in the guests: a package with
// s's path whose -test.run pattern selects the test, and returns that
// package's name.
func guestRuns(pkgs []testPackage, s hostSkip) (string, bool, error) {
	for _, p := range pkgs {
		if p.path != s.Path {
			continue
		}
		ok, err := runSelects(p.tests, s.Test)
		if err != nil {
			return "", false, fmt.Errorf("package %s: %w", p.path, err)
		}
		if ok {
			return p.name, true, nil
		}
	}
	return "", false, nil
}

// runSelects reports whether `go test -run pattern` runs the test called
// name. As in go test, the pattern's levels are split at slashes outside
// brackets and parentheses, and each level must match the name's element
// at that level; a name deeper than the pattern is run when its ancestor
// is.
func runSelects(pattern, name string) (bool, error) {
	if pattern == "" {
		return true, nil
	}
	parts := strings.Split(name, "/")
	for i, level := range splitRun(pattern) {
		if i >= len(parts) {
			break
		}
		re, err := regexp.Compile(level)
		if err != nil {
			return false, fmt.Errorf("-test.run %q: %w", pattern, err)
		}
		if !re.MatchString(parts[i]) {
			return false, nil
		}
	}
	return true, nil
}

// splitRun splits a -test.run pattern at its level separators: slashes
// outside brackets and parentheses.
func splitRun(pattern string) []string {
	var levels []string
	depth, start := 0, 0
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '\\':
			i++
		case '[', '(':
			depth++
		case ']', ')':
			depth--
		case '/':
			if depth == 0 {
				levels = append(levels, pattern[start:i])
				start = i + 1
			}
		}
	}
	return append(levels, pattern[start:])
}

// unselected returns the host's skips that no guest package runs.
func unselected(pkgs []testPackage, skips []hostSkip) ([]hostSkip, error) {
	var out []hostSkip
	for _, s := range skips {
		_, ok, err := guestRuns(pkgs, s)
		if err != nil {
			return nil, err
		}
		if !ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// unpassed lists, for each of the host's skips, the guests in which it did
// not pass, as "TEST: not passed in the 6.1 guest (fail)".
func unpassed(pkgs []testPackage, skips []hostSkip, results []kernelResult) []string {
	var out []string
	for _, s := range skips {
		name, ok, err := guestRuns(pkgs, s)
		if err != nil || !ok {
			out = append(out, fmt.Sprintf("%s: in no guest package", s))
			continue
		}
		for _, r := range results {
			status := "did not run"
			for _, p := range r.Packages {
				if p.Package != name {
					continue
				}
				for _, t := range p.Tests {
					if t.Name == s.Test {
						status = t.Status
					}
				}
			}
			if status != "pass" {
				out = append(out, fmt.Sprintf("%s: not passed in the %s guest (%s)", s, r.Series, status))
			}
		}
	}
	return out
}
