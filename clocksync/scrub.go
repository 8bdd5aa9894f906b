package clocksync

import (
	"errors"
	"fmt"
	"net"
	"runtime"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/qdisc"
)

// scrubber keeps bpf/clock.c's clock_scrub at the egress of every
// interface of the agent's network namespace but lo, where it clears the
// wall-clock receive stamps that the agent's software receive timestamps
// put on every received packet, before a packet sent on with its stamp
// reaches fq, which would drop it (see the program's comment). It runs
// as long as the agent, whose socket keeps the stamps on: with TCX the
// kernel detaches it when the agent's process ends, however it ends.
type scrubber struct {
	method   qdisc.Method // MethodAuto but in tests
	prog     *ebpf.Program
	ns       netns.NsHandle            // the agent's network namespace
	attached map[int]*qdisc.Attachment // by ifindex
}

// scrubPriority is the scrub program's cls_bpf priority with clsact,
// apart from the hop's (qdisc.DefaultPriority) on the same egress.
const scrubPriority = qdisc.DefaultPriority - 1

// newScrubber loads the scrub program and attaches it by method to every
// interface of the calling thread's network namespace.
func newScrubber(method qdisc.Method) (*scrubber, error) {
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("open this thread's network namespace: %w", err)
	}
	spec, err := loadClock()
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("read the clock object: %w", err)
	}
	var objs struct {
		Prog *ebpf.Program `ebpf:"clock_scrub"`
	}
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		ns.Close()
		return nil, kernel.LoadError("load the clock agent's stamp-scrub program (bpf_ktime_get_tai_ns needs Linux 6.1)", err)
	}
	s := &scrubber{method: method, prog: objs.Prog, ns: ns, attached: map[int]*qdisc.Attachment{}}
	if err := s.sync(); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// sync attaches the program to interfaces that appeared since the last
// call, and forgets those that went away.
func (s *scrubber) sync() error {
	ifs, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("list the interfaces to stamp probes on: %w", err)
	}
	seen := map[int]bool{}
	var errs []error
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagLoopback != 0 {
			continue
		}
		seen[ifi.Index] = true
		if s.attached[ifi.Index] != nil {
			continue
		}
		a, err := s.attach(ifi.Name)
		if err != nil {
			errs = append(errs, fmt.Errorf("clear receive stamps leaving by %s: %w", ifi.Name, err))
			continue
		}
		s.attached[ifi.Index] = a
	}
	for idx, a := range s.attached {
		if !seen[idx] {
			// The interface is gone, and its attachment with it.
			_ = a.Close()
			delete(s.attached, idx)
		}
	}
	return errors.Join(errs...)
}

// attach attaches the program to iface's egress. On a kernel without TCX
// an agent that died (kill -9) left its filter at scrubPriority, which
// fails the attach with EEXIST: that filter is removed, and the attach
// tried once more.
func (s *scrubber) attach(iface string) (*qdisc.Attachment, error) {
	opts := qdisc.AttachOptions{Direction: qdisc.Egress, Method: s.method, Priority: scrubPriority}
	a, err := qdisc.Attach(iface, s.prog, opts)
	if err == nil || !errors.Is(err, unix.EEXIST) {
		return a, err
	}
	removed, rerr := qdisc.RemoveStaleFilter(iface, qdisc.Egress, scrubPriority, scrubProgName)
	if rerr != nil || !removed {
		return nil, errors.Join(err, rerr)
	}
	return qdisc.Attach(iface, s.prog, opts)
}

// scrubProgName is clock_scrub's name as the kernel keeps it.
const scrubProgName = "clock_scrub"

// syncInNetns is sync from any goroutine: it runs it on a thread of its
// own switched into the agent's network namespace, whose interfaces and
// indexes are the ones that count. A thread that cannot switch back is
// left locked, and the runtime discards it.
func (s *scrubber) syncInNetns() error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("open this thread's network namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(s.ns); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("enter the agent's network namespace: %w", err)
			return
		}
		err = s.sync()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

// close detaches the program everywhere.
func (s *scrubber) close() {
	for idx, a := range s.attached {
		_ = a.Close()
		delete(s.attached, idx)
	}
	s.prog.Close()
	s.ns.Close()
}
