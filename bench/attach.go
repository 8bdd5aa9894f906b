package bench

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ccload/ccload/loader"
)

// Attached is what AttachForRun did with one of ccload's CCs.
type Attached struct {
	// Name is the CC.
	Name string
	// Params are its parameters as the run uses them.
	Params map[string]string
	// AlreadyAttached reports that the user had attached it: the run
	// keeps its parameters and leaves it attached afterwards.
	AlreadyAttached bool
}

// AttachForRun gets the CCs of a run (the bench's or the demo's) ready:
// every name must be a CC the kernel has or one of ccload's, and ccload's
// that are not attached yet are attached, with params(cc) as parameters
// (nil: the defaults). report, if not nil, hears of each of ccload's CCs.
// The returned restore detaches, newest first, what AttachForRun
// attached; it is never nil, and must be called also when AttachForRun
// fails halfway. purpose names the run in its errors ("the bench").
func AttachForRun(l *loader.Loader, ccs []string, purpose string, params func(*loader.CC) map[string]string,
	report func(Attached)) (restore func() error, err error) {
	var attached []string
	restore = func() error {
		var errs []error
		for _, name := range slices.Backward(attached) {
			if _, err := l.Detach(name); err != nil {
				errs = append(errs, fmt.Errorf("detach %s after %s: %w", name, purpose, err))
			}
		}
		return errors.Join(errs...)
	}
	kernelCCs, err := l.KernelCCs()
	if err != nil {
		return restore, err
	}
	builtin := map[string]*loader.CC{}
	var names []string
	for _, cc := range loader.Builtin() { // sorted by name
		builtin[cc.Name] = cc
		names = append(names, cc.Name)
	}
	for _, name := range ccs {
		cc, ok := builtin[name]
		if !ok {
			if !slices.Contains(kernelCCs, name) {
				return restore, fmt.Errorf("the kernel has no congestion control %q (it has: %s; ccload's: %s)",
					name, strings.Join(kernelCCs, " "), strings.Join(names, " "))
			}
			continue
		}
		req := loader.AttachRequest{Name: name}
		if params != nil {
			req.Params = params(cc)
		}
		res, err := l.Attach(req)
		if err != nil {
			return restore, fmt.Errorf("attach %s: %w", name, err)
		}
		if !res.AlreadyAttached {
			attached = append(attached, name)
		}
		if report != nil {
			report(Attached{Name: name, Params: res.Params, AlreadyAttached: res.AlreadyAttached})
		}
	}
	return restore, nil
}
