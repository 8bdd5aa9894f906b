package metrics

// Per-program run counts and run times.
//
// The kernel counts a program's runs and run time only while
// kernel.bpf_stats_enabled is on (it costs two clock reads per run), so
// the per-program families are exported only then.
//
// Which programs are ccload's: the kernel keeps no owner for a program, so
// the Collector works it out from the pins. It walks the pin root once,
// noting the IDs of the pinned programs, of the programs of the pinned
// links, and of the pinned maps, each with the directory it is pinned in.
// Then it walks every program of the kernel and keeps those that are
// pinned or linked there, or that use one of those maps. That covers the
// tc and sockops programs (pinned or linked) and most of the CCs'
// struct_ops programs, which the struct_ops link does not name but which
// use their CC's maps. The callbacks that use no map (ssthresh,
// undo_cwnd) are recognised by name: a struct_ops program called
// <cc>_<callback>, where <cc> has a directory in the pin root. CC names
// are global to the kernel, and ccload's are registered by ccload, so no
// other owner's callbacks bear them; a CC's older generation, kept alive
// by its sockets after an upgrade, is counted under the same CC. (Each
// program has its own BTF object, so BTF does not group an object's
// programs; the struct_ops map's value names them by ID, but reading it
// needs the kernel's struct layout from BTF, which is not worth it here.)
// The walk costs a few syscalls per program on the host, and is made
// only while the stats are on.
//
// A program's owner label is the directory below the pin root of what
// matched: the CC's name, int, hop/<iface key>, onramp/<iface key>. A
// program that matches several is given the most specific: its own pin or
// link first, then a map of its own directory before a map that several
// users share (shared/ holds the INT store and On-Ramp's holds and room, clock/ the clock map).

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	ebpfpin "github.com/cilium/ebpf/pin"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/loader"
)

// sysctlStats is the sysctl that turns the kernel's program stats on.
const sysctlStats = "kernel/bpf_stats_enabled"

// pinPart returns the part a directory below the pin root belongs to,
// for the directories that hold no CC.
func pinPart(top string) (string, bool) {
	switch top {
	case "int", "shared":
		return partINT, true
	case "hop":
		return partHop, true
	case "onramp":
		return partOnRamp, true
	case "clock":
		return partClock, true
	}
	return "", false
}

// sharedDir reports whether a directory below the pin root holds maps
// that programs of several owners use.
func sharedDir(top string) bool { return top == "shared" || top == "clock" }

// Ranks of a match, best first.
const (
	rankPinned    = iota // the program is pinned, or its link is
	rankOwnMap           // it uses a map pinned beside it
	rankSharedMap        // it uses a map that several owners share
	rankByName           // a CC's struct_ops program that uses no map
)

// owner is where a program or map is pinned, as a match.
type owner struct {
	dir  string // below the pin root
	rank int
}

// better reports whether o is a better match than p.
func (o owner) better(p owner) bool {
	if o.rank != p.rank {
		return o.rank < p.rank
	}
	return o.dir < p.dir
}

// pinnedObjects are the IDs of what is pinned below a pin root.
type pinnedObjects struct {
	progs map[ebpf.ProgramID]owner
	maps  map[ebpf.MapID]owner
	ccs   []string // the directories of CCs
}

func (p *pinnedObjects) addProg(id ebpf.ProgramID, o owner) {
	if cur, ok := p.progs[id]; !ok || o.better(cur) {
		p.progs[id] = o
	}
}

// readPins walks root. Pins that vanish during the walk (a reconcile
// removing them) are skipped; other failures are returned together with
// what could be read.
func readPins(root string) (*pinnedObjects, error) {
	objs := &pinnedObjects{progs: map[ebpf.ProgramID]owner{}, maps: map[ebpf.MapID]owner{}}
	var errs []error
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), "staging-") {
				return fs.SkipDir // not committed: owned by nobody yet
			}
			if filepath.Dir(path) == root && partOf(d.Name()) == partCC {
				objs.ccs = append(objs.ccs, d.Name())
			}
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		dir := filepath.Dir(rel)
		if err := objs.add(path, dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	return objs, errors.Join(errs...)
}

// add notes the object pinned at path, in dir below the pin root.
func (p *pinnedObjects) add(path, dir string) error {
	// Read-write: the kernel refuses BPF_F_RDONLY on links (EINVAL).
	obj, err := ebpfpin.Load(path, nil)
	if err != nil {
		return err
	}
	defer obj.Close()
	switch o := obj.(type) {
	case *ebpf.Program:
		info, err := o.Info()
		if err != nil {
			return fmt.Errorf("read program %s: %w", path, err)
		}
		if id, ok := info.ID(); ok {
			p.addProg(id, owner{dir, rankPinned})
		}
	case *ebpf.Map:
		info, err := o.Info()
		if err != nil {
			return fmt.Errorf("read map %s: %w", path, err)
		}
		rank := rankOwnMap
		if sharedDir(topDir(dir)) {
			rank = rankSharedMap
		}
		if id, ok := info.ID(); ok {
			if cur, seen := p.maps[id]; !seen || (owner{dir, rank}).better(cur) {
				p.maps[id] = owner{dir, rank}
			}
		}
	case link.Link:
		info, err := o.Info()
		if err != nil {
			return fmt.Errorf("read link %s: %w", path, err)
		}
		if info.Program != 0 {
			p.addProg(info.Program, owner{dir, rankPinned})
		}
	}
	return nil
}

// topDir is the first element of dir, a path below the pin root.
func topDir(dir string) string {
	top, _, _ := strings.Cut(dir, string(filepath.Separator))
	return top
}

// partOf is the part of ccload that pins in dir belong to.
func partOf(dir string) string {
	top := topDir(dir)
	if p, ok := pinPart(top); ok {
		return p
	}
	if _, err := loader.Lookup(top); err == nil {
		return partCC
	}
	return "other"
}

// statsEnabled reads kernel.bpf_stats_enabled.
func (c *Collector) statsEnabled() (bool, error) {
	v, err := kernel.ReadSysctl(c.host.ProcSys, sysctlStats)
	if err != nil {
		return false, err
	}
	return v != "0", nil
}

// collectPrograms exports whether the program stats are on and, when they
// are, the run count and run time of each of ccload's programs.
func (c *Collector) collectPrograms(s *scrape) error {
	on, err := c.statsEnabled()
	if err != nil {
		return err
	}
	s.emit(c.fs.statsEnabled, boolValue(on))
	if !on {
		return nil
	}
	objs, err := readPins(c.host.PinRoot())
	if err != nil {
		s.errs = append(s.errs, fmt.Errorf("read the pins: %w", err))
	}
	if len(objs.progs) == 0 && len(objs.maps) == 0 {
		return nil
	}
	return kernel.WalkPrograms(func(id ebpf.ProgramID, prog *ebpf.Program, info *ebpf.ProgramInfo) bool {
		if o, ok := objs.ownerOf(id, info); ok {
			if err := c.emitProgramStats(s, prog, id, info.Name, o); err != nil && !errors.Is(err, os.ErrNotExist) {
				s.errs = append(s.errs, err)
			}
		}
		return true
	})
}

// ownerOf finds where program id, described by info, is pinned.
func (p *pinnedObjects) ownerOf(id ebpf.ProgramID, info *ebpf.ProgramInfo) (owner, bool) {
	best, ok := p.progs[id]
	maps, _ := info.MapIDs()
	for _, m := range maps {
		if o, found := p.maps[m]; found && (!ok || o.better(best)) {
			best, ok = o, true
		}
	}
	if ok || info.Type != ebpf.StructOps {
		return best, ok
	}
	// A CC's callback that uses no map: its name is the CC's, an
	// underscore and the callback's. The longest name wins
	// (theta_powertcp_init is theta_powertcp's, not powertcp's).
	for _, cc := range p.ccs {
		if strings.HasPrefix(info.Name, cc+"_") && (!ok || len(cc) > len(best.dir)) {
			best, ok = owner{cc, rankByName}, true
		}
	}
	return best, ok
}

// emitProgramStats exports the run count and run time of prog, found to
// be o's.
func (c *Collector) emitProgramStats(s *scrape, prog *ebpf.Program, id ebpf.ProgramID, name string, o owner) error {
	stats, err := prog.Stats()
	if err != nil {
		return fmt.Errorf("read the stats of program %d: %w", id, err)
	}
	labels := []string{name, strconv.FormatUint(uint64(id), 10), partOf(o.dir), o.dir}
	s.emit(c.fs.progRuns, float64(stats.RunCount), labels...)
	s.emit(c.fs.progRunSeconds, stats.Runtime.Seconds(), labels...)
	return nil
}
