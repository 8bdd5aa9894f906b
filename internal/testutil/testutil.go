// Package testutil holds the few helpers ccload's tests share: skipping
// with a reason (or failing, in CI, where nothing may skip), checks for
// root and kernel features, and a pin root of the test's own. Network
// topologies for tests are in the subpackage testnet, because testbed's own
// tests use this package.
package testutil

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/ccload/ccload/internal/kernel"
)

// NoSkipEnv, when set to a non-empty value, turns every Skip into a
// failure. CI sets it: its machine has everything, so a skip there would
// hide a test that did not run.
const NoSkipEnv = "CCLOAD_NO_SKIP"

// Skip skips t with reason, or fails it when NoSkipEnv is set.
func Skip(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv(NoSkipEnv) != "" {
		t.Fatalf("cannot run (and %s forbids skipping): %s", NoSkipEnv, reason)
	}
	t.Skip(reason)
}

// RequireRoot skips t unless the process runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Skip(t, "needs root (CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN, CAP_SYS_ADMIN) to load BPF and create network namespaces")
	}
}

// RequireFile skips t unless path exists; what names the feature.
func RequireFile(t testing.TB, path, what string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		Skip(t, what+" is missing: "+err.Error())
	}
}

// InVMEnv is set by the vmtests guest's /init.
const InVMEnv = "CCLOAD_IN_VM"

// KernelLacksMarker begins the reason SkipKernelLacks gives, followed by
// the feature and a semicolon. vmtests --host-skips finds the host's
// skips by it, to check that the guests ran each of those tests.
const KernelLacksMarker = "this kernel lacks "

// SkipKernelLacks skips t because the running kernel lacks a feature
// (sch_fq, the tcp_dctcp module, ...) that the kernels booted by vmtests
// have. On the host this skip is allowed even where NoSkipEnv is set,
// because `go run ./vmtests` runs the test on kernels that have the
// feature; inside a vmtests guest it is a failure.
func SkipKernelLacks(t testing.TB, feature string) {
	t.Helper()
	if os.Getenv(InVMEnv) != "" {
		t.Fatalf("the guest kernel lacks %s, which the vmtests guest must have", feature)
	}
	t.Skipf("%s%s; vmtests (go run ./vmtests --kernel 6.1 --kernel 6.12) runs this test on kernels that have it", KernelLacksMarker, feature)
}

// Host returns the standard kernel.Host with its pins in a directory of
// their own, <bpffs>/ccload-test-<pid>, which is removed when t ends: tests
// never touch a user's pins, and the daemon and the CLI never see a test's.
func Host(t testing.TB) kernel.Host {
	t.Helper()
	h := kernel.DefaultHost()
	h.PinDir = fmt.Sprintf("ccload-test-%d", os.Getpid())
	t.Cleanup(func() { os.RemoveAll(h.PinRoot()) })
	return h
}

// RequireKernelCC skips t unless this process can load BPF congestion
// controls here (root, kernel BTF), and fails it when one of names is
// already registered in the kernel: a test must not take over a CC that a
// user, or another test process, attached.
func RequireKernelCC(t testing.TB, names ...string) {
	t.Helper()
	RequireRoot(t)
	RequireFile(t, kernel.DefaultHost().BTFPath, "kernel BTF (CONFIG_DEBUG_INFO_BTF)")
	for _, n := range names {
		if Registered(t, n) {
			t.Fatalf("%s is already registered in this kernel; detach it (ccload detach %s) before running the tests", n, n)
		}
	}
}

// Registered reports whether the kernel has a congestion control called
// name now.
func Registered(t testing.TB, name string) bool {
	t.Helper()
	ccs, err := kernel.ReadSysctl(kernel.DefaultHost().ProcSys, "net/ipv4/tcp_available_congestion_control")
	if err != nil {
		t.Fatal(err)
	}
	return slices.Contains(strings.Fields(ccs), name)
}

// Registrations lists the registration modes this kernel supports:
// legacy everywhere, links since 6.4.
func Registrations(t testing.TB) []kernel.Registration {
	t.Helper()
	f, err := kernel.Probe(kernel.DefaultHost().BTFPath)
	if err != nil {
		t.Fatalf("probe the kernel: %v", err)
	}
	if f.Registration == kernel.RegLegacy {
		return []kernel.Registration{kernel.RegLegacy}
	}
	return []kernel.Registration{kernel.RegLink, kernel.RegLegacy}
}

// ProgramID returns the kernel's ID of prog, failing t where it has none.
func ProgramID(t testing.TB, prog *ebpf.Program) ebpf.ProgramID {
	t.Helper()
	info, err := prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, ok := info.ID()
	if !ok {
		t.Fatal("the kernel reports no program ID")
	}
	return id
}
