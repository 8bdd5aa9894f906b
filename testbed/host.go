package testbed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// netnsDir is where named network namespaces are bind-mounted, as used by
// `ip netns`.
const netnsDir = "/var/run/netns"

// ErrClosed is returned when using a Host whose topology has been closed.
var ErrClosed = errors.New("host closed")

// Host is one network namespace with one or more addresses.
//
// Hosts are created by the topology constructors and live until the
// topology's Close.
type Host struct {
	// Name is the netns name, as listed by `ip netns list`.
	Name string
	// Addr is the primary IPv4 address of this host (198.18.x.y or 198.19.x.y).
	Addr netip.Addr
	// Addr6 is the primary IPv6 address of this host (fd00::/8).
	Addr6 netip.Addr

	mu     sync.RWMutex
	closed bool
	ns     netns.NsHandle  // open handle of the namespace
	nl     *netlink.Handle // rtnetlink handle bound to the namespace
}

// newHost creates the named network namespace name, brings up lo and applies
// the sysctls every host needs, and with steer those that steer each flow
// to one CPU (steerFlowsToOneCPU). On error nothing is left behind.
func newHost(ctx context.Context, name string, steer bool) (_ *Host, err error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("create netns %s: %w", name, err)
	}

	ns, err := createNamedNetns(name)
	if err != nil {
		return nil, fmt.Errorf("create netns %s: %w", name, err)
	}
	h := &Host{Name: name, ns: ns}
	defer func() {
		if err != nil {
			err = errors.Join(err, h.close())
		}
	}()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("configure netns %s: %w", name, err)
	}

	h.nl, err = netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open rtnetlink in netns %s: %w", name, err)
	}

	lo, err := h.nl.LinkByName("lo")
	if err != nil {
		return nil, fmt.Errorf("find lo in netns %s: %w", name, err)
	}
	if err := h.nl.LinkSetUp(lo); err != nil {
		return nil, fmt.Errorf("set lo up in netns %s: %w", name, err)
	}

	// Links are added with IFA_F_NODAD already; turning DAD off by default
	// also spares the link-local addresses of interfaces created later.
	err = h.setSysctls(
		sysctl{"net/ipv6/conf/all/accept_dad", "0"},
		sysctl{"net/ipv6/conf/default/accept_dad", "0"},
	)
	if err != nil {
		return nil, err
	}
	if steer {
		if err := h.steerFlowsToOneCPU(); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// createNamedNetns creates a new network namespace and bind-mounts it at
// /var/run/netns/name.
func createNamedNetns(name string) (netns.NsHandle, error) {
	type result struct {
		ns  netns.NsHandle
		err error
	}
	done := make(chan result, 1)
	go func() {
		// NewNamed moves the calling thread into the new namespace and
		// leaves it there. The thread stays locked on purpose: the runtime
		// terminates a locked thread when its goroutine exits, so no other
		// goroutine ever runs in the wrong namespace.
		runtime.LockOSThread()
		ns, err := netns.NewNamed(name)
		done <- result{ns, err}
	}()
	r := <-done
	if r.err != nil {
		if !errors.Is(r.err, os.ErrExist) {
			// The bind mount may have failed after the file was created.
			// Only remove it if it is not somebody else's namespace.
			_ = removeNamedNetns(name)
		}
		return netns.None(), r.err
	}
	return r.ns, nil
}

// removeNamedNetns undoes createNamedNetns. Unlike netns.DeleteNamed it
// tolerates a missing mount or file, so it can clean up half-created state.
func removeNamedNetns(name string) error {
	path := filepath.Join(netnsDir, name)
	err := unix.Unmount(path, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

// close releases the host's handles and deletes its named namespace. The
// kernel destroys the namespace, and the veth ends in it, once the last
// socket or file referring to it is closed. close is idempotent.
func (h *Host) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true

	if h.nl != nil {
		h.nl.Close()
		h.nl = nil
	}
	var errs []error
	if h.ns.IsOpen() {
		if err := h.ns.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close netns handle %s: %w", h.Name, err))
		}
	}
	if err := removeNamedNetns(h.Name); err != nil {
		errs = append(errs, fmt.Errorf("delete netns %s: %w", h.Name, err))
	}
	return errors.Join(errs...)
}

// handle returns the host's rtnetlink handle, or an error once the host is
// closed. A closed vishvananda/netlink handle silently falls back to the
// initial namespace, so it must never be used after close.
func (h *Host) handle() (*netlink.Handle, error) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return nil, fmt.Errorf("netns %s: %w", h.Name, ErrClosed)
	}
	return h.nl, nil
}

// nsFd returns the file descriptor of the host's namespace, valid until the
// host is closed.
func (h *Host) nsFd() (int, error) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return -1, fmt.Errorf("netns %s: %w", h.Name, ErrClosed)
	}
	return int(h.ns), nil
}

// Do runs fn on a locked OS thread switched into the host's netns, then
// switches back.
//
// Sockets created inside fn stay in that netns after Do returns. fn runs on a
// separate goroutine; Do waits for it and re-raises a panic from fn.
func (h *Host) Do(fn func() error) error {
	type result struct {
		err      error
		panicked bool
		panicVal any
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() { done <- r }()

		runtime.LockOSThread()
		restored, err := h.enter(func() {
			defer func() {
				if p := recover(); p != nil {
					r.panicked, r.panicVal = true, p
				}
			}()
			r.err = fn()
		})
		if restored {
			runtime.UnlockOSThread()
		}
		// Otherwise the thread is left locked and the runtime discards it
		// when this goroutine exits.
		r.err = errors.Join(r.err, err)
	}()

	r := <-done
	if r.panicked {
		panic(r.panicVal)
	}
	return r.err
}

// enter switches the locked calling thread into the host's namespace, runs
// fn and switches back. restored reports whether the thread is back in its
// original namespace.
func (h *Host) enter(fn func()) (restored bool, err error) {
	orig, err := netns.Get()
	if err != nil {
		return true, fmt.Errorf("get current netns: %w", err)
	}
	defer orig.Close()

	h.mu.RLock()
	if h.closed {
		h.mu.RUnlock()
		return true, fmt.Errorf("netns %s: %w", h.Name, ErrClosed)
	}
	err = netns.Set(h.ns)
	h.mu.RUnlock()
	if err != nil {
		// setns either switched or it did not; verify rather than guess.
		return restoreNetns(orig), fmt.Errorf("enter netns %s: %w", h.Name, err)
	}

	fn()

	if err := netns.Set(orig); err != nil {
		return false, fmt.Errorf("leave netns %s: %w", h.Name, err)
	}
	return true, nil
}

// restoreNetns tries to switch the locked thread back to orig and reports
// whether it is there.
func restoreNetns(orig netns.NsHandle) bool {
	return netns.Set(orig) == nil
}

// Command returns an exec.Cmd that runs name with args inside the host's
// netns, via `nsenter --net=/var/run/netns/NAME`. nsenter is in both
// util-linux and busybox, so the same tests run on a full host and in the
// vmtests' busybox initramfs, where `ip netns exec` does not exist.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	argv := append([]string{"--net=" + filepath.Join(netnsDir, h.Name), "--", name}, args...)
	return exec.CommandContext(ctx, "nsenter", argv...)
}

// Interface returns the name of h's one interface besides lo: a leaf
// host's link toward its router or its pair. It is an error for h to have
// none or more than one.
func (h *Host) Interface() (string, error) {
	var names []string
	err := h.Do(func() error {
		ifs, err := net.Interfaces()
		for _, ifi := range ifs {
			if ifi.Flags&net.FlagLoopback == 0 {
				names = append(names, ifi.Name)
			}
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("list the interfaces of %s: %w", h.Name, err)
	}
	if len(names) != 1 {
		return "", fmt.Errorf("%s has interfaces %q besides lo, want one", h.Name, names)
	}
	return names[0], nil
}

// String returns the netns name.
func (h *Host) String() string {
	return h.Name
}

// sysctl is one /proc/sys entry, with a slash-separated key relative to
// /proc/sys.
type sysctl struct {
	key, value string
}

// setSysctls writes sysctls inside the host's namespace. The files are opened
// on the thread that is switched into the namespace, which is what makes
// /proc/sys/net resolve to the namespace's settings.
func (h *Host) setSysctls(sysctls ...sysctl) error {
	return h.Do(func() error {
		for _, s := range sysctls {
			path := filepath.Join("/proc/sys", s.key)
			if err := writeFile(path, s.value); err != nil {
				return fmt.Errorf("set sysctl %s=%s in netns %s: %w", s.key, s.value, h.Name, err)
			}
		}
		return nil
	})
}

func writeFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	return errors.Join(err, f.Close())
}

// rpsDefaultMask is the sysctl that gives the receive queues of every
// device created later in a namespace their RPS CPU mask (Linux 6.2, and
// kept per namespace since soon after: this host's 6.18 and the 6.12
// guests have it, the 6.1 guests do not).
const rpsDefaultMask = "net/core/rps_default_mask"

// steerFlowsToOneCPU makes each device later created in the host's
// namespace hand every received flow to one CPU, chosen by the flow's hash
// (RPS over all CPUs; DumbbellConfig.SteerFlows). A veth puts a packet on
// the input backlog of the CPU that sent it. Without RPS, two packets of
// one flow sent from different CPUs (the application's, and a pacing or
// loss-probe timer that fires on the other) can be processed in the
// opposite order, which a NIC's receive queue never does, and TCP takes
// the reordering for loss and retransmits (docs/design.md, "Platform
// facts"). On a kernel without the sysctl it does nothing, and the veths
// reorder as before.
func (h *Host) steerFlowsToOneCPU() error {
	err := h.setSysctls(sysctl{rpsDefaultMask, cpuMask(runtime.NumCPU())})
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// cpuMask is the cpumask of CPUs 0 to n-1 as /proc/sys and /sys print it:
// comma-separated 32-bit hex words, the most significant first.
func cpuMask(n int) string {
	if n < 1 {
		n = 1
	}
	words := make([]string, (n+31)/32)
	for i := range words {
		bits := min(n-32*i, 32)
		w := uint64(1)<<bits - 1
		words[len(words)-1-i] = fmt.Sprintf("%08x", w)
	}
	return strings.Join(words, ",")
}
