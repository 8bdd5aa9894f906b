package onramp

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
	"github.com/ccload/ccload/internal/scope"
)

// The shared sockops program's pins, below <pin root>/onramp/.
const (
	sockopsDir   = "sockops"
	holdersDir   = "holders"
	pinLink      = "link"
	pinPeers4    = "peers_v4"
	pinPeers6    = "peers_v6"
	pinSockStats = "stats"
)

func (o *OnRamp) sockopsDir() string { return filepath.Join(o.root(), sockopsDir) }
func (o *OnRamp) holdersDir() string { return filepath.Join(o.root(), holdersDir) }

// acquireSockops makes sure the sockops program runs, with peers among its
// prefixes, and records holder (an interface key) with its peers, in
// place of those it held before. A sockops program of another build is
// upgraded in place (upgradeSockops). Dropping the hold is
// releaseSockops's work: a caller that fails afterwards calls it.
func (o *OnRamp) acquireSockops(holder string, peers []netip.Prefix, cgroup string) (notes []string, err error) {
	if err := o.writeHolder(holder, peers); err != nil {
		return nil, err
	}
	pin.KillPoint("onramp-holder-written")
	if o.sockopsComplete() {
		if notes, err = o.upgradeSockops(); err != nil {
			return notes, err
		}
		if err := o.writeScope(); err != nil {
			return notes, err
		}
		pin.KillPoint("onramp-scope-widened")
		return notes, nil
	}
	if kernel.Exists(o.sockopsDir()) {
		if err := o.removeSockops(); err != nil {
			return notes, err
		}
		notes = append(notes, "removed the incomplete pins of On-Ramp's sockops program "+o.sockopsDir())
	}
	return notes, o.attachSockops(cgroup)
}

// writeHolder records holder with the prefixes peers: each prefix is a
// subdirectory named by its text in hex (bpffs holds no regular files,
// and refuses dots in names). Prefixes the holder had and peers lacks go.
func (o *OnRamp) writeHolder(holder string, peers []netip.Prefix) error {
	hdir := filepath.Join(o.holdersDir(), holder)
	if err := os.MkdirAll(hdir, 0o700); err != nil {
		return fmt.Errorf("record the On-Ramp holder %s: %w", holder, err)
	}
	want := map[string]bool{}
	for _, p := range peers {
		want[hex.EncodeToString([]byte(p.String()))] = true
	}
	had, err := os.ReadDir(hdir)
	if err != nil {
		return fmt.Errorf("read the prefixes of %s: %w", holder, err)
	}
	for _, e := range had {
		if !want[e.Name()] {
			if err := os.RemoveAll(filepath.Join(hdir, e.Name())); err != nil {
				return fmt.Errorf("drop a prefix of %s: %w", holder, err)
			}
		}
	}
	for name := range want {
		if err := os.MkdirAll(filepath.Join(hdir, name), 0o700); err != nil {
			return fmt.Errorf("record the prefixes of %s: %w", holder, err)
		}
	}
	return nil
}

// sockopsComplete reports whether every pin of the sockops program is
// there (a set made before object records has none, and is complete).
func (o *OnRamp) sockopsComplete() bool {
	for _, name := range []string{pinLink, pinPeers4, pinPeers6, pinSockStats} {
		if !kernel.Exists(filepath.Join(o.sockopsDir(), name)) {
			return false
		}
	}
	return true
}

// attachSockops attaches the sockops program to cgroup with the prefixes
// of every holder, and pins it, with a kill point after each step: a kill
// before the commit leaves a stage that pin.CleanStale removes, which
// detaches the cgroup link pinned in it (or the link went with the
// process, before its pin).
func (o *OnRamp) attachSockops(cgroup string) error {
	if cgroup == "" {
		root, err := kernel.Cgroup2Root()
		if err != nil {
			return kernel.NewError(kernel.KindKernelTooOld, "mount cgroup2 (mount -t cgroup2 none /sys/fs/cgroup) or pass --cgroup", err,
				"cannot find the cgroup v2 hierarchy")
		}
		cgroup = root
	}
	spec, err := loadOnrampSockops()
	if err != nil {
		return kernel.NewError(kernel.KindBadObject, "rebuild ccload", err, "read the embedded On-Ramp sockops object")
	}
	shared, err := o.acquireShared(spec)
	if err != nil {
		return err
	}
	defer pin.CloseMaps(shared)
	var objs onrampSockopsObjects
	if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: shared}); err != nil {
		return kernel.LoadError("On-Ramp's sockops program", err)
	}
	defer objs.Close()
	peers, err := o.holderPeers()
	if err != nil {
		return err
	}
	if err := scope.Write(objs.OnrampPeersV4, objs.OnrampPeersV6, peers); err != nil {
		return err
	}
	stage, err := pin.NewStage(o.host.PinRoot(), stageLabelPrefix+sockopsDir, o.sockopsDir())
	if err != nil {
		return err
	}
	defer stage.Abort()
	pin.KillPoint("onramp-sockops-staged")
	if err := os.MkdirAll(o.root(), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", o.root(), err)
	}
	if err := stage.PinMaps(map[string]*ebpf.Map{pinPeers4: objs.OnrampPeersV4, pinPeers6: objs.OnrampPeersV6,
		pinSockStats: objs.OnrampSockopsStats}); err != nil {
		return fmt.Errorf("pin On-Ramp's sockops maps: %w", err)
	}
	pin.KillPoint("onramp-sockops-maps-pinned")
	if err := pin.WriteObject(stage.Path(pinObject), o.sockopsObject()); err != nil {
		return err
	}
	pin.KillPoint("onramp-sockops-object-recorded")
	lnk, err := link.AttachCgroup(link.CgroupOptions{Path: cgroup, Attach: ebpf.AttachCGroupSockOps, Program: objs.OnrampSockops})
	if err != nil {
		return kernel.LoadError("On-Ramp's sockops program", fmt.Errorf("attach to cgroup %s: %w", cgroup, err))
	}
	stage.OnAbort(func() { lnk.Close() })
	pin.KillPoint("onramp-sockops-attached")
	if err := lnk.Pin(stage.Path(pinLink)); err != nil {
		return fmt.Errorf("pin On-Ramp's sockops link: %w", err)
	}
	pin.KillPoint("onramp-sockops-pinned")
	if err := stage.Commit(); err != nil {
		return err
	}
	pin.KillPoint("onramp-sockops-committed")
	return lnk.Close()
}

// holderPeers is the union of the prefixes the holders asked for.
func (o *OnRamp) holderPeers() ([]netip.Prefix, error) {
	holders, err := os.ReadDir(o.holdersDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list On-Ramp's holders: %w", err)
	}
	seen := map[netip.Prefix]bool{}
	for _, h := range holders {
		entries, err := os.ReadDir(filepath.Join(o.holdersDir(), h.Name()))
		if err != nil {
			continue
		}
		for _, e := range entries {
			b, err := hex.DecodeString(e.Name())
			if err != nil {
				continue
			}
			if p, err := netip.ParsePrefix(string(b)); err == nil {
				seen[p] = true
			}
		}
	}
	peers := make([]netip.Prefix, 0, len(seen))
	for p := range seen {
		peers = append(peers, p)
	}
	sort.Slice(peers, func(i, j int) bool { return peers[i].String() < peers[j].String() })
	return peers, nil
}

// writeScope rewrites the pinned sockops program's prefixes to the union
// of the holders'.
func (o *OnRamp) writeScope() error {
	peers, err := o.holderPeers()
	if err != nil {
		return err
	}
	v4, err := ebpf.LoadPinnedMap(filepath.Join(o.sockopsDir(), pinPeers4), nil)
	if err != nil {
		return fmt.Errorf("open On-Ramp's IPv4 prefixes: %w", err)
	}
	defer v4.Close()
	v6, err := ebpf.LoadPinnedMap(filepath.Join(o.sockopsDir(), pinPeers6), nil)
	if err != nil {
		return fmt.Errorf("open On-Ramp's IPv6 prefixes: %w", err)
	}
	defer v6.Close()
	return scope.Write(v4, v6, peers)
}

// releaseSockops drops holder, and detaches the sockops program when no
// holder is left; otherwise the prefixes shrink to the others'.
func (o *OnRamp) releaseSockops(holder string) error {
	if err := os.RemoveAll(filepath.Join(o.holdersDir(), holder)); err != nil {
		return fmt.Errorf("drop the On-Ramp holder %s: %w", holder, err)
	}
	pin.KillPoint("onramp-holder-dropped")
	left, err := os.ReadDir(o.holdersDir())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("list On-Ramp's holders: %w", err)
	}
	if len(left) > 0 {
		if !o.sockopsComplete() {
			return nil
		}
		if err := o.writeScope(); err != nil {
			return err
		}
		pin.KillPoint("onramp-scope-narrowed")
		return nil
	}
	_ = os.Remove(o.holdersDir())
	return o.removeSockops()
}

// removeSockops detaches the sockops program and removes its pins,
// whatever is left of them.
func (o *OnRamp) removeSockops() error {
	if !kernel.Exists(o.sockopsDir()) {
		return nil
	}
	if err := pin.DetachLink(filepath.Join(o.sockopsDir(), pinLink)); err != nil {
		return kernel.NewError(kernel.KindDetach, "check it with `bpftool cgroup tree`, then remove "+o.sockopsDir()+" by hand",
			err, "detach On-Ramp's sockops program")
	}
	pin.KillPoint("onramp-sockops-detached")
	if err := os.RemoveAll(o.sockopsDir()); err != nil {
		return fmt.Errorf("remove On-Ramp's sockops pins: %w", err)
	}
	pin.KillPoint("onramp-sockops-unpinned")
	return nil
}

// sockopsStatus reads the shared program's prefixes and counters.
func (o *OnRamp) sockopsStatus() (peers []string, stats []uint64, err error) {
	v4, err4 := ebpf.LoadPinnedMap(filepath.Join(o.sockopsDir(), pinPeers4), nil)
	v6, err6 := ebpf.LoadPinnedMap(filepath.Join(o.sockopsDir(), pinPeers6), nil)
	defer func() {
		for _, m := range []*ebpf.Map{v4, v6} {
			if m != nil {
				m.Close()
			}
		}
	}()
	if err := errors.Join(err4, err6); err != nil {
		return nil, nil, fmt.Errorf("read On-Ramp's prefixes: %w", err)
	}
	if peers, err = scope.Read(v4, v6); err != nil {
		return nil, nil, err
	}
	m, err := ebpf.LoadPinnedMap(filepath.Join(o.sockopsDir(), pinSockStats), nil)
	if err != nil {
		return peers, nil, fmt.Errorf("read On-Ramp's sockops counters: %w", err)
	}
	defer m.Close()
	stats, err = sumStats(m)
	return peers, stats, err
}
