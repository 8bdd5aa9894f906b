package clocksync

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
)

// The clock map's pins: <pin root>/clock/ns<netns inode>/clock_offsets,
// one directory per network namespace, as bpf/include/clock.h documents.
// The map outlives the agent, so that the data-path programs that read it
// keep the same map across restarts of the agent; its entries expire by
// themselves (valid_until_ns) when no agent refreshes them.
const (
	clockDir    = "clock"
	offsetsName = "clock_offsets"
)

// Entry is one peer's published offset, as the clock map holds it.
type Entry struct {
	// Peer is the peer's address.
	Peer netip.Addr `json:"peer"`
	// OffsetNs is the peer's clock minus this host's at RefNs.
	OffsetNs int64 `json:"offset_ns"`
	// RefNs is this host's CLOCK_TAI reading at which OffsetNs holds.
	RefNs uint64 `json:"ref_ns"`
	// Drift is the offset's slope in this host's time (1e-6: 1 ppm).
	Drift float64 `json:"drift"`
	// ErrorNs is the offset's standard error.
	ErrorNs uint32 `json:"error_ns"`
	// ResidualNs is the RMS loop residual of the peer's edges.
	ResidualNs uint32 `json:"residual_ns"`
	// UpdatedNs is when the agent wrote the entry (CLOCK_TAI).
	UpdatedNs uint64 `json:"updated_ns"`
	// ValidUntilNs is when readers stop using it (CLOCK_TAI).
	ValidUntilNs uint64 `json:"valid_until_ns"`
	// PureShare is the share of pure probe pairs, 0 to 1, for a peer this
	// agent probes; 0 for one known only through the mesh.
	PureShare float64 `json:"pure_share"`
	// Probed says whether this agent probes the peer itself.
	Probed bool `json:"probed"`
	// Seq counts the entry's updates.
	Seq uint32 `json:"seq"`
}

// OffsetAt is the entry's offset when this host's clock reads at, as
// clock_offset_at computes it in BPF (the same fixed point).
func (e Entry) OffsetAt(at uint64) int64 {
	dt := int64(at - e.RefNs)
	dt = max(-maxExtrapolation, min(maxExtrapolation, dt))
	return e.OffsetNs + int64((hi64mul(dt, driftQ32(e.Drift))))
}

// maxExtrapolation is CLOCK_MAX_EXTRAPOLATION_NS.
const maxExtrapolation = 60_000_000_000

// hi64mul is (a·b) >> 32 for the ranges clock.h allows, where the product
// fits 64 bits, as the BPF code computes it.
func hi64mul(a, b int64) int64 { return (a * b) >> 32 }

// driftQ32 converts a drift to CLOCK_DRIFT_ONE fixed point.
func driftQ32(d float64) int64 { return int64(math.Round(d * (1 << 32))) }

func (e Entry) value() clockClockOffset {
	v := clockClockOffset{
		Seq:          e.Seq,
		OffsetNs:     e.OffsetNs,
		RefNs:        e.RefNs,
		DriftQ32:     driftQ32(e.Drift),
		ErrorNs:      e.ErrorNs,
		ResidualNs:   e.ResidualNs,
		UpdatedNs:    e.UpdatedNs,
		ValidUntilNs: e.ValidUntilNs,
		PurePermille: uint16(math.Round(math.Max(0, math.Min(1, e.PureShare)) * 1000)),
	}
	if e.Probed {
		v.Flags |= flagProbed
	}
	return v
}

// flagProbed is CLOCK_F_PROBED.
const flagProbed = 1

func entryOf(k clockClockPeer, v clockClockOffset) Entry {
	return Entry{
		Peer:         netip.AddrFrom16(k.Addr).Unmap(),
		OffsetNs:     v.OffsetNs,
		RefNs:        v.RefNs,
		Drift:        float64(v.DriftQ32) / (1 << 32),
		ErrorNs:      v.ErrorNs,
		ResidualNs:   v.ResidualNs,
		UpdatedNs:    v.UpdatedNs,
		ValidUntilNs: v.ValidUntilNs,
		PureShare:    float64(v.PurePermille) / 1000,
		Probed:       v.Flags&flagProbed != 0,
		Seq:          v.Seq,
	}
}

func peerKey(a netip.Addr) clockClockPeer { return clockClockPeer{Addr: a.As16()} }

// Offsets is the clock map of one network namespace.
type Offsets struct {
	m    *ebpf.Map
	dir  string
	lock *os.File // flock on dir while an agent writes
}

// netnsInode is the inode number of the calling thread's network
// namespace.
func netnsInode() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return 0, fmt.Errorf("identify this thread's network namespace: %w", err)
	}
	return st.Ino, nil
}

// Dir is the directory of the calling thread's network namespace's
// clock map below host's pin root.
func Dir(host kernel.Host) (string, error) {
	ino, err := netnsInode()
	if err != nil {
		return "", err
	}
	return filepath.Join(host.PinRoot(), clockDir, fmt.Sprintf("ns%d", ino)), nil
}

// OpenForAgent opens the clock map of the calling thread's network
// namespace for its agent, creating and pinning it when it doesn't exist,
// and locks it, so that a second agent in the same namespace fails with an
// error that says so. Close releases the lock and keeps the pin.
func OpenForAgent(host kernel.Host) (_ *Offsets, err error) {
	if err := kernel.CheckCaps(); err != nil {
		return nil, err
	}
	if _, err := host.EnsureBPFFS(); err != nil {
		return nil, err
	}
	dir, err := ensureMap(host)
	if err != nil {
		return nil, err
	}
	lock, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, kernel.NewError(kernel.KindAlreadyAttached,
				"stop the other agent first, or run this one in another network namespace",
				err, "a clock agent already runs in this network namespace (it holds %s)", dir)
		}
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	m, err := loadPinned(dir)
	if err != nil {
		return nil, err
	}
	return &Offsets{m: m, dir: dir, lock: lock}, nil
}

// OpenReadOnly opens the clock map of the calling thread's network
// namespace for reading, as `ccload clock status` does.
func OpenReadOnly(host kernel.Host) (*Offsets, error) {
	dir, err := Dir(host)
	if err != nil {
		return nil, err
	}
	if !kernel.Exists(dir) {
		return nil, kernel.NewError(kernel.KindNotAttached,
			"start one: ccload clock run --peers ADDR[,ADDR...] (in this network namespace; use nsenter --net=..., not ip netns exec, which hides the host's bpffs)",
			nil, "no clock agent has published offsets in this network namespace (%s does not exist)", dir)
	}
	m, err := loadPinned(dir)
	if err != nil {
		return nil, err
	}
	return &Offsets{m: m, dir: dir}, nil
}

// DataPathMap returns the clock map of the calling thread's network
// namespace for a BPF object that reads it (On-Ramp), creating and
// pinning it when no agent has yet: the agent adopts the pinned map when
// it starts, so the reader and the agent always share one map. Until an
// agent publishes, the map is empty and readers find no peer.
func DataPathMap(host kernel.Host) (*ebpf.Map, error) {
	dir, err := ensureMap(host)
	if err != nil {
		return nil, err
	}
	return loadPinned(dir)
}

// ensureMap returns the directory of the calling thread's network
// namespace's clock map, creating and pinning the map when it is missing.
func ensureMap(host kernel.Host) (string, error) {
	dir, err := Dir(host)
	if err != nil {
		return "", err
	}
	if !kernel.Exists(dir) {
		if err := createPinned(host, dir); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// createPinned creates the map from bpf/clock.c's object and pins it at
// dir, staged so that a failure leaves no directory behind.
func createPinned(host kernel.Host, dir string) error {
	spec, err := loadClock()
	if err != nil {
		return fmt.Errorf("read the clock map's object: %w", err)
	}
	m, err := ebpf.NewMap(spec.Maps[offsetsName])
	if err != nil {
		return kernel.LoadError("create the clock map", err)
	}
	defer m.Close()
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(dir), err)
	}
	// The stage is named by the netns as well as the process: one process
	// may start agents in several namespaces at once (the tests, a daemon),
	// and a stage of the same name would be taken for a dead one's.
	st, err := pin.NewStage(filepath.Dir(dir), "clock-"+filepath.Base(dir), dir)
	if err != nil {
		return err
	}
	defer st.Abort()
	if err := st.PinMaps(map[string]*ebpf.Map{offsetsName: m}); err != nil {
		return err
	}
	if err := st.Commit(); err != nil && !kernel.Exists(dir) {
		return err
	}
	// On a failed Commit, another agent raced this one and made the same
	// map first.
	return nil
}

// loadPinned opens the pinned map in dir and checks that it has the
// layout this build writes.
func loadPinned(dir string) (*ebpf.Map, error) {
	path := filepath.Join(dir, offsetsName)
	m, err := ebpf.LoadPinnedMap(path, nil)
	if err != nil {
		return nil, fmt.Errorf("open the clock map %s: %w", path, err)
	}
	spec, err := loadClock()
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("read the clock map's object: %w", err)
	}
	if err := spec.Maps[offsetsName].Compatible(m); err != nil {
		m.Close()
		return nil, kernel.NewError(kernel.KindVersionMismatch,
			fmt.Sprintf("remove it (rm -r %s) and start the agent again", dir),
			err, "%s has another layout than this ccload writes", path)
	}
	return m, nil
}

// Close closes the map and releases the agent's lock. The pin stays.
func (o *Offsets) Close() error {
	err := o.m.Close()
	if o.lock != nil {
		o.lock.Close()
	}
	return err
}

// Path is the map's pin.
func (o *Offsets) Path() string { return filepath.Join(o.dir, offsetsName) }

// Put writes e under its peer, under the value's lock.
func (o *Offsets) Put(e Entry) error {
	k, v := peerKey(e.Peer), e.value()
	if err := o.m.Update(&k, &v, ebpf.UpdateLock); err != nil {
		return fmt.Errorf("write the clock offset of %s: %w", e.Peer, err)
	}
	return nil
}

// Delete removes peer's entry; a missing one is no error.
func (o *Offsets) Delete(peer netip.Addr) error {
	k := peerKey(peer)
	if err := o.m.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete the clock offset of %s: %w", peer, err)
	}
	return nil
}

// Get reads peer's entry under the value's lock.
func (o *Offsets) Get(peer netip.Addr) (Entry, bool, error) {
	k := peerKey(peer)
	var v clockClockOffset
	err := o.m.LookupWithFlags(&k, &v, ebpf.LookupLock)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, fmt.Errorf("read the clock offset of %s: %w", peer, err)
	}
	return entryOf(k, v), true, nil
}

// List reads every entry, each under its lock.
func (o *Offsets) List() ([]Entry, error) {
	var (
		keys []clockClockPeer
		k    clockClockPeer
		out  []Entry
	)
	it := o.m.Iterate()
	var v clockClockOffset
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list the clock map: %w", err)
	}
	for _, k := range keys {
		e, ok, err := o.Get(netip.AddrFrom16(k.Addr).Unmap())
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, e)
		}
	}
	return out, nil
}

// PublishFixed publishes the same offset (peer minus this host) for every
// peer in peers, with error bound errNs, valid for valid, in the clock map
// of the calling thread's network namespace. It is for hosts that share
// one kernel's clock (the network namespaces of one machine: the testbed,
// the bench), whose true offsets are 0, so that On-Ramp can be measured
// without the agent's own estimation error (the clock bench measures that
// error), and for tests that give On-Ramp a clock known to be wrong. It
// takes the agent's lock for the write, so it fails while an agent runs in
// the namespace.
func PublishFixed(host kernel.Host, peers []netip.Addr, offset time.Duration, errNs uint32, valid time.Duration) error {
	o, err := OpenForAgent(host)
	if err != nil {
		return err
	}
	defer o.Close()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_TAI, &ts); err != nil {
		return fmt.Errorf("read CLOCK_TAI: %w", err)
	}
	now := uint64(ts.Nano())
	for _, p := range peers {
		e := Entry{Peer: p, OffsetNs: int64(offset), RefNs: now, ErrorNs: errNs, UpdatedNs: now, ValidUntilNs: now + uint64(valid)}
		if err := o.Put(e); err != nil {
			return fmt.Errorf("publish the offset of %s: %w", p, err)
		}
	}
	return nil
}

// RemoveIfIdle removes the clock map of the calling thread's network
// namespace when no agent runs there (none holds its lock). On-Ramp calls
// it when its last interface in the namespace goes, so that a map it
// created for itself does not outlive it; an agent that starts later
// creates a new one. It reports whether it removed the map.
func RemoveIfIdle(host kernel.Host) (bool, error) {
	dir, err := Dir(host)
	if err != nil {
		return false, err
	}
	lock, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open %s: %w", dir, err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return false, nil // an agent runs
		}
		return false, fmt.Errorf("lock %s: %w", dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return false, fmt.Errorf("remove the clock map %s: %w", dir, err)
	}
	_ = os.Remove(filepath.Dir(dir)) // once empty
	return true, nil
}
