package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"golang.org/x/mod/modfile"

	"github.com/ccload/ccload/internal/testutil"
)

// hostSkip is a test that skipped on the host because the host's kernel
// lacks a feature that the guests' kernels have (testutil.SkipKernelLacks).
// The guests must run it: on the host it ran nowhere.
type hostSkip struct {
	Path    string // the package's directory in the module, as testPackage.path
	Test    string // the test's full name, subtests included
	Feature string // what the host's kernel lacks, as the skip named it
	Guest   string // the guest package that runs it (testPackage.name); set by placeInGuests
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

// modulePath reads the module's path from root's go.mod.
func modulePath(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	m := modfile.ModulePath(b)
	if m == "" {
		return "", fmt.Errorf("%s has no module line", filepath.Join(root, "go.mod"))
	}
	return m, nil
}

// placeInGuests finds, for each of the host's skips, the guest package
// that runs it: one with the skip's path whose -test.run pattern selects
// the test. placed are the skips with Guest set; missing are those no
// guest package runs.
func placeInGuests(pkgs []testPackage, skips []hostSkip) (placed, missing []hostSkip, err error) {
	for _, s := range skips {
		for _, p := range pkgs {
			if p.path != s.Path {
				continue
			}
			ok, err := runSelects(p.tests, s.Test)
			if err != nil {
				return nil, nil, fmt.Errorf("package %s: %w", p.path, err)
			}
			if ok {
				s.Guest = p.name
				break
			}
		}
		if s.Guest == "" {
			missing = append(missing, s)
		} else {
			placed = append(placed, s)
		}
	}
	return placed, missing, nil
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

// unpassed lists, for each of the host's skips placed in a guest package
// (placeInGuests), the guests in which it did not pass, as
// "TEST: not passed in the 6.1 guest (fail)".
func unpassed(placed []hostSkip, results []kernelResult) []string {
	var out []string
	for _, s := range placed {
		for _, r := range results {
			status := "did not run"
			for _, p := range r.Packages {
				if p.Package != s.Guest {
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
