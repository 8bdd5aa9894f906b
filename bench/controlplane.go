package bench

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/ccload/ccload/bench/stats"
	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/loader"
)

// ControlPlane is how long one control-plane command of ccload takes as a
// whole process, from exec to exit, over several runs.
type ControlPlane struct {
	// Command is the command line after the executable's name.
	Command string `json:"command"`
	// Runs is how many times it ran.
	Runs     int     `json:"runs"`
	MedianMs float64 `json:"median_ms"`
	MinMs    float64 `json:"min_ms"`
	MaxMs    float64 `json:"max_ms"`
}

// MaxControlPlaneRuns bounds Config.ControlPlaneRuns.
const MaxControlPlaneRuns = 100

// controlPlaneTimeout bounds one command.
const controlPlaneTimeout = 30 * time.Second

// MeasureControlPlane runs `exe attach CC`, `exe set CC gamma=...` (or
// the CC's first parameter at its default) and `exe detach CC` n times in
// that order, plus `exe --help` for the cost of starting the binary, and
// times each as a process. It refuses a CC that is attached already, so a
// user's CC is never detached, and leaves cc detached, also on error.
func MeasureControlPlane(ctx context.Context, l *loader.Loader, exe, cc string, n int) (_ []ControlPlane, err error) {
	if n < 1 || n > MaxControlPlaneRuns {
		return nil, fmt.Errorf("control-plane runs %d: give 1 to %d", n, MaxControlPlaneRuns)
	}
	builtin, err := loader.Lookup(cc)
	if err != nil {
		return nil, err
	}
	if len(builtin.Params) == 0 {
		return nil, fmt.Errorf("measure the control plane with %s: it has no parameter to set", cc)
	}
	list, err := l.List()
	if err != nil {
		return nil, fmt.Errorf("list attached CCs: %w", err)
	}
	if slices.ContainsFunc(list, func(s loader.CCStatus) bool { return s.Name == cc && s.Attached }) {
		return nil, fmt.Errorf("measure the control plane with %s: it is attached already, and measuring would detach it; "+
			"detach it first (ccload detach %s), or leave the measurement out", cc, cc)
	}
	defer func() {
		// Whatever happened, leave cc as it was: detached.
		if st, lerr := l.List(); lerr == nil && slices.ContainsFunc(st, func(s loader.CCStatus) bool { return s.Name == cc && s.Attached }) {
			if _, derr := l.Detach(cc); derr != nil {
				err = errors.Join(err, fmt.Errorf("detach %s after measuring the control plane: %w", cc, derr))
			}
		}
	}()
	p := builtin.Params[0]
	cmds := [][]string{{"attach", cc}, {"set", cc, p.Name + "=" + p.Default}, {"detach", cc}}
	times := make([][]float64, len(cmds)+1)
	// The commands act on l's pin root, the bench's own, which the CLI
	// reaches as <--bpffs>/ccload.
	h := l.Host()
	if h.PinDir != kernel.DefaultHost().PinDir {
		return nil, fmt.Errorf("measure the control plane: the CLI cannot reach the pin root %s (it pins under <bpffs>/%s)",
			h.PinRoot(), kernel.DefaultHost().PinDir)
	}
	global := []string{"--bpffs", h.BPFFS}
	run := func(args ...string) (float64, error) {
		cctx, cancel := context.WithTimeout(ctx, controlPlaneTimeout)
		defer cancel()
		start := time.Now()
		out, err := exec.CommandContext(cctx, exe, append(slices.Clone(global), args...)...).CombinedOutput()
		ms := float64(time.Since(start)) / float64(time.Millisecond)
		if err != nil {
			return 0, fmt.Errorf("%s %v: %w: %s", exe, args, err, out)
		}
		return ms, nil
	}
	for range n {
		for i, c := range cmds {
			ms, err := run(c...)
			if err != nil {
				return nil, err
			}
			times[i] = append(times[i], ms)
		}
		ms, err := run("--help")
		if err != nil {
			return nil, err
		}
		times[len(cmds)] = append(times[len(cmds)], ms)
	}
	var out []ControlPlane
	for i, c := range append(cmds, []string{"--help"}) {
		s := stats.Sorted(times[i])
		out = append(out, ControlPlane{Command: strings.Join(c, " "), Runs: n, MedianMs: median(s), MinMs: s[0], MaxMs: s[len(s)-1]})
	}
	return out, nil
}
