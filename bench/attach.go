package bench

import (
	"errors"
	"fmt"
	"maps"
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

// ParseCCParams reads --cc-param values, each CC:NAME=VALUE (a parameter
// of one of ccload's CCs, as `ccload attach CC --param NAME=VALUE` takes
// it), into parameters by CC. Whether NAME and VALUE suit the CC is the
// loader's to check when the bench attaches it.
func ParseCCParams(specs []string) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	for _, s := range specs {
		cc, kv, ok := strings.Cut(s, ":")
		name, val, ok2 := strings.Cut(kv, "=")
		if !ok || !ok2 || cc == "" || name == "" || val == "" {
			return nil, fmt.Errorf("--cc-param %q: want CC:NAME=VALUE, such as theta_powertcp:beta=800B", s)
		}
		if out[cc] == nil {
			out[cc] = map[string]string{}
		}
		if _, dup := out[cc][name]; dup {
			return nil, fmt.Errorf("--cc-param %q: %s's %s is given twice", s, cc, name)
		}
		out[cc][name] = val
	}
	return out, nil
}

// checkCCParams checks the user's CC parameters (--cc-param) against a
// run of ccs: each CC they name must be one of the run's and one of
// ccload's, and not attached already, since the bench leaves an attached
// CC's parameters as its user set them (attached, by name).
func checkCCParams(user map[string]map[string]string, ccs []string, attached map[string]bool) error {
	var errs []error
	for _, cc := range slices.Sorted(maps.Keys(user)) {
		switch {
		case !slices.Contains(ccs, cc):
			errs = append(errs, fmt.Errorf("--cc-param for %s: it is not in --cc (%s)", cc, strings.Join(ccs, ",")))
		case !isBuiltin(cc):
			errs = append(errs, fmt.Errorf("--cc-param for %s: only ccload's CCs take parameters (ccload list)", cc))
		case attached[cc]:
			errs = append(errs, fmt.Errorf("--cc-param for %s: it is attached already, and the bench keeps an attached CC's parameters: change them with ccload set %s, or detach it first", cc, cc))
		}
	}
	return errors.Join(errs...)
}

// withCCParams returns the parameters a CC is attached with for a run:
// the scenario's own (base, which may be nil), with the user's (--cc-param)
// over them.
func withCCParams(base func(*loader.CC) map[string]string, user map[string]map[string]string) func(*loader.CC) map[string]string {
	return func(cc *loader.CC) map[string]string {
		var params map[string]string
		if base != nil {
			params = base(cc)
		}
		if len(user[cc.Name]) == 0 {
			return params
		}
		merged := maps.Clone(params)
		if merged == nil {
			merged = map[string]string{}
		}
		maps.Copy(merged, user[cc.Name])
		return merged
	}
}

// runParams is the parameters of a run's AttachForRun for ccload's CCs:
// base's, with the user's (--cc-param) over them. base is told which CCs
// were attached before the run (attached, by name), and the user's
// parameters are checked against those and against the run's ccs
// (checkCCParams).
func runParams(l *loader.Loader, ccs []string, user map[string]map[string]string,
	base func(cc *loader.CC, attached map[string]bool) map[string]string) (func(*loader.CC) map[string]string, error) {
	list, err := l.List()
	if err != nil {
		return nil, fmt.Errorf("list attached CCs: %w", err)
	}
	attached := map[string]bool{}
	for _, st := range list {
		attached[st.Name] = st.Attached
	}
	if err := checkCCParams(user, ccs, attached); err != nil {
		return nil, err
	}
	return withCCParams(func(cc *loader.CC) map[string]string { return base(cc, attached) }, user), nil
}

// isBuiltin reports whether name is one of ccload's CCs.
func isBuiltin(name string) bool {
	_, err := loader.Lookup(name)
	return err == nil
}
