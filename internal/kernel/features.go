package kernel

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cilium/ebpf"
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

// Features is what ccload found out about the running kernel from its BTF.
type Features struct {
	Release string // uname -r

	// StructOpsTCP: the kernel can take a tcp_congestion_ops from BPF.
	StructOpsTCP bool
	// Registration is the best mode the kernel supports.
	Registration Registration
	// CongControlArgs is the number of arguments of
	// tcp_congestion_ops.cong_control: 2 before 6.10, 4 since.
	CongControlArgs int

	// Spec is the kernel's BTF, for CO-RE relocations at load time.
	Spec *btf.Spec
	// Cache holds Spec for cilium/ebpf's own lookups in the kernel's BTF
	// (ebpf.CollectionOptions.Cache), such as finding a struct_ops map's
	// kernel type, so that a process parses the BTF once and not twice.
	// It is nil when the BTF was read from a path other than the
	// running kernel's.
	Cache *btf.Cache
}

// kernelBTFPath is where the running kernel exposes its BTF, the file
// cilium/ebpf's btf.LoadKernelSpec reads.
const kernelBTFPath = "/sys/kernel/btf/vmlinux"

// btfCache holds the features probed from each BTF file in this process.
// Parsing the kernel's BTF takes tens of milliseconds and megabytes, and
// the file does not change while the kernel runs, so it is parsed once per
// process and path (as cilium/ebpf caches btf.LoadKernelSpec). This is the
// one piece of package-level state in ccload, and it is never written
// after a path's first probe.
var btfCache = struct {
	sync.Mutex
	byPath map[string]*Features
}{byPath: map[string]*Features{}}

// Probe inspects the kernel's BTF at btfPath. The result is shared: treat
// it as read-only.
func Probe(btfPath string) (*Features, error) {
	btfCache.Lock()
	defer btfCache.Unlock()
	if f, ok := btfCache.byPath[btfPath]; ok {
		return f, nil
	}
	f, err := probe(btfPath)
	if err != nil {
		return nil, err
	}
	btfCache.byPath[btfPath] = f
	return f, nil
}

// loadKernelBTF reads the kernel's BTF from path, through cache when it
// is not nil (path is then the running kernel's).
func loadKernelBTF(path string, cache *btf.Cache) (*btf.Spec, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, NewError(KindNoBTF,
			"ccload needs a kernel built with CONFIG_DEBUG_INFO_BTF=y (all of Debian, Ubuntu, RHEL and Fedora's kernels since 2020 are); boot such a kernel",
			err, "kernel BTF not found at %s", path)
	}
	var spec *btf.Spec
	var err error
	if cache != nil {
		spec, err = cache.Kernel()
	} else {
		spec, err = btf.LoadSpec(path)
	}
	if err != nil {
		return nil, NewError(KindNoBTF, "the file is not valid BTF; check that it comes from the running kernel",
			err, "read kernel BTF %s", path)
	}
	return spec, nil
}

func probe(btfPath string) (*Features, error) {
	var cache *btf.Cache
	if btfPath == kernelBTFPath {
		cache = btf.NewCache()
	}
	spec, err := loadKernelBTF(btfPath, cache)
	if err != nil {
		return nil, err
	}
	f := &Features{Release: Release(), Spec: spec, Cache: cache}

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

// RequireCC checks that the kernel can run BPF congestion controls.
func (f *Features) RequireCC() error {
	if !f.StructOpsTCP {
		return NewError(KindKernelTooOld,
			"BPF congestion controls need Linux 5.6 or newer with CONFIG_BPF_JIT and CONFIG_BPF_SYSCALL; ccload is tested on 6.1 to 6.18",
			nil, "kernel %s has no struct_ops support for tcp_congestion_ops", f.Release)
	}
	if f.CongControlArgs != 2 && f.CongControlArgs != 4 {
		return NewError(KindKernelTooOld, "ccload supports kernels 6.1 to 6.18; please report this kernel",
			nil, "kernel %s declares tcp_congestion_ops.cong_control with %d arguments; ccload knows 2 and 4",
			f.Release, f.CongControlArgs)
	}
	return nil
}

// Release returns the running kernel's release (uname -r).
func Release() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// LoadError turns a failure to load what (a CC's name, "the INT hop", ...)
// into an *Error whose kind says what happened. A verifier rejection keeps
// the *ebpf.VerifierError inspectable with errors.As; print it with %+v
// for the whole log.
func LoadError(what string, err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return NewError(KindVerifier,
			"this kernel's verifier rejected the program; report the verifier log above with `ccload status` and `ccload version`",
			err, "the verifier rejected %s", what)
	}
	if errors.Is(err, unix.EEXIST) {
		return NewError(KindNameTaken, "another process registered it at the same moment; run `ccload list`, then attach again",
			err, "the kernel already has a congestion control named %q", what)
	}
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return NewError(KindMissingCaps, "run as root, or with CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN; check that no LSM (lockdown=confidentiality) blocks BPF", err, "the kernel refused to load %s", what)
	}
	if errors.Is(err, ebpf.ErrNotSupported) {
		return NewError(KindKernelTooOld, "ccload supports kernels 6.1 to 6.18; run `ccload status`", err, "kernel cannot load %s", what)
	}
	return NewError(KindLoad, "this kernel refused the program or map; run `ccload status` and report the output with `ccload version`", err, "load %s", what)
}

// EnsureBPFFS makes sure h's bpffs is mounted, mounting it when it is the
// system's default location. It returns a note for the user when it
// mounted it.
func (h Host) EnsureBPFFS() ([]string, error) {
	mounted, err := EnsureBPFFS(h.BPFFS, h.IsDefaultBPFFS())
	if err != nil || !mounted {
		return nil, err
	}
	return []string{fmt.Sprintf("mounted bpffs at %s", h.BPFFS)}, nil
}
