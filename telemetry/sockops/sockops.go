// Package sockops tags a host's TCP connections with INT: it attaches the
// sockops program of bpf/int_sockops.c to a cgroup, which adds a forward
// INT option to data segments sent to the datacenter's prefixes, echoes
// the records that arrive back to their sender on ACKs, and parses the
// echoes into the per-socket INT store, the map it shares with the CCs
// that read INT (powertcp, hpcc) through internal/sharedmaps.
//
// Pins live in <pin root>/int/ (the link, the config, the peer tries, the
// counters and the record of the object the program was built from, which
// tells a newer ccload to upgrade it in place: see upgrade.go) and
// <pin root>/shared/ (the shared maps, the INT store among them, and their
// holders).
package sockops

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/percpu"
	"github.com/ccload/ccload/internal/pin"
	"github.com/ccload/ccload/internal/scope"
	"github.com/ccload/ccload/internal/sharedmaps"
)

// Config configures the INT sockops program.
type Config struct {
	// Peers are the prefixes of the datacenter: only connections to
	// these get the INT option. None means nothing is tagged. IPv4
	// prefixes also cover IPv4 peers of dual-stack (AF_INET6) sockets,
	// which the kernel shows as v4-mapped addresses (::ffff:a.b.c.d).
	Peers []netip.Prefix
	// Cgroup is the cgroup v2 directory the program attaches to; "" is
	// the root of the cgroup2 mount, which covers every socket.
	Cgroup string
	// Every tags one data segment in Every; 0 and 1 tag all of them.
	Every uint32
	// TSOOnly tags only segments larger than one MSS (TSO/GSO bursts).
	TSOOnly bool
	// Slots is the number of hop slots in forward options, 1 to 4;
	// 0 means 3, the most that fits beside TCP timestamps.
	Slots int
}

// Status reports the state of INT on this host.
type Status struct {
	Enabled bool              `json:"enabled"`
	Cgroup  string            `json:"cgroup,omitempty"`
	Peers   []string          `json:"peers"`
	Every   uint32            `json:"tag_every,omitempty"`
	TSOOnly bool              `json:"tag_tso_only,omitempty"`
	Slots   int               `json:"slots,omitempty"`
	Stats   map[string]uint64 `json:"stats,omitempty"`
	// Object is the identity of the BPF object the attached program was
	// built from (pin.Object in hex), "" when its pins record none (made
	// by a ccload before records).
	Object string `json:"object,omitempty"`
	// UpgradeAvailable reports that the attached program is another
	// build's than this ccload's: Enable or Upgrade swaps this one in.
	UpgradeAvailable bool     `json:"upgrade_available,omitempty"`
	Notes            []string `json:"notes,omitempty"`
}

// statNames names enum int_stat of bpf/int_sockops.c, in order.
var statNames = [...]string{
	"scoped_connections", "tagged", "tag_no_space", "echoed", "echo_no_space",
	"forward_parsed", "echo_parsed", "malformed",
}

// Pins of the INT sockops program, in <pin root>/int/.
const (
	intDir        = "int"
	pinLink       = "link"
	pinConfig     = "config"
	pinPeers4     = "peers_v4"
	pinPeers6     = "peers_v6"
	pinStats      = "stats"
	pinObject     = "object" // the identity of the object the program was built from (pin.WriteObject)
	maxSlots      = 4
	defaultSlots  = 3
	storeHolderID = "int" // the sockops program's name among the store's holders
)

// INT enables, reconfigures, reports and disables INT tagging on a host.
// Like the loader, it keeps no state of its own: everything is in the
// kernel and in bpffs pins.
type INT struct {
	host  kernel.Host
	store *sharedmaps.Store
	salt  uint32 // see WithBuildSalt
}

// Option changes how New's INT loads the sockops program.
type Option func(*INT)

// WithBuildSalt makes the INT stand for another build of the sockops
// object: its identity is pin.ObjectOf(the embedded object, salt), so
// that a program attached by an INT with another salt counts as another
// build's, and Enable swaps this one in. Tests of upgrades use it; 0 is
// the build as shipped.
func WithBuildSalt(salt uint32) Option { return func(n *INT) { n.salt = salt } }

// New returns an INT acting on host.
func New(host kernel.Host, opts ...Option) *INT {
	n := &INT{host: host, store: sharedmaps.New(host)}
	for _, o := range opts {
		o(n)
	}
	return n
}

// object is the identity of the build of the sockops object this INT
// loads.
func (n *INT) object() pin.Object { return pin.ObjectOf(_IntSockopsBytes, n.salt) }

// Store returns the shared maps, among them the INT store that the
// sockops program and the CCs that read INT share.
func (n *INT) Store() *sharedmaps.Store { return n.store }

// NewStore returns the shared maps of host's pin root, the INT store among
// them: what loader.WithSharedMaps takes.
func NewStore(host kernel.Host) *sharedmaps.Store { return sharedmaps.New(host) }

func (n *INT) dir() string { return filepath.Join(n.host.PinRoot(), intDir) }

func (cfg *Config) normalize() error {
	if cfg.Slots == 0 {
		cfg.Slots = defaultSlots
	}
	if cfg.Slots < 1 || cfg.Slots > maxSlots {
		return kernel.NewError(kernel.KindBadParam, "use 1 to 4 slots; 3 is the most that fits beside TCP timestamps", nil,
			"%d hop slots requested", cfg.Slots)
	}
	if cfg.Every == 0 {
		cfg.Every = 1
	}
	peers, err := scope.Normalize(cfg.Peers)
	if err != nil {
		return err
	}
	cfg.Peers = peers
	if cfg.Cgroup == "" {
		root, err := kernel.Cgroup2Root()
		if err != nil {
			return kernel.NewError(kernel.KindKernelTooOld, "mount cgroup2 (mount -t cgroup2 none /sys/fs/cgroup) or pass --cgroup", err,
				"cannot find the cgroup v2 hierarchy")
		}
		cfg.Cgroup = root
	}
	return nil
}

// config is cfg as struct int_config of bpf/include/int.h.
func (cfg Config) config() intSockopsIntConfig {
	c := intSockopsIntConfig{Slots: uint32(cfg.Slots), TagEvery: cfg.Every}
	if len(cfg.Peers) > 0 {
		c.Enabled = 1
	}
	if cfg.TSOOnly {
		c.TsoOnly = 1
	}
	return c
}

// Enable attaches the INT sockops program to a cgroup and pins it.
// Enabling it again replaces the peers and the tagging policy in place;
// when the program attached is another build's (Status.UpgradeAvailable),
// it first swaps this ccload's build in, as Upgrade does.
func (n *INT) Enable(cfg Config) (*Status, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	if err := kernel.CheckCaps(); err != nil {
		return nil, err
	}
	notes, err := n.host.EnsureBPFFS()
	if err != nil {
		return nil, err
	}
	if len(cfg.Peers) == 0 {
		notes = append(notes, "no peer prefixes given: nothing will be tagged (pass --peers with the datacenter's prefixes)")
	}
	if kernel.Exists(filepath.Join(n.dir(), pinLink)) {
		up, err := n.upgrade(&cfg)
		if err != nil {
			return nil, err
		}
		notes = append(notes, up...)
		if err := n.reconfigure(cfg); err != nil {
			return nil, err
		}
		notes = append(notes, "INT was already enabled: peers and tagging updated")
	} else if err := n.attach(cfg); err != nil {
		return nil, err
	}
	st, err := n.Status()
	if err != nil {
		return nil, err
	}
	st.Notes = append(notes, st.Notes...)
	return st, nil
}

func (n *INT) attach(cfg Config) (err error) {
	spec, err := loadIntSockops()
	if err != nil {
		return kernel.NewError(kernel.KindBadObject, "rebuild ccload", err, "read the embedded INT sockops object")
	}
	store, err := n.store.Acquire(storeHolderID, spec.Maps[intSockopsMapIntStore])
	if err != nil {
		return err
	}
	defer store.Close()
	pin.KillPoint("int-store-acquired")
	defer func() {
		if err != nil {
			_ = n.store.Release(storeHolderID)
		}
	}()
	spec.Maps[intSockopsMapIntConfig].Contents = []ebpf.MapKV{{Key: uint32(0), Value: cfg.config()}}
	var objs intSockopsObjects
	if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{
		MapReplacements: map[string]*ebpf.Map{intSockopsMapIntStore: store},
	}); err != nil {
		return kernel.LoadError("the INT sockops program", err)
	}
	defer objs.Close()
	if err := scope.Write(objs.IntPeersV4, objs.IntPeersV6, cfg.Peers); err != nil {
		return err
	}

	stage, err := pin.NewStage(n.host.PinRoot(), intDir, n.dir())
	if err != nil {
		return err
	}
	defer stage.Abort()
	for name, m := range map[string]*ebpf.Map{pinConfig: objs.IntConfig, pinPeers4: objs.IntPeersV4,
		pinPeers6: objs.IntPeersV6, pinStats: objs.IntStats} {
		if err := m.Pin(stage.Path(name)); err != nil {
			return fmt.Errorf("pin INT map %s: %w", name, err)
		}
	}
	if err := pin.WriteObject(stage.Path(pinObject), n.object()); err != nil {
		return err
	}
	pin.KillPoint("int-maps-pinned")
	lnk, err := link.AttachCgroup(link.CgroupOptions{
		Path: cfg.Cgroup, Attach: ebpf.AttachCGroupSockOps, Program: objs.IntSockops,
	})
	if err != nil {
		return kernel.LoadError("the INT sockops program", fmt.Errorf("attach to cgroup %s: %w", cfg.Cgroup, err))
	}
	stage.OnAbort(func() { lnk.Close() })
	pin.KillPoint("int-attached")
	if err := lnk.Pin(stage.Path(pinLink)); err != nil {
		return fmt.Errorf("pin INT link: %w", err)
	}
	pin.KillPoint("int-link-pinned")
	if err := stage.Commit(); err != nil {
		return err
	}
	_ = lnk.Close() // the pin keeps it
	pin.KillPoint("int-enabled")
	return nil
}

// loadPinned opens the pinned map name of INT's directory.
func (n *INT) loadPinned(name string) (*ebpf.Map, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(n.dir(), name), nil)
	if err != nil {
		return nil, fmt.Errorf("open INT map %s: %w", name, err)
	}
	return m, nil
}

func (n *INT) reconfigure(cfg Config) error {
	conf, err := n.loadPinned(pinConfig)
	if err != nil {
		return err
	}
	defer conf.Close()
	v4, err := n.loadPinned(pinPeers4)
	if err != nil {
		return err
	}
	defer v4.Close()
	v6, err := n.loadPinned(pinPeers6)
	if err != nil {
		return err
	}
	defer v6.Close()
	if err := scope.Write(v4, v6, cfg.Peers); err != nil {
		return err
	}
	pin.KillPoint("int-peers-written")
	return conf.Update(uint32(0), cfg.config(), ebpf.UpdateExist)
}

// Disable detaches the INT sockops program. It reports whether INT was
// enabled. Connections that have it keep their socket storage until they
// close, but no segment gets an option any more.
func (n *INT) Disable() (bool, error) {
	if err := kernel.CheckCaps(); err != nil {
		return false, err
	}
	if !kernel.Exists(n.dir()) {
		return false, nil
	}
	if err := n.remove(); err != nil {
		return false, err
	}
	return true, nil
}

// remove detaches the INT sockops program, removes its pins and releases
// its hold on the INT store.
func (n *INT) remove() error {
	if err := pin.DetachLink(filepath.Join(n.dir(), pinLink)); err != nil {
		return kernel.NewError(kernel.KindDetach, "check it with `bpftool cgroup tree`, then remove "+n.dir()+" by hand",
			err, "detach the INT sockops program")
	}
	pin.KillPoint("int-detached")
	if err := os.RemoveAll(n.dir()); err != nil {
		return fmt.Errorf("remove INT pins: %w", err)
	}
	pin.KillPoint("int-unpinned")
	return n.store.Release(storeHolderID)
}

// Recover finishes what a ccload command that died left of INT, as the
// next command does before it acts (the caller holds pin.Lock): an INT
// directory that lacks one of its pins (a disable cut short) is detached
// and removed, and every holder of the shared maps (internal/sharedmaps)
// that holds nothing any more is dropped: the sockops program when INT is
// not enabled, any other (a CC, On-Ramp) when ccPinned(name) reports that
// <pin root>/<name> is gone. It returns what it did, in words, for a log.
//
// The record of the object (pinObject) is not among the pins a complete
// directory needs: pin sets made before records lack it, and count as
// another build's. An upgrade killed between its link update and its
// record update leaves the new program under the old record; that is
// whole too, and the next Enable swaps the same build in and fixes the
// record (see upgrade.go), so Recover leaves it.
func (n *INT) Recover(ccPinned func(name string) bool) (done []string, err error) {
	complete := allExist(n.dir(), []string{pinLink, pinConfig, pinPeers4, pinPeers6, pinStats})
	if kernel.Exists(n.dir()) && !complete {
		if err := n.remove(); err != nil {
			return nil, fmt.Errorf("remove the INT pins a command left incomplete: %w", err)
		}
		done = append(done, "removed the incomplete INT pins "+n.dir())
	}
	dropped, err := n.store.Sweep(func(holder string) bool {
		if holder == storeHolderID {
			return kernel.Exists(n.dir())
		}
		return ccPinned(holder)
	})
	for _, h := range dropped {
		done = append(done, fmt.Sprintf("dropped %s from the shared maps' holders: it has no pins", h))
	}
	return done, err
}

// allExist reports whether every one of names exists in dir.
func allExist(dir string, names []string) bool {
	for _, name := range names {
		if !kernel.Exists(filepath.Join(dir, name)) {
			return false
		}
	}
	return true
}

// Status reports whether INT is enabled, with what, and its counters.
func (n *INT) Status() (*Status, error) {
	st := &Status{Peers: []string{}}
	if !kernel.Exists(filepath.Join(n.dir(), pinLink)) {
		return st, nil
	}
	st.Enabled = true
	if lnk, err := link.LoadPinnedLink(filepath.Join(n.dir(), pinLink), nil); err == nil {
		if info, err := lnk.Info(); err == nil {
			if cg := info.Cgroup(); cg != nil {
				st.Cgroup = kernel.CgroupPath(uint64(cg.CgroupId))
			}
		}
		lnk.Close()
	}
	if conf, err := n.loadPinned(pinConfig); err == nil {
		var c intSockopsIntConfig
		if err := conf.Lookup(uint32(0), &c); err == nil {
			st.Slots, st.Every, st.TSOOnly = int(c.Slots), c.TagEvery, c.TsoOnly != 0
		}
		conf.Close()
	}
	v4, err4 := n.loadPinned(pinPeers4)
	v6, err6 := n.loadPinned(pinPeers6)
	if err := errors.Join(err4, err6); err != nil {
		st.Notes = append(st.Notes, fmt.Sprintf("cannot read the peer prefixes: %v", err))
	} else {
		peers, err := scope.Read(v4, v6)
		st.Peers = append(st.Peers, peers...)
		if err != nil {
			st.Notes = append(st.Notes, fmt.Sprintf("cannot read the peer prefixes: %v", err))
		}
	}
	for _, m := range []*ebpf.Map{v4, v6} {
		if m != nil {
			m.Close()
		}
	}
	if len(st.Peers) == 0 {
		st.Notes = append(st.Notes, "no peer prefixes: nothing is tagged")
	}
	if m, err := n.loadPinned(pinStats); err == nil {
		if sums, err := percpu.SumAll(m, len(statNames)); err == nil {
			st.Stats = map[string]uint64{}
			for i, v := range sums {
				st.Stats[statNames[i]] = v
			}
		}
		m.Close()
	}
	obj, known, err := pin.ReadObject(filepath.Join(n.dir(), pinObject))
	switch {
	case err != nil:
		st.Notes = append(st.Notes, fmt.Sprintf("cannot read the object the program was built from: %v", err))
		st.UpgradeAvailable = true
	case known:
		st.Object = obj.String()
		st.UpgradeAvailable = obj != n.object()
	default:
		st.UpgradeAvailable = true
	}
	if st.UpgradeAvailable {
		st.Notes = append(st.Notes, "the INT sockops program attached is another build's: `ccload int enable` swaps this one in, in place")
	}
	return st, nil
}

// Validate checks cfg's slots and peers as Enable would, without touching
// the kernel (the cgroup is found at Enable).
func (cfg Config) Validate() error {
	c := cfg
	c.Cgroup = "-" // checked when enabling
	return c.normalize()
}

// ParseTag reads a tagging policy as users write it: every, nth=N or
// tso-head.
func ParseTag(s string) (every uint32, tsoOnly bool, err error) {
	switch {
	case s == "every":
		return 1, false, nil
	case s == "tso-head":
		return 1, true, nil
	case strings.HasPrefix(s, "nth="):
		n, perr := strconv.ParseUint(strings.TrimPrefix(s, "nth="), 10, 32)
		if perr != nil || n < 1 {
			return 0, false, fmt.Errorf("tag %s: N must be a whole number >= 1", s)
		}
		return uint32(n), false, nil
	}
	return 0, false, fmt.Errorf("tag %q: want every, nth=N or tso-head", s)
}

// FormatTag writes a tagging policy as ParseTag reads it.
func FormatTag(every uint32, tsoOnly bool) string {
	switch {
	case tsoOnly:
		return "tso-head"
	case every > 1:
		return "nth=" + strconv.FormatUint(uint64(every), 10)
	}
	return "every"
}
