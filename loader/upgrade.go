package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
)

// varBuild is the constant CCLOAD_STATS_MAP declares in every CC object
// (bpf/include/ccload.h); TestObjectVariables checks that each has it.
const varBuild = thetaPowertcpVarCcloadBuild

// UpgradeResult reports what an upgrade did.
type UpgradeResult struct {
	Name         string              `json:"name"`
	Upgraded     bool                `json:"upgraded"` // false: the attached CC already runs this build
	Registration kernel.Registration `json:"registration"`
	From         Object              `json:"from"`
	To           Object              `json:"to"`
	// FromGeneration is the generation replaced, which live sockets keep
	// until they close; Generation the one new sockets get.
	FromGeneration uint32 `json:"from_generation"`
	Generation     uint32 `json:"generation"`
	// OldSockets is the number of sockets that used the replaced
	// generation at the swap.
	OldSockets int64 `json:"old_sockets"`
	// Gap is, for a legacy (pre-6.4) swap, the time from unregistering
	// the old generation to registering the new one: an upper bound of
	// the time the name was missing. 0 with links, which have no gap.
	Gap time.Duration `json:"gap_ns,omitempty"`
	// DefaultFallback is the CC that this netns's default pointed at
	// during a legacy swap, when the default named the CC.
	DefaultFallback string   `json:"default_fallback,omitempty"`
	Notes           []string `json:"notes,omitempty"`
}

// Upgrade swaps the build of name embedded in this ccload in for the one
// attached, when they differ (their Object hashes): the same as Attach
// with Replace and no parameters.
//
// With struct_ops links (Linux 6.4+) one BPF_LINK_UPDATE replaces the
// registration under the same name: the name never leaves
// tcp_available_congestion_control, new sockets get the new generation,
// and live sockets keep the old one until they close. The parameters
// (and the trace and path-history maps) are shared by both generations
// when the new build's are compatible; the counters are each
// generation's own, the old ones kept under gen/<n>/ while sockets use
// them. Every netns whose default names the CC is pointed at the new
// generation (see repointDefaults).
//
// Without links (legacy registration, Linux < 6.4) the old generation is
// unregistered and the new one registered: the name is missing for a
// moment (UpgradeResult.Gap). During it setsockopt(TCP_CONGESTION) with
// the name fails with ENOENT, and sockets that take this netns's default
// get cubic (or reno), where the default is moved for the swap so that it
// never names a missing CC; other network namespaces whose default names
// the CC keep the old generation for their new sockets until the swap
// ends.
func (l *Loader) Upgrade(name string) (*UpgradeResult, error) {
	cc, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	st, err := l.inspectAttached(cc)
	if err != nil {
		return nil, err
	}
	st.close()
	res, err := l.Attach(AttachRequest{Name: name, Replace: true})
	if err != nil {
		return nil, err
	}
	if res.Upgrade == nil {
		return nil, fmt.Errorf("upgrade %s: it was detached meanwhile, and attached afresh", name)
	}
	return res.Upgrade, nil
}

// NeedsUpgrade reports whether name is attached from another object than
// the build this Loader would load: one pinned by a ccload that recorded
// no identity counts as another.
func (l *Loader) NeedsUpgrade(name string) (bool, error) {
	cc, err := Lookup(name)
	if err != nil {
		return false, err
	}
	st, err := l.inspectAttached(cc)
	if err != nil {
		return false, err
	}
	defer st.close()
	_, hash := objectOf(cc, l.build)
	return st.meta.Hash != hash, nil
}

// upgrade swaps this Loader's build of cc in for the attached one (st).
func (l *Loader) upgrade(cc *CC, f *kernel.Features, st *attachState) (*UpgradeResult, error) {
	dir := l.PinDir(cc.Name)
	cur := st.meta
	want, hash := objectOf(cc, l.build)
	res := &UpgradeResult{
		Name: cc.Name, Registration: st.reg, From: cur.object(), To: want,
		FromGeneration: cur.Generation, Generation: cur.Generation,
	}
	if cur.Hash == hash {
		return res, nil // already this build: nothing to replace
	}
	if s, err := readStats(st.stats); err == nil {
		res.OldSockets = s.SocketsInUse()
	}
	var err error
	switch st.reg {
	case kernel.RegLink:
		err = l.upgradeLink(cc, f, cur, res)
	case kernel.RegLegacy:
		err = l.upgradeLegacy(cc, f, cur, res)
	default:
		err = fmt.Errorf("%s has no registration pin", cc.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("upgrade %s: %w", cc.Name, err)
	}
	res.Upgraded = true
	res.Generation = cur.Generation + 1
	if res.OldSockets > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d sockets keep generation %d until they close; its counters are kept in %s",
			res.OldSockets, cur.Generation, filepath.Join(dir, dirGen, strconv.Itoa(int(cur.Generation)))))
	}
	return res, nil
}

// recordOld gives a pin set made before records (or with one it cannot
// read) one for its generation,
// with the struct_ops map it runs, so that the upgrade moves it aside
// with the counters.
func recordOld(dir string, cur metaRecord, opsID ebpf.MapID) error {
	if cur.Magic == metaMagic {
		return nil
	}
	cur.OpsMapID = uint32(opsID)
	path := filepath.Join(dir, pinMeta)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the unreadable record %s: %w", path, err)
	}
	return pinMetaAt(path, cur)
}

// upgradeLink swaps the struct_ops link's map (BPF_LINK_UPDATE).
func (l *Loader) upgradeLink(cc *CC, f *kernel.Features, cur metaRecord, res *UpgradeResult) error {
	dir := l.PinDir(cc.Name)
	lnk, err := link.LoadPinnedLink(filepath.Join(dir, pinLink), nil)
	if err != nil {
		return fmt.Errorf("open the link: %w", err)
	}
	defer lnk.Close()
	lfd, err := linkFD(lnk)
	if err != nil {
		return err
	}
	oldID, err := structOpsLinkMapID(lfd)
	if err != nil {
		return err
	}
	old, err := ebpf.NewMapFromID(oldID)
	if err != nil {
		return fmt.Errorf("open the running struct_ops map %d: %w", oldID, err)
	}
	defer old.Close()
	ld, rec, err := l.loadNext(cc, f, kernel.RegLink, cur, oldID, res)
	if err != nil {
		return err
	}
	defer ld.Close()
	if err := l.stageNext(cc, ld, rec); err != nil {
		return err
	}
	pin.KillPoint("cc-upgrade-staged")
	if err := linkUpdateMap(lfd, ld.ops.FD(), old.FD()); err != nil {
		_ = os.RemoveAll(filepath.Join(dir, dirNext))
		return kernel.LoadError(cc.Name, fmt.Errorf("swap the new build in: %w", err))
	}
	pin.KillPoint("cc-upgrade-swapped")
	res.Notes = append(res.Notes, l.repointDefaults(cc.Name).notes(cc.Name)...)
	pin.KillPoint("cc-upgrade-defaults")
	return finishUpgrade(dir, rec)
}

// loadNext records the running generation cur (registered as the
// struct_ops map oldID) for its counters to outlive the swap, and loads
// the next generation, sharing the pinned maps it can.
func (l *Loader) loadNext(cc *CC, f *kernel.Features, reg kernel.Registration, cur metaRecord, oldID ebpf.MapID,
	res *UpgradeResult) (*loadedCC, metaRecord, error) {
	dir := l.PinDir(cc.Name)
	if err := recordOld(dir, cur, oldID); err != nil {
		return nil, metaRecord{}, err
	}
	ld, err := l.loadCC(cc, f, reg, loadOptions{reuseFrom: dir})
	if err != nil {
		return nil, metaRecord{}, err
	}
	res.Notes = append(res.Notes, ld.notes...)
	pin.KillPoint("cc-upgrade-loaded")
	rec := ld.record
	rec.Generation = cur.Generation + 1
	return ld, rec, nil
}

// upgradeLegacy unregisters the old generation and registers the new one.
func (l *Loader) upgradeLegacy(cc *CC, f *kernel.Features, cur metaRecord, res *UpgradeResult) error {
	dir := l.PinDir(cc.Name)
	oldOps, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinOps), nil)
	if err != nil {
		return fmt.Errorf("open the registered struct_ops map: %w", err)
	}
	defer oldOps.Close()
	info, err := oldOps.Info()
	if err != nil {
		return fmt.Errorf("read the registered struct_ops map: %w", err)
	}
	oldID, _ := info.ID()
	ld, rec, err := l.loadNext(cc, f, kernel.RegLegacy, cur, oldID, res)
	if err != nil {
		return err
	}
	defer ld.Close()
	def, _ := kernel.ReadSysctl(l.host.ProcSys, sysctlDefault)
	moved := def == cc.Name
	if moved {
		rec.Flags |= metaDefaultMoved
	}
	if err := l.stageNext(cc, ld, rec); err != nil {
		return err
	}
	pin.KillPoint("cc-upgrade-staged")
	undo := func() {
		if moved {
			_ = kernel.WriteSysctl(l.host.ProcSys, sysctlDefault, cc.Name)
		}
		_ = os.RemoveAll(filepath.Join(dir, dirNext))
	}
	if moved {
		if res.DefaultFallback, err = setFallbackDefault(l.host.ProcSys); err != nil {
			undo()
			return kernel.NewError(kernel.KindSysctl, "check that ccload runs with CAP_NET_ADMIN in this network namespace", err,
				"move the default congestion control off %s for the swap", cc.Name)
		}
		pin.KillPoint("cc-upgrade-default-fallback")
	}

	start := time.Now()
	if err := oldOps.Delete(uint32(0)); err != nil {
		undo()
		return fmt.Errorf("unregister the old generation: %w", err)
	}
	pin.KillPoint("cc-upgrade-unregistered")
	err = ld.ops.Put(uint32(0), ld.value)
	res.Gap = time.Since(start)
	if err != nil {
		// The old generation is gone and the new one refused: the name
		// is missing. The pins are stale now; attach registers it again
		// with the same parameters and gives the default back.
		return kernel.NewError(kernel.KindLoad, "run `ccload attach "+cc.Name+"` to register it again", err,
			"register the new generation of %s after unregistering the old one", cc.Name)
	}
	pin.KillPoint("cc-upgrade-registered")
	if moved {
		if err := kernel.WriteSysctl(l.host.ProcSys, sysctlDefault, cc.Name); err != nil {
			res.Notes = append(res.Notes, fmt.Sprintf("could not point the default back at %s (it stays %s): %v", cc.Name, res.DefaultFallback, err))
		}
		pin.KillPoint("cc-upgrade-default-restored")
	}
	res.Notes = append(res.Notes, l.repointDefaults(cc.Name).notes(cc.Name)...)
	return finishUpgrade(dir, rec)
}

// linkFD returns the descriptor of a link that cilium/ebpf opened.
func linkFD(lnk link.Link) (int, error) {
	f, ok := lnk.(interface{ FD() int })
	if !ok {
		return 0, fmt.Errorf("link %T has no descriptor", lnk)
	}
	return f.FD(), nil
}

// stageNext pins, as <dir>/next, what the generation rec brings that the
// running one lacks: its counters, the maps it does not share with the
// running generation, its struct_ops map in legacy mode, and its record.
func (l *Loader) stageNext(cc *CC, ld *loadedCC, rec metaRecord) error {
	dir := l.PinDir(cc.Name)
	stage, err := pin.NewStage(l.host.PinRoot(), cc.Name+"-next", filepath.Join(dir, dirNext))
	if err != nil {
		return err
	}
	defer stage.Abort()
	skip := append([]string{cc.opsMap}, sharedMaps()...)
	for name := range ld.reused {
		skip = append(skip, name)
	}
	if err := stage.PinMaps(ld.coll.Maps, skip...); err != nil {
		return fmt.Errorf("pin the new generation: %w", err)
	}
	if ld.reg == kernel.RegLegacy {
		if err := ld.ops.Pin(stage.Path(pinOps)); err != nil {
			return fmt.Errorf("pin the new struct_ops map: %w", err)
		}
	}
	if err := pinMetaAt(stage.Path(pinMeta), rec); err != nil {
		return err
	}
	return stage.Commit()
}

// finishUpgrade moves the pins of <dir>/next, the generation rec that now
// runs, into dir: the counters and record of the generation it replaced go
// to gen/<n>/, the maps it replaced are unpinned (their programs hold them
// while old sockets live). The record moves last, so that while next/
// holds it, whatever is in dir under a name next/ also has is the old
// generation's. Each step is idempotent: recoverCC runs it again after a
// crash.
func finishUpgrade(dir string, rec metaRecord) error {
	next := filepath.Join(dir, dirNext)
	old := filepath.Join(dir, dirGen, strconv.Itoa(int(rec.Generation)-1))
	entries, err := os.ReadDir(next)
	if err != nil {
		return fmt.Errorf("read %s: %w", next, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.Name() != pinMeta {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	if kernel.Exists(filepath.Join(next, pinMeta)) {
		names = append(names, pinMeta)
	}
	for _, name := range names {
		cur := filepath.Join(dir, name)
		if kernel.Exists(cur) {
			if name == mapStats || name == pinMeta {
				if err := os.MkdirAll(old, 0o700); err != nil {
					return fmt.Errorf("create %s: %w", old, err)
				}
				if err := os.Rename(cur, filepath.Join(old, name)); err != nil {
					return fmt.Errorf("move the old %s aside: %w", name, err)
				}
				pin.KillPoint("cc-upgrade-moved-old-" + name)
			} else if err := os.Remove(cur); err != nil {
				return fmt.Errorf("unpin the old %s: %w", name, err)
			}
		}
		if err := os.Rename(filepath.Join(next, name), cur); err != nil {
			return fmt.Errorf("move the new %s in: %w", name, err)
		}
	}
	pin.KillPoint("cc-upgrade-committed")
	if err := os.Remove(next); err != nil {
		return fmt.Errorf("remove %s: %w", next, err)
	}
	return nil
}

// recoverCC finishes or undoes an upgrade of cc that a dead process left
// in <dir>/next. With links, the link says which generation runs: the one
// in next/ (the swap happened: finish it) or not (remove next/). In legacy
// mode, the state of next/'s struct_ops map says whether it registered;
// when neither generation is registered (killed in the gap), it leaves the
// pins stale, with next/ as the journal that Attach reads to register the
// CC again with its parameters and default.
func (l *Loader) recoverCC(cc *CC) ([]string, error) {
	dir := l.PinDir(cc.Name)
	next := filepath.Join(dir, dirNext)
	if !kernel.Exists(next) {
		return nil, nil
	}
	rec, err := readMeta(filepath.Join(next, pinMeta))
	if errors.Is(err, errNoMeta) {
		// Everything moved in; only the directory was left.
		return nil, os.RemoveAll(next)
	}
	if err != nil {
		return nil, err
	}
	forward := func() ([]string, error) {
		notes := []string{fmt.Sprintf("finished the upgrade of %s to generation %d that a killed ccload left", cc.Name, rec.Generation)}
		if rec.Flags&metaDefaultMoved != 0 {
			if def, err := kernel.ReadSysctl(l.host.ProcSys, sysctlDefault); err == nil && isFallback(def) {
				_ = kernel.WriteSysctl(l.host.ProcSys, sysctlDefault, cc.Name)
			}
		}
		notes = append(notes, l.repointDefaults(cc.Name).notes(cc.Name)...)
		return notes, finishUpgrade(dir, rec)
	}
	back := func() ([]string, error) {
		if rec.Flags&metaDefaultMoved != 0 {
			if def, err := kernel.ReadSysctl(l.host.ProcSys, sysctlDefault); err == nil && isFallback(def) {
				_ = kernel.WriteSysctl(l.host.ProcSys, sysctlDefault, cc.Name)
			}
		}
		return []string{fmt.Sprintf("undid the upgrade of %s that a killed ccload began", cc.Name)}, os.RemoveAll(next)
	}

	if kernel.Exists(filepath.Join(dir, pinLink)) {
		lnk, err := link.LoadPinnedLink(filepath.Join(dir, pinLink), nil)
		if err != nil {
			return nil, fmt.Errorf("open the link of %s: %w", cc.Name, err)
		}
		defer lnk.Close()
		fd, err := linkFD(lnk)
		if err != nil {
			return nil, err
		}
		id, err := structOpsLinkMapID(fd)
		if err != nil {
			return nil, err
		}
		if uint32(id) == rec.OpsMapID {
			return forward()
		}
		return back()
	}
	// The new generation's struct_ops map: in next/, or in dir once
	// finishUpgrade moved it in.
	var ops *ebpf.Map
	for _, path := range []string{filepath.Join(next, pinOps), filepath.Join(dir, pinOps)} {
		m, err := ebpf.LoadPinnedMap(path, nil)
		if err != nil {
			continue
		}
		if info, err := m.Info(); err == nil {
			if id, ok := info.ID(); ok && uint32(id) == rec.OpsMapID {
				ops = m
				break
			}
		}
		m.Close()
	}
	if ops == nil {
		// Not a legacy upgrade's journal, and no link: nothing runs it.
		return back()
	}
	state, err := opsState(ops)
	ops.Close()
	if err != nil {
		return nil, err
	}
	if state == opsStateInUse {
		return forward()
	}
	if ok, err := isRegistered(l.host.ProcSys, cc.Name); err != nil || ok {
		return back()
	}
	return nil, nil // stale; Attach registers it again
}

// Recover finishes or undoes what ccload commands killed mid-way left of
// the CCs under the pin root: upgrades (see recoverCC), stale pins (those
// of an upgrade killed in the legacy gap are registered again, with their
// parameters; the rest are removed) and the pins of old generations that
// no socket uses any more. It returns what it did, in words. The caller
// holds the pin root's lock.
func (l *Loader) Recover() ([]string, error) {
	var done []string
	var errs []error
	for _, cc := range Builtin() {
		dir := l.PinDir(cc.Name)
		if !kernel.Exists(dir) {
			continue
		}
		notes, err := l.recoverCC(cc)
		done = append(done, notes...)
		if err != nil {
			errs = append(errs, fmt.Errorf("recover %s: %w", cc.Name, err))
			continue
		}
		st, err := l.inspect(cc)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		attached, stale := st.attached, st.stale
		st.close()
		switch {
		case stale && kernel.Exists(filepath.Join(dir, dirNext)):
			if _, err := l.Attach(AttachRequest{Name: cc.Name}); err != nil {
				errs = append(errs, fmt.Errorf("register %s again after its upgrade was killed: %w", cc.Name, err))
				continue
			}
			done = append(done, "registered "+cc.Name+" again, with its parameters: a killed upgrade had unregistered it")
		case stale:
			if _, err := l.Detach(cc.Name); err != nil {
				errs = append(errs, fmt.Errorf("remove the stale pins of %s: %w", cc.Name, err))
				continue
			}
			done = append(done, "the stale pins of "+cc.Name)
		case attached:
			done = append(done, l.pruneGenerations(cc)...)
		}
	}
	return done, errors.Join(errs...)
}
