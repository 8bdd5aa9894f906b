package loader

import (
	"bufio"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// INTConfig configures the INT sockops program (bpf/int_sockops.c).
type INTConfig struct {
	// Peers are the prefixes of the datacenter: only connections to
	// these get the INT option. None means nothing is tagged.
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

// INTStatus reports the state of INT on this host.
type INTStatus struct {
	Enabled bool              `json:"enabled"`
	Cgroup  string            `json:"cgroup,omitempty"`
	Peers   []string          `json:"peers"`
	Every   uint32            `json:"tag_every,omitempty"`
	TSOOnly bool              `json:"tag_tso_only,omitempty"`
	Slots   int               `json:"slots,omitempty"`
	Stats   map[string]uint64 `json:"stats,omitempty"`
	Notes   []string          `json:"notes,omitempty"`
}

// intStatNames names enum int_stat of bpf/int_sockops.c, in order.
var intStatNames = [...]string{
	"scoped_connections", "tagged", "tag_no_space", "echoed", "echo_no_space",
	"forward_parsed", "echo_parsed", "malformed",
}

// Pins of the INT sockops program, in <pin root>/int/.
const (
	intDir         = "int"
	pinIntConfig   = "config"
	pinIntPeers4   = "peers_v4"
	pinIntPeers6   = "peers_v6"
	pinIntStats    = "stats"
	sharedDir      = "shared"
	intStoreMap    = "int_store"
	intConfigSize  = 16
	maxINTSlots    = 4
	defaultINTSlot = 3
)

func (l *Loader) intDir() string { return filepath.Join(l.pinRoot(), intDir) }

// sharedMap returns the map pinned as shared/name, creating and pinning
// it from spec the first time. The INT sockops program and the CCs that
// read INT must use one int_store, so each loads it through here.
func (l *Loader) sharedMap(name string, spec *ebpf.MapSpec) (*ebpf.Map, error) {
	path := filepath.Join(l.pinRoot(), sharedDir, name)
	if m, err := ebpf.LoadPinnedMap(path, nil); err == nil {
		if m.Type() != spec.Type || m.ValueSize() != spec.ValueSize {
			m.Close()
			return nil, newError(KindLoad, "detach every INT user (ccload int disable; ccload detach powertcp) and try again",
				nil, "the pinned %s was made by another ccload version", path)
		}
		return m, nil
	}
	m, err := ebpf.NewMap(spec)
	if err != nil {
		return nil, loadError(name, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		m.Close()
		return nil, err
	}
	if err := m.Pin(path); err != nil {
		m.Close()
		return nil, fmt.Errorf("pin %s: %w", path, err)
	}
	return m, nil
}

// releaseShared unpins the shared INT store once nothing that uses it is
// attached, so a later user starts from a fresh one.
func (l *Loader) releaseShared() {
	if exists(l.intDir()) {
		return
	}
	for _, cc := range Builtin() {
		if cc.UsesINT && exists(l.PinDir(cc.Name)) {
			return
		}
	}
	os.RemoveAll(filepath.Join(l.pinRoot(), sharedDir))
}

// cgroup2Root finds where the cgroup v2 hierarchy is mounted.
func cgroup2Root() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ... mountpoint ... - fstype source options
		fields := strings.Fields(sc.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 {
				return fields[4], nil
			}
		}
	}
	return "", errors.New("no cgroup2 file system is mounted")
}

// cgroupPath finds the directory of a cgroup v2 id (its inode number),
// or describes the id when it cannot.
func cgroupPath(id uint64) string {
	root, err := cgroup2Root()
	if err != nil {
		return fmt.Sprintf("cgroup id %d", id)
	}
	found, seen := "", 0
	filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if seen++; seen > 100_000 {
			return filepath.SkipAll
		}
		var st unix.Stat_t
		if unix.Stat(path, &st) == nil && st.Ino == id {
			found = path
			return filepath.SkipAll
		}
		return nil
	})
	if found == "" {
		return fmt.Sprintf("cgroup id %d", id)
	}
	return found
}

func (cfg *INTConfig) normalize() error {
	if cfg.Slots == 0 {
		cfg.Slots = defaultINTSlot
	}
	if cfg.Slots < 1 || cfg.Slots > maxINTSlots {
		return newError(KindBadParam, "use 1 to 4 slots; 3 is the most that fits beside TCP timestamps", nil,
			"%d hop slots requested", cfg.Slots)
	}
	if cfg.Every == 0 {
		cfg.Every = 1
	}
	for i, p := range cfg.Peers {
		if !p.IsValid() {
			return newError(KindBadParam, "write prefixes like 198.18.0.0/15 or fd00::/8", nil, "invalid prefix")
		}
		cfg.Peers[i] = p.Masked()
	}
	if cfg.Cgroup == "" {
		root, err := cgroup2Root()
		if err != nil {
			return newError(KindKernelTooOld, "mount cgroup2 (mount -t cgroup2 none /sys/fs/cgroup) or pass --cgroup", err,
				"cannot find the cgroup v2 hierarchy")
		}
		cfg.Cgroup = root
	}
	return nil
}

func (cfg INTConfig) configBytes() []byte {
	b := make([]byte, intConfigSize)
	put := func(off int, v uint32) {
		b[off], b[off+1], b[off+2], b[off+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
	if len(cfg.Peers) > 0 {
		put(0, 1)
	}
	put(4, uint32(cfg.Slots))
	put(8, cfg.Every)
	if cfg.TSOOnly {
		put(12, 1)
	}
	return b
}

// lpmKey4 and lpmKey6 match struct lpm_v4 and lpm_v6 in bpf/int_sockops.c.
type lpmKey4 struct {
	PrefixLen uint32
	Addr      [4]byte
}

type lpmKey6 struct {
	PrefixLen uint32
	Addr      [16]byte
}

// writePeers replaces the contents of the two LPM tries with peers.
func writePeers(v4, v6 *ebpf.Map, peers []netip.Prefix) error {
	for _, m := range []*ebpf.Map{v4, v6} {
		var keys [][]byte
		iter := m.Iterate()
		var k []byte
		var v uint8
		for iter.Next(&k, &v) {
			keys = append(keys, append([]byte(nil), k...))
		}
		for _, k := range keys {
			_ = m.Delete(k)
		}
	}
	one := uint8(1)
	for _, p := range peers {
		var err error
		if p.Addr().Is4() {
			err = v4.Put(lpmKey4{PrefixLen: uint32(p.Bits()), Addr: p.Addr().As4()}, one)
		} else {
			err = v6.Put(lpmKey6{PrefixLen: uint32(p.Bits()), Addr: p.Addr().As16()}, one)
		}
		if err != nil {
			return fmt.Errorf("add peer prefix %s: %w", p, err)
		}
	}
	return nil
}

// EnableINT attaches the INT sockops program to a cgroup and pins it.
// Enabling it again replaces the peers and the tagging policy in place.
func (l *Loader) EnableINT(cfg INTConfig) (*INTStatus, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	if err := checkCaps(); err != nil {
		return nil, err
	}
	mounted, err := ensureBPFFS(l.host.BPFFS, l.host.isDefaultBPFFS())
	if err != nil {
		return nil, err
	}
	var notes []string
	if mounted {
		notes = append(notes, "mounted bpffs at "+l.host.BPFFS)
	}
	if len(cfg.Peers) == 0 {
		notes = append(notes, "no peer prefixes given: nothing will be tagged (pass --peers with the datacenter's prefixes)")
	}
	dir := l.intDir()
	if exists(filepath.Join(dir, pinLink)) {
		if err := l.reconfigureINT(cfg); err != nil {
			return nil, err
		}
		st, err := l.INTStatus()
		if err != nil {
			return nil, err
		}
		st.Notes = append(append(notes, "INT was already enabled: peers and tagging updated"), st.Notes...)
		return st, nil
	}
	if err := l.attachINT(cfg); err != nil {
		return nil, err
	}
	st, err := l.INTStatus()
	if err != nil {
		return nil, err
	}
	st.Notes = append(notes, st.Notes...)
	return st, nil
}

func (l *Loader) attachINT(cfg INTConfig) (err error) {
	spec, err := loadIntSockops()
	if err != nil {
		return fmt.Errorf("read embedded INT object: %w", err)
	}
	store, err := l.sharedMap(intStoreMap, spec.Maps[intStoreMap])
	if err != nil {
		return err
	}
	defer store.Close()
	spec.Maps["int_config"].Contents = []ebpf.MapKV{{Key: uint32(0), Value: cfg.configBytes()}}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
		MapReplacements: map[string]*ebpf.Map{intStoreMap: store},
	})
	if err != nil {
		l.releaseShared()
		return loadError("the INT sockops program", err)
	}
	defer coll.Close()
	if err := writePeers(coll.Maps["int_peers_v4"], coll.Maps["int_peers_v6"], cfg.Peers); err != nil {
		return err
	}

	stage := filepath.Join(l.pinRoot(), fmt.Sprintf("staging-int-%d", os.Getpid()))
	var lnk link.Link
	defer func() {
		if err == nil {
			return
		}
		os.RemoveAll(stage)
		if lnk != nil {
			lnk.Close()
		}
		l.releaseShared()
	}()
	if err := os.MkdirAll(stage, 0o700); err != nil {
		return err
	}
	for pin, name := range map[string]string{pinIntConfig: "int_config", pinIntPeers4: "int_peers_v4",
		pinIntPeers6: "int_peers_v6", pinIntStats: "int_stats"} {
		if err := coll.Maps[name].Pin(filepath.Join(stage, pin)); err != nil {
			return fmt.Errorf("pin %s: %w", name, err)
		}
	}
	lnk, err = link.AttachCgroup(link.CgroupOptions{
		Path: cfg.Cgroup, Attach: ebpf.AttachCGroupSockOps, Program: coll.Programs["int_sockops"],
	})
	if err != nil {
		return loadError("the INT sockops program", fmt.Errorf("attach to cgroup %s: %w", cfg.Cgroup, err))
	}
	if err := lnk.Pin(filepath.Join(stage, pinLink)); err != nil {
		return fmt.Errorf("pin INT link: %w", err)
	}
	if err := os.Rename(stage, l.intDir()); err != nil {
		return fmt.Errorf("move INT pins into place: %w", err)
	}
	stage = l.intDir()
	lnk.Close()
	lnk = nil
	return nil
}

func (l *Loader) reconfigureINT(cfg INTConfig) error {
	dir := l.intDir()
	conf, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinIntConfig), nil)
	if err != nil {
		return fmt.Errorf("open INT config: %w", err)
	}
	defer conf.Close()
	v4, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinIntPeers4), nil)
	if err != nil {
		return fmt.Errorf("open INT peers: %w", err)
	}
	defer v4.Close()
	v6, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinIntPeers6), nil)
	if err != nil {
		return fmt.Errorf("open INT peers: %w", err)
	}
	defer v6.Close()
	if err := writePeers(v4, v6, cfg.Peers); err != nil {
		return err
	}
	return conf.Update(uint32(0), cfg.configBytes(), ebpf.UpdateExist)
}

// DisableINT detaches the INT sockops program. It reports whether INT
// was enabled. Connections that have it keep their socket storage until
// they close, but no segment gets an option any more.
func (l *Loader) DisableINT() (bool, error) {
	if err := checkCaps(); err != nil {
		return false, err
	}
	dir := l.intDir()
	if !exists(dir) {
		return false, nil
	}
	if err := detachPinnedLink(filepath.Join(dir, pinLink)); err != nil {
		return false, fmt.Errorf("detach the INT sockops program: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return false, fmt.Errorf("remove INT pins: %w", err)
	}
	l.releaseShared()
	return true, nil
}

// INTStatus reports whether INT is enabled, with what, and its counters.
func (l *Loader) INTStatus() (*INTStatus, error) {
	dir := l.intDir()
	st := &INTStatus{Peers: []string{}}
	if !exists(filepath.Join(dir, pinLink)) {
		return st, nil
	}
	st.Enabled = true
	if lnk, err := link.LoadPinnedLink(filepath.Join(dir, pinLink), nil); err == nil {
		if info, err := lnk.Info(); err == nil {
			if cg := info.Cgroup(); cg != nil {
				st.Cgroup = cgroupPath(uint64(cg.CgroupId))
			}
		}
		lnk.Close()
	}
	if conf, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinIntConfig), nil); err == nil {
		b := make([]byte, intConfigSize)
		if err := conf.Lookup(uint32(0), &b); err == nil {
			get := func(off int) uint32 {
				return uint32(b[off]) | uint32(b[off+1])<<8 | uint32(b[off+2])<<16 | uint32(b[off+3])<<24
			}
			st.Slots, st.Every, st.TSOOnly = int(get(4)), get(8), get(12) != 0
		}
		conf.Close()
	}
	for _, pin := range []string{pinIntPeers4, pinIntPeers6} {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, pin), nil)
		if err != nil {
			continue
		}
		iter := m.Iterate()
		var k []byte
		var v uint8
		for iter.Next(&k, &v) {
			bits := int(uint32(k[0]) | uint32(k[1])<<8 | uint32(k[2])<<16 | uint32(k[3])<<24)
			if addr, ok := netip.AddrFromSlice(k[4:]); ok {
				st.Peers = append(st.Peers, netip.PrefixFrom(addr, bits).String())
			}
		}
		m.Close()
	}
	if len(st.Peers) == 0 {
		st.Notes = append(st.Notes, "no peer prefixes: nothing is tagged")
	}
	if m, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinIntStats), nil); err == nil {
		st.Stats = map[string]uint64{}
		for i, name := range intStatNames {
			var perCPU []uint64
			if err := m.Lookup(uint32(i), &perCPU); err == nil {
				var sum uint64
				for _, v := range perCPU {
					sum += v
				}
				st.Stats[name] = sum
			}
		}
		m.Close()
	}
	return st, nil
}
