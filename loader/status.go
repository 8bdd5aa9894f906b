package loader

import (
	"errors"
	"fmt"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/qdisc"
)

// Check is one line of `ccload status`.
type Check struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Required says that no CC can be attached without it: a required
	// check that fails fails `ccload status`. The others are what some
	// commands need, named in NeededBy.
	Required bool   `json:"required"`
	NeededBy string `json:"needed_by,omitempty"`
	// Unknown says that the check could not tell (OK is then false): its
	// probe failed, and Detail says why.
	Unknown bool   `json:"unknown,omitempty"`
	Detail  string `json:"detail"`
	Fix     string `json:"fix,omitempty"`
}

// Status runs every check ccload relies on and reports each, passing or
// not: first those the CCs need (Required), then those of INT's and
// On-Ramp's programs. The sch_fq check installs fq on the loopback device
// of a network namespace made for it (qdisc.ProbeFQ), which may load the
// sch_fq module; nothing else is changed.
func (l *Loader) Status() []Check {
	var checks []Check
	add := func(name string, err error, okDetail string) {
		c := Check{Name: name, OK: err == nil, Required: true, Detail: okDetail}
		if err != nil {
			c.Detail = err.Error()
			c.Fix = kernel.FixOf(err)
		}
		checks = append(checks, c)
	}

	f, err := kernel.Probe(l.host.BTFPath)
	add("kernel BTF", err, "found at "+l.host.BTFPath)
	if err == nil {
		add("struct_ops tcp_congestion_ops", f.RequireCC(),
			fmt.Sprintf("kernel %s can register BPF congestion controls", f.Release))
		detail := "struct_ops links (kernel >= 6.4): CCs are pinned as links"
		if f.Registration == kernel.RegLegacy {
			detail = "legacy map registration (kernel < 6.4): CCs are pinned as struct_ops maps"
		}
		checks = append(checks, Check{Name: "registration", OK: true, Required: true, Detail: detail})
		proto := "cong_control(sk, ack, flag, rs) (kernel >= 6.10)"
		if f.CongControlArgs == 2 {
			proto = "cong_control(sk, rs) (kernel < 6.10): legacy programs are loaded"
		}
		checks = append(checks, Check{Name: "cong_control prototype", OK: true, Required: true, Detail: proto})
	}
	add("capabilities", kernel.CheckCaps(), "CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN are effective")
	add("bpffs", kernel.CheckBPFFS(l.host.BPFFS, l.host.IsDefaultBPFFS()),
		"mounted at "+l.host.BPFFS+"; pins go to "+l.host.PinRoot())
	return append(checks, featureChecks()...)
}

// featureChecks are the checks that only some commands need.
func featureChecks() []Check {
	root, err := kernel.Cgroup2Root()
	cgroup := optionalCheck("cgroup v2",
		"ccload int enable, ccload onramp enable (their sockops programs attach to the cgroup v2 root)",
		"mounted at "+root, err, "mount it: mount -t cgroup2 none /sys/fs/cgroup")
	fqErr := qdisc.ProbeFQ()
	fq := optionalCheck("sch_fq",
		"ccload onramp enable, to hold paused flows (--observe needs no fq); ccload bench --scenario onramp",
		"the fq qdisc can be installed (CONFIG_NET_SCH_FQ)", fqErr,
		"the probe could not tell: it needs CAP_SYS_ADMIN to make a network namespace; run ccload status as root on the host")
	fq.Unknown = fqErr != nil && !errors.Is(fqErr, qdisc.ErrNoFQ)
	return []Check{cgroup, fq}
}

// optionalCheck is a check that is not Required: okDetail when err is
// nil; else the problem err names, and its fix, or fallbackFix for an
// error that carries none.
func optionalCheck(name, neededBy, okDetail string, err error, fallbackFix string) Check {
	c := Check{Name: name, OK: err == nil, NeededBy: neededBy, Detail: okDetail}
	if err == nil {
		return c
	}
	c.Detail, c.Fix = err.Error(), kernel.FixOf(err)
	var kerr *kernel.Error
	if errors.As(err, &kerr) {
		c.Detail = kerr.Problem
	}
	if c.Fix == "" {
		c.Fix = fallbackFix
	}
	return c
}
