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
)

// GenerationStatus is one generation of an attached CC: the one new
// sockets get (Current), or one an upgrade replaced that live sockets
// still use.
type GenerationStatus struct {
	Generation   uint32    `json:"generation"`
	Current      bool      `json:"current"`
	Object       Object    `json:"object"`
	AttachedAt   time.Time `json:"attached_at,omitzero"`
	SocketsInUse int64     `json:"sockets_in_use"`
	Stats        Stats     `json:"stats,omitempty"`
}

// oldGeneration is what bpffs holds of a replaced generation.
type oldGeneration struct {
	n      uint32
	dir    string
	rec    metaRecord // zero when its record is missing
	stats  Stats      // nil when its counters are missing
	inUse  bool       // the kernel still has its struct_ops map, or (without a map ID) sockets use it
	unsure bool       // whether it is in use could not be told
}

// oldGenerations reads gen/<n>/ of cc, newest first.
func (l *Loader) oldGenerations(cc *CC) []oldGeneration {
	root := filepath.Join(l.PinDir(cc.Name), dirGen)
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var out []oldGeneration
	for _, e := range entries {
		n, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil || !e.IsDir() {
			continue
		}
		g := oldGeneration{n: uint32(n), dir: filepath.Join(root, e.Name())}
		if r, err := readMeta(filepath.Join(g.dir, pinMeta)); err == nil {
			g.rec = r
		}
		if m, err := ebpf.LoadPinnedMap(filepath.Join(g.dir, mapStats), nil); err == nil {
			g.stats, _ = readStats(m)
			m.Close()
		}
		switch alive, err := structOpsAlive(ebpf.MapID(g.rec.OpsMapID), cc.Name); {
		case err == nil:
			g.inUse = alive
		case g.stats != nil:
			// No map ID (or no right to open maps by ID): go by the
			// counters, which miss listeners and netns defaults.
			g.inUse = g.stats.SocketsInUse() > 0
		default:
			g.unsure = true
		}
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b oldGeneration) int { return int(b.n) - int(a.n) })
	return out
}

// generations lists the generations of the attached CC cc (st): the
// current one first, then the replaced ones that are still in use.
func (l *Loader) generations(cc *CC, st *attachState) []GenerationStatus {
	cur := GenerationStatus{
		Generation: st.meta.Generation, Current: true, Object: st.meta.object(), AttachedAt: st.meta.attachedAt(),
	}
	if st.stats != nil {
		if s, err := readStats(st.stats); err == nil {
			cur.Stats, cur.SocketsInUse = s, s.SocketsInUse()
		}
	}
	out := []GenerationStatus{cur}
	for _, g := range l.oldGenerations(cc) {
		if !g.inUse && !g.unsure {
			continue
		}
		gs := GenerationStatus{Generation: g.n, Object: g.rec.object(), AttachedAt: g.rec.attachedAt(), Stats: g.stats}
		if g.stats != nil {
			gs.SocketsInUse = g.stats.SocketsInUse()
		}
		out = append(out, gs)
	}
	return out
}

// pruneGenerations removes the pins of cc's replaced generations that
// nothing uses any more, and says which it removed.
func (l *Loader) pruneGenerations(cc *CC) []string {
	var notes []string
	var errs []error
	for _, g := range l.oldGenerations(cc) {
		if g.inUse || g.unsure {
			continue
		}
		if err := os.RemoveAll(g.dir); err != nil {
			errs = append(errs, err)
			continue
		}
		notes = append(notes, fmt.Sprintf("no socket uses %s generation %d any more: removed its counters", cc.Name, g.n))
	}
	if len(errs) > 0 {
		notes = append(notes, fmt.Sprintf("could not remove the pins of finished generations of %s: %v", cc.Name, errors.Join(errs...)))
	}
	// gen/ itself, once empty.
	_ = os.Remove(filepath.Join(l.PinDir(cc.Name), dirGen))
	return notes
}

// PruneGenerations removes, for every attached CC, the pins of the
// generations that upgrades replaced and that no socket uses any more. The
// daemon calls it on each reconcile, `ccload list` before it lists.
func (l *Loader) PruneGenerations() []string {
	var notes []string
	for _, cc := range Builtin() {
		if _, err := os.Stat(filepath.Join(l.PinDir(cc.Name), dirGen)); err == nil {
			notes = append(notes, l.pruneGenerations(cc)...)
		}
	}
	return notes
}
