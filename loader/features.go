package loader

import (
	"fmt"
	"os"

	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// Registration is how a struct_ops CC is registered with the kernel.
type Registration string

const (
	// RegLink registers through a BPF struct_ops link (kernel >= 6.4). The
	// pinned link keeps the CC registered.
	RegLink Registration = "link"
	// RegLegacy registers by updating a struct_ops map without BPF_F_LINK
	// (kernel >= 5.6). The kernel keeps the CC registered until the map's
	// element is deleted.
	RegLegacy Registration = "legacy"
)

// Features is what ccload found out about the running kernel.
type Features struct {
	Release string // uname -r

	// StructOpsTCP: the kernel can take a tcp_congestion_ops from BPF.
	StructOpsTCP bool
	// Registration is the best mode the kernel supports.
	Registration Registration
	// CongControlArgs is the number of arguments of
	// tcp_congestion_ops.cong_control: 2 before 6.10, 4 since.
	CongControlArgs int

	spec *btf.Spec
}

// Check is one line of `ccload status`.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// loadKernelBTF reads the kernel's BTF from path.
func loadKernelBTF(path string) (*btf.Spec, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, newError(KindNoBTF,
			"ccload needs a kernel built with CONFIG_DEBUG_INFO_BTF=y (all of Debian, Ubuntu, RHEL and Fedora's kernels since 2020 are); boot such a kernel",
			err, "kernel BTF not found at %s", path)
	}
	spec, err := btf.LoadSpec(path)
	if err != nil {
		return nil, newError(KindNoBTF, "the file is not valid BTF; check that it comes from the running kernel",
			err, "read kernel BTF %s", path)
	}
	return spec, nil
}

// probeFeatures inspects the kernel's BTF at path.
func probeFeatures(btfPath string) (*Features, error) {
	spec, err := loadKernelBTF(btfPath)
	if err != nil {
		return nil, err
	}
	f := &Features{Release: kernelRelease(), spec: spec}

	var value *btf.Struct
	if err := spec.TypeByName("bpf_struct_ops_tcp_congestion_ops", &value); err == nil {
		f.StructOpsTCP = true
	}

	var ops *btf.Struct
	if err := spec.TypeByName("tcp_congestion_ops", &ops); err == nil {
		for _, m := range ops.Members {
			if m.Name != "cong_control" {
				continue
			}
			if ptr, ok := m.Type.(*btf.Pointer); ok {
				if fp, ok := ptr.Target.(*btf.FuncProto); ok {
					f.CongControlArgs = len(fp.Params)
				}
			}
		}
	}

	// struct bpf_struct_ops_link came with struct_ops links in 6.4. The
	// enum value BPF_LINK_TYPE_STRUCT_OPS is no sign: 6.1 has it already,
	// for the trampolines of struct_ops programs.
	f.Registration = RegLegacy
	var opsLink *btf.Struct
	if err := spec.TypeByName("bpf_struct_ops_link", &opsLink); err == nil {
		f.Registration = RegLink
	}
	return f, nil
}

// requireCC checks that the kernel can run BPF congestion controls.
func (f *Features) requireCC() error {
	if !f.StructOpsTCP {
		return newError(KindKernelTooOld,
			"BPF congestion controls need Linux 5.6 or newer with CONFIG_BPF_JIT and CONFIG_BPF_SYSCALL; ccload is tested on 6.1 to 6.18",
			nil, "kernel %s has no struct_ops support for tcp_congestion_ops", f.Release)
	}
	if f.CongControlArgs != 2 && f.CongControlArgs != 4 {
		return newError(KindKernelTooOld, "ccload supports kernels 6.1 to 6.18; please report this kernel",
			nil, "kernel %s declares tcp_congestion_ops.cong_control with %d arguments; ccload knows 2 and 4",
			f.Release, f.CongControlArgs)
	}
	return nil
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// Status runs every check ccload relies on and reports each, passing or not.
func (l *Loader) Status() []Check {
	var checks []Check
	add := func(name string, err error, okDetail string) {
		c := Check{Name: name, OK: err == nil, Detail: okDetail}
		if err != nil {
			c.Detail = err.Error()
			c.Fix = FixOf(err)
		}
		checks = append(checks, c)
	}

	f, err := probeFeatures(l.host.BTFPath)
	add("kernel BTF", err, "found at "+l.host.BTFPath)
	if err == nil {
		add("struct_ops tcp_congestion_ops", f.requireCC(),
			fmt.Sprintf("kernel %s can register BPF congestion controls", f.Release))
		detail := "struct_ops links (kernel >= 6.4): CCs are pinned as links"
		if f.Registration == RegLegacy {
			detail = "legacy map registration (kernel < 6.4): CCs are pinned as struct_ops maps"
		}
		checks = append(checks, Check{Name: "registration", OK: true, Detail: detail})
		proto := "cong_control(sk, ack, flag, rs) (kernel >= 6.10)"
		if f.CongControlArgs == 2 {
			proto = "cong_control(sk, rs) (kernel < 6.10): legacy programs are loaded"
		}
		checks = append(checks, Check{Name: "cong_control prototype", OK: true, Detail: proto})
	}
	add("capabilities", checkCaps(), "CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN are effective")
	add("bpffs", checkBPFFS(l.host.BPFFS, l.host.isDefaultBPFFS()),
		"mounted at "+l.host.BPFFS+"; pins go to "+l.pinRoot())
	return checks
}
