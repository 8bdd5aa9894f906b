package loader

import (
	"fmt"

	"github.com/ccload/ccload/internal/kernel"
)

// Check is one line of `ccload status`.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// Status runs every check ccload relies on and reports each, passing or not.
func (l *Loader) Status() []Check {
	var checks []Check
	add := func(name string, err error, okDetail string) {
		c := Check{Name: name, OK: err == nil, Detail: okDetail}
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
		checks = append(checks, Check{Name: "registration", OK: true, Detail: detail})
		proto := "cong_control(sk, ack, flag, rs) (kernel >= 6.10)"
		if f.CongControlArgs == 2 {
			proto = "cong_control(sk, rs) (kernel < 6.10): legacy programs are loaded"
		}
		checks = append(checks, Check{Name: "cong_control prototype", OK: true, Detail: proto})
	}
	add("capabilities", kernel.CheckCaps(), "CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN are effective")
	add("bpffs", kernel.CheckBPFFS(l.host.BPFFS, l.host.IsDefaultBPFFS()),
		"mounted at "+l.host.BPFFS+"; pins go to "+l.host.PinRoot())
	return checks
}
