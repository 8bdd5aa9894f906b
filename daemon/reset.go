package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ccload/ccload/clocksync"
	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/loader"
)

// ResetResult says what Reset removed.
type ResetResult struct {
	CCs          []string `json:"ccs"`
	ResetDefault string   `json:"reset_default,omitempty"`
	INT          bool     `json:"int"`
	Hops         []string `json:"hops"`
	OnRamp       []string `json:"onramp"`
	ClockMap     bool     `json:"clock_map"`
	PinRoot      string   `json:"pin_root"`
}

// String lists what was removed, in words.
func (r *ResetResult) String() string {
	var parts []string
	if len(r.CCs) > 0 {
		parts = append(parts, "CCs "+strings.Join(r.CCs, ", "))
	}
	if r.INT {
		parts = append(parts, "INT tagging")
	}
	if len(r.Hops) > 0 {
		parts = append(parts, "INT hops on "+strings.Join(r.Hops, ", "))
	}
	if len(r.OnRamp) > 0 {
		parts = append(parts, "On-Ramp on "+strings.Join(r.OnRamp, ", "))
	}
	if r.ClockMap {
		parts = append(parts, "the clock map")
	}
	if len(parts) == 0 {
		return "nothing (ccload had nothing here)"
	}
	return strings.Join(parts, "; ")
}

// Reset removes everything ccload owns under host's pin root, in the
// calling thread's network namespace: every CC (moving the default back
// to cubic when it named one), INT tagging, every INT hop and On-Ramp
// interface, the clock map when no agent holds it, the daemon's record,
// and the directories they leave empty. It goes on past failures and
// returns them all; running it again finishes what a failure left. The
// caller holds the pin root's lock.
func Reset(host kernel.Host, opts ...loader.Option) (*ResetResult, error) {
	p := newParts(host, 0, opts...)
	res := &ResetResult{CCs: []string{}, Hops: []string{}, OnRamp: []string{}, PinRoot: host.PinRoot()}
	var errs []error
	// On-Ramp and the hops first: they stop touching packets before the
	// CCs go.
	if ors, err := p.onramp.Status(); err != nil {
		errs = append(errs, err)
	} else {
		for _, o := range ors {
			if _, err := p.onramp.Disable(o.Iface); err != nil {
				errs = append(errs, fmt.Errorf("onramp disable %s: %w", o.Iface, err))
				continue
			}
			res.OnRamp = append(res.OnRamp, o.Iface)
		}
	}
	if hops, err := p.hops.List(); err != nil {
		errs = append(errs, err)
	} else {
		for _, h := range hops {
			if _, err := p.hops.Detach(h.Iface); err != nil {
				errs = append(errs, fmt.Errorf("hop detach %s: %w", h.Iface, err))
				continue
			}
			res.Hops = append(res.Hops, h.Iface)
		}
	}
	if ok, err := p.int.Disable(); err != nil {
		errs = append(errs, fmt.Errorf("int disable: %w", err))
	} else {
		res.INT = ok
	}
	if ccs, err := p.ccs.List(); err != nil {
		errs = append(errs, err)
	} else {
		for _, c := range ccs {
			if !c.Attached && !c.Stale {
				continue
			}
			dr, err := p.ccs.Detach(c.Name)
			if err != nil {
				errs = append(errs, fmt.Errorf("detach %s: %w", c.Name, err))
				continue
			}
			res.CCs = append(res.CCs, c.Name)
			if dr.ResetDefault != "" {
				res.ResetDefault = dr.ResetDefault
			}
		}
	}
	if ok, err := clocksync.RemoveIfIdle(host); err != nil {
		errs = append(errs, fmt.Errorf("remove the clock map: %w", err))
	} else {
		res.ClockMap = ok
	}
	if err := removeOwned(host); err != nil {
		errs = append(errs, err)
	}
	// The pin root itself stays, empty: it is the lock that the caller
	// and any waiting ccload hold (see pin.AcquireLock).
	if entries, err := os.ReadDir(host.PinRoot()); err == nil {
		for _, e := range entries {
			if e.IsDir() {
				removeEmptyDirs(filepath.Join(host.PinRoot(), e.Name()))
			}
		}
	}
	return res, errors.Join(errs...)
}

// removeEmptyDirs removes dir and the directories below it that hold
// nothing; a pin anywhere keeps its directory.
func removeEmptyDirs(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	empty := true
	for _, e := range entries {
		if !e.IsDir() || !removeEmptyDirs(filepath.Join(dir, e.Name())) {
			empty = false
		}
	}
	if empty {
		return os.Remove(dir) == nil
	}
	return false
}
