package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ccload/ccload/internal/units"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/telemetry/sockops"
)

// ScenarioAll stands for every scenario, each into a directory of its own.
const ScenarioAll = "all"

// InputError is a mistake in what the user asked for, named by the flag
// that carries it: the CLI reports it as a usage error.
type InputError struct {
	Err error // says which flag, and what is wrong with it
}

// Error implements error.
func (e *InputError) Error() string { return e.Err.Error() }

// inputError returns an *InputError about flag (without its dashes).
func inputError(flag string, err error) error {
	return &InputError{Err: fmt.Errorf("--%s: %w", flag, err)}
}

// Unwrap returns the underlying error.
func (e *InputError) Unwrap() error { return e.Err }

// ScenariosFor returns the scenarios that name stands for: itself, or
// every scenario for ScenarioAll.
func ScenariosFor(name string) ([]string, error) {
	choices := strings.Join(Scenarios(), ", ") + ", " + ScenarioAll
	switch {
	case name == "":
		return nil, &InputError{Err: errors.New("--scenario is required: one of " + choices)}
	case name == ScenarioAll:
		return Scenarios(), nil
	case slices.Contains(Scenarios(), name):
		return []string{name}, nil
	}
	return nil, &InputError{Err: fmt.Errorf("--scenario %q: use one of %s", name, choices)}
}

// Sizes are the rates and sizes of a run as the user typed them, with
// their units.
type Sizes struct {
	Rate         string // the bottleneck's rate, e.g. 1gbit
	Buffer       string // its buffer, e.g. 1MiB
	ECNThreshold string // where the INT hop marks CE; 0 turns marking off
	IncastSize   string // what each incast sender sends
}

// maxBytes bounds the buffer and the ECN threshold.
const maxBytes = 1 << 30

// Apply parses s into c. Its errors are *InputError.
func (s Sizes) Apply(c *Config) error {
	rate, err := units.ParseBandwidth(s.Rate)
	if err != nil {
		return inputError("rate", err)
	}
	buf, err := units.ParseBytes(s.Buffer)
	if err != nil || buf > maxBytes {
		return inputError("buffer", fmt.Errorf("want a size up to 1GiB, got %q", s.Buffer))
	}
	ecn, err := units.ParseBytes(s.ECNThreshold)
	if err != nil || ecn > maxBytes {
		return inputError("ecn-threshold", fmt.Errorf("want a size up to 1GiB (0 turns marking off), got %q", s.ECNThreshold))
	}
	incast, err := units.ParseBytes(s.IncastSize)
	if err != nil {
		return inputError("incast-size", err)
	}
	c.RateBps, c.BufferBytes, c.ECNThresholdBytes, c.IncastBytes = rate, uint32(buf), uint32(ecn), int64(incast)
	c.NoECN = ecn == 0
	return nil
}

// RunAll runs cfg once for each of scenarios, one after the other, and
// writes each report below out when out is not "": into out itself for one
// scenario, into out/SCENARIO for several. progress hears of each step and
// of the files written; done, if not nil, gets each report as soon as it
// is written.
func RunAll(ctx context.Context, l *loader.Loader, n *sockops.INT, cfg Config, scenarios []string, out string,
	progress io.Writer, done func(*Report) error) ([]*Report, error) {
	var reps []*Report
	for i, sc := range scenarios {
		run := cfg
		run.Scenario = sc
		if i > 0 {
			run.ControlPlaneExe = "" // once per invocation is enough
		}
		rep, err := Run(ctx, l, n, run, progress)
		if err != nil {
			return reps, fmt.Errorf("bench %s: %w", sc, err)
		}
		if out != "" {
			dir := out
			if len(scenarios) > 1 {
				dir = filepath.Join(out, sc)
			}
			if err := WriteReport(progress, rep.Write, dir); err != nil {
				return reps, fmt.Errorf("bench %s: %w", sc, err)
			}
		}
		reps = append(reps, rep)
		if done != nil {
			if err := done(rep); err != nil {
				return reps, err
			}
		}
	}
	return reps, nil
}
