package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
)

// Loader attaches, tunes, upgrades and detaches ccload's congestion
// controls. It keeps no state of its own: everything lives in the kernel
// and in bpffs pins, so separate ccload processes see the same picture.
type Loader struct {
	host   kernel.Host
	reg    kernel.Registration // forced registration mode; "" = best available
	shared SharedMaps          // the maps CCs share with INT and On-Ramp
	build  uint32              // ccload_build set in the objects (WithBuildVersion)
}

// SharedMaps lends the CCs the maps they share with programs that other
// commands attach: the INT store, which the INT sockops program fills and
// powertcp and hpcc read (CC.UsesINT), and On-Ramp's holds, which On-Ramp's
// tc programs fill and θ-PowerTCP reads (with onramp_holds=1). internal/sharedmaps owns those
// maps and implements this interface; the loader knows it only through it.
type SharedMaps interface {
	// Acquire returns the shared map, creating and pinning it from spec
	// when nothing holds it yet, and records holder (the CC's name) as one
	// of its holders.
	Acquire(holder string, spec *ebpf.MapSpec) (*ebpf.Map, error)
	// Release drops holder; the map is unpinned when no holder is left.
	Release(holder string) error
}

// Option changes how a Loader works.
type Option func(*Loader)

// WithRegistration forces a registration mode instead of the best the
// kernel has. Tests use it to run the legacy (6.1) path on newer kernels.
func WithRegistration(r kernel.Registration) Option {
	return func(l *Loader) { l.reg = r }
}

// WithSharedMaps gives the Loader the maps the CCs share with INT and
// On-Ramp. Without it powertcp and hpcc cannot be attached, and
// θ-PowerTCP gets holds of its own, which On-Ramp never fills.
func WithSharedMaps(s SharedMaps) Option {
	return func(l *Loader) { l.shared = s }
}

// WithBuildVersion loads the CCs with their ccload_build constant set to
// n (0, the default, is the build as shipped). A CC loaded with another n
// is another object (Object differs), so attaching with Replace swaps it
// in as a new generation; its sockets count "build_inits" when n != 0.
// It exists to test upgrades with a genuinely different object.
func WithBuildVersion(n uint32) Option {
	return func(l *Loader) { l.build = n }
}

// New returns a Loader acting on host.
func New(host kernel.Host, opts ...Option) *Loader {
	l := &Loader{host: host}
	for _, o := range opts {
		o(l)
	}
	return l
}

// With returns a copy of l with opts applied on top of its own.
func (l *Loader) With(opts ...Option) *Loader {
	c := *l
	for _, o := range opts {
		o(&c)
	}
	return &c
}

// Names of the pins in a CC's directory that are not its maps. The maps
// are pinned under their names in the object (mapParams, mapStats, ...);
// meta.go names the generation records.
const (
	pinLink = "link" // struct_ops link (RegLink)
	pinOps  = "ops"  // struct_ops map (RegLegacy)
)

// Host returns where the Loader acts: its pin root and network namespace.
func (l *Loader) Host() kernel.Host { return l.host }

// PinDir returns the bpffs directory that holds name's pins.
func (l *Loader) PinDir(name string) string { return filepath.Join(l.host.PinRoot(), name) }

// AttachRequest says what to attach and how.
type AttachRequest struct {
	Name       string            // built-in CC name
	Params     map[string]string // parameter overrides, as typed by the user
	SetDefault bool              // also make it the netns default CC
	// Replace upgrades an attached CC that was built from another object
	// than the one embedded in this ccload: the new build is swapped in
	// under the same name (see Upgrade).
	Replace bool
}

// AttachResult reports what Attach did.
type AttachResult struct {
	Name            string              `json:"name"`
	AlreadyAttached bool                `json:"already_attached"`
	Registration    kernel.Registration `json:"registration"`
	CongControl     string              `json:"cong_control_prototype,omitempty"`
	PinDir          string              `json:"pin_dir"`
	Params          map[string]string   `json:"params"`
	Default         bool                `json:"default"`
	Generation      uint32              `json:"generation"`
	Object          Object              `json:"object"`
	// Upgrade says what Replace did; nil without Replace or when the CC
	// was not attached.
	Upgrade *UpgradeResult `json:"upgrade,omitempty"`
	Notes   []string       `json:"notes,omitempty"`
}

// Attach registers a built-in CC with the kernel and pins it, so that it
// stays registered after ccload exits. Attaching an attached CC changes
// only the parameters given, unless Replace asks to swap in this
// ccload's build. On failure nothing is left registered or pinned.
func (l *Loader) Attach(req AttachRequest) (*AttachResult, error) {
	cc, err := Lookup(req.Name)
	if err != nil {
		return nil, err
	}
	given, err := parseGiven(cc.Params, req.Params)
	if err != nil {
		return nil, err
	}
	if err := kernel.CheckCaps(); err != nil {
		return nil, err
	}
	f, err := kernel.Probe(l.host.BTFPath)
	if err != nil {
		return nil, err
	}
	if err := f.RequireCC(); err != nil {
		return nil, err
	}
	res := &AttachResult{Name: cc.Name, PinDir: l.PinDir(cc.Name)}

	notes, err := l.host.EnsureBPFFS()
	if err != nil {
		return nil, err
	}
	res.Notes = append(res.Notes, notes...)
	notes, err = l.recoverCC(cc)
	if err != nil {
		return nil, err
	}
	res.Notes = append(res.Notes, notes...)

	st, err := l.inspect(cc)
	if err != nil {
		return nil, err
	}
	defer st.close()
	var carried map[string]uint64 // parameters of stale pins, kept
	var restoreDefault bool       // stale pins of a legacy upgrade cut short in its gap
	gen := uint32(1)
	switch {
	case st.attached:
		if req.Replace {
			up, err := l.upgrade(cc, f, st)
			if err != nil {
				return nil, err
			}
			res.Upgrade = up
			res.Notes = append(res.Notes, up.Notes...)
			// The upgrade may have pinned a new params map.
			st.close()
			if st, err = l.inspect(cc); err != nil {
				return nil, err
			}
			if !st.attached {
				return nil, fmt.Errorf("attach %s: not attached after its upgrade", cc.Name)
			}
		}
		vals, notes, err := l.updateParams(cc, st.params, given)
		if err != nil {
			return nil, err
		}
		res.AlreadyAttached = true
		res.Registration = st.reg
		res.Params = formatParams(cc, vals)
		res.Generation, res.Object = st.meta.Generation, st.meta.object()
		res.Notes = append(res.Notes, notes...)
		res.Notes = append(res.Notes, l.pruneGenerations(cc)...)
		return res, l.maybeSetDefault(req, res)
	case st.stale:
		if st.params != nil {
			if cur, _, err := readParams(cc, st.params); err == nil {
				carried = cur
			}
		}
		if j, err := readMeta(filepath.Join(res.PinDir, dirNext, pinMeta)); err == nil {
			restoreDefault = j.Flags&metaDefaultMoved != 0
			gen = j.Generation
		}
		if err := os.RemoveAll(res.PinDir); err != nil {
			return nil, fmt.Errorf("remove stale pins %s: %w", res.PinDir, err)
		}
		res.Notes = append(res.Notes, "removed stale pins of an earlier attach that is no longer registered")
	}
	if st.registered {
		return nil, kernel.NewError(kernel.KindNameTaken,
			"find its owner: another ccload pin root (the daemon's /sys/fs/bpf/ccload, a bench's ccload-bench-PID, a test's), `bpftool struct_ops list`, or lsmod for a module; detach or unregister it there, then attach again",
			nil, "a congestion control named %q is already registered, and not from this pin root (%s)", cc.Name, l.host.PinRoot())
	}

	vals, notes, err := resolveParams(cc.Params, given, carried, l.autoParam)
	if err != nil {
		return nil, err
	}
	res.Notes = append(res.Notes, notes...)

	reg := f.Registration
	if l.reg != "" {
		reg = l.reg
	}
	rec, err := l.register(cc, f, reg, vals, gen)
	if err != nil {
		return nil, err
	}
	res.Registration = reg
	res.CongControl = fmt.Sprintf("%d-argument cong_control", f.CongControlArgs)
	res.Params = formatParams(cc, vals)
	res.Generation, res.Object = rec.Generation, rec.object()
	if restoreDefault {
		if def, err := kernel.ReadSysctl(l.host.ProcSys, sysctlDefault); err == nil && isFallback(def) {
			if err := kernel.WriteSysctl(l.host.ProcSys, sysctlDefault, cc.Name); err == nil {
				res.Default = true
				res.Notes = append(res.Notes, "the default congestion control, moved to "+def+" by an upgrade that was cut short, names "+cc.Name+" again")
			}
		}
	}

	if err := l.maybeSetDefault(req, res); err != nil {
		// Roll back: an attach that did not do all it was asked leaves
		// nothing behind.
		if _, derr := l.Detach(cc.Name); derr != nil {
			err = errors.Join(err, fmt.Errorf("roll back attach: %w", derr))
		}
		return nil, err
	}
	return res, nil
}

func (l *Loader) maybeSetDefault(req AttachRequest, res *AttachResult) error {
	if !req.SetDefault {
		return nil
	}
	if err := kernel.WriteSysctl(l.host.ProcSys, sysctlDefault, req.Name); err != nil {
		return kernel.NewError(kernel.KindSysctl, "check that ccload runs with CAP_NET_ADMIN in this network namespace", err,
			"make %s the default congestion control", req.Name)
	}
	pin.KillPoint("cc-default-set")
	res.Default = true
	return nil
}

// loadOptions say how loadCC makes a CC's maps.
type loadOptions struct {
	// vals are the parameters to create the params map with; nil means
	// the defaults, when the params map is not taken over.
	vals map[string]uint64
	// reuseFrom is a CC's pin directory: the new collection takes over
	// each map pinned there that it is compatible with (params, the trace
	// maps, power_hist), but never stats, whose counters are each
	// generation's own.
	reuseFrom string
}

// loadedCC is a CC's collection, loaded and verified and not yet
// registered.
type loadedCC struct {
	coll *ebpf.Collection
	// ops is the struct_ops map. With links, cilium/ebpf created and
	// filled it (BPF_F_LINK: filling does not register). In legacy mode
	// it is created empty, outside coll, and the update with value
	// registers the CC.
	ops    *ebpf.Map
	value  []byte
	reg    kernel.Registration
	reused map[string]bool // maps taken over from loadOptions.reuseFrom
	record metaRecord      // the generation's record, but its number
	notes  []string
}

// Close releases this process's handles on the loaded objects; what is
// pinned or registered stays.
func (c *loadedCC) Close() {
	if c.reg == kernel.RegLegacy && c.ops != nil {
		c.ops.Close()
	}
	c.coll.Close()
}

// loadCC loads and verifies cc for registration mode reg. It registers
// nothing. The INT store of a CC that reads INT is acquired; the caller
// releases it if it gives up.
func (l *Loader) loadCC(cc *CC, f *kernel.Features, reg kernel.Registration, o loadOptions) (_ *loadedCC, err error) {
	spec, err := cc.load()
	if err != nil {
		return nil, kernel.NewError(kernel.KindBadObject, "rebuild ccload", err, "read embedded object %s", cc.Name)
	}
	if err := selectCongControl(spec, f.CongControlArgs); err != nil {
		return nil, kernel.NewError(kernel.KindBadObject, "rebuild ccload", err, "select programs for %s", cc.Name)
	}
	if v, ok := spec.Variables[varBuild]; ok {
		if err := v.Set(l.build); err != nil {
			return nil, kernel.NewError(kernel.KindBadObject, "rebuild ccload", err, "set %s in %s", varBuild, cc.Name)
		}
	} else if l.build != 0 {
		return nil, kernel.NewError(kernel.KindBadObject, "rebuild ccload", nil, "object %s has no %s constant", cc.Name, varBuild)
	}
	opsSpec, ok := spec.Maps[cc.opsMap]
	if !ok {
		return nil, kernel.NewError(kernel.KindBadObject, "rebuild ccload", nil, "object %s has no struct_ops map %s", cc.Name, cc.opsMap)
	}
	if reg == kernel.RegLegacy {
		// Made apart (below), so that loading registers nothing.
		opsSpec = opsSpec.Copy()
		opsSpec.Flags &^= unix.BPF_F_LINK
		delete(spec.Maps, cc.opsMap)
	}

	ld := &loadedCC{reg: reg, reused: map[string]bool{}}
	opts := ebpf.CollectionOptions{
		Programs:        ebpf.ProgramOptions{KernelTypes: f.Spec},
		Cache:           f.Cache,
		MapReplacements: map[string]*ebpf.Map{},
	}
	if o.reuseFrom != "" {
		for name, ms := range spec.Maps {
			if strings.HasPrefix(name, ".") || name == cc.opsMap || name == mapStats || slices.Contains(sharedMaps(), name) {
				continue
			}
			m, err := ebpf.LoadPinnedMap(filepath.Join(o.reuseFrom, name), nil)
			if err != nil {
				continue
			}
			defer m.Close()
			if ms.Compatible(m) != nil {
				ld.notes = append(ld.notes, fmt.Sprintf("the new build's %s map differs from the old one's: the new generation gets its own", name))
				continue
			}
			opts.MapReplacements[name] = m
			ld.reused[name] = true
		}
	}
	if !ld.reused[mapParams] {
		vals := o.vals
		if vals == nil {
			var carried map[string]uint64
			if o.reuseFrom != "" {
				carried, err = carriedParams(cc, filepath.Join(o.reuseFrom, mapParams), spec.Maps[mapParams].Value)
				if err != nil {
					ld.notes = append(ld.notes, fmt.Sprintf("the new build's parameters differ in layout, and the old ones could not be read (%v): it starts from the defaults (set them again with ccload set)", err))
				} else {
					ld.notes = append(ld.notes, "the new build's parameters differ in layout: it kept the values of the old build's, by name, and starts the others from their defaults")
				}
			}
			var notes []string
			if vals, notes, err = resolveParams(cc.Params, nil, carried, l.autoParam); err != nil {
				return nil, err
			}
			ld.notes = append(ld.notes, notes...)
		}
		// Parameters go in at map creation, so no socket ever sees zeros.
		layout, err := newParamLayout(spec.Maps[mapParams].Value, cc.Params, cc.derived)
		if err != nil {
			return nil, err
		}
		buf, err := layout.encode(vals)
		if err != nil {
			return nil, err
		}
		spec.Maps[mapParams].Contents = []ebpf.MapKV{{Key: uint32(0), Value: buf}}
	}
	if cc.UsesINT && l.shared == nil {
		return nil, kernel.NewError(kernel.KindBadObject, "this is a bug in ccload: report it", nil,
			"%s reads INT, but this loader was made without the INT store (loader.WithSharedMaps)", cc.Name)
	}
	for _, name := range sharedMaps() {
		ms, ok := spec.Maps[name]
		if !ok || l.shared == nil {
			continue
		}
		m, err := l.shared.Acquire(cc.Name, ms)
		if err != nil {
			return nil, err
		}
		defer m.Close()
		opts.MapReplacements[name] = m
	}
	if ld.coll, err = ebpf.NewCollectionWithOptions(spec, opts); err != nil {
		return nil, kernel.LoadError(cc.Name, err)
	}
	defer func() {
		if err != nil {
			ld.Close()
		}
	}()
	if reg == kernel.RegLegacy {
		bare := opsSpec.Copy()
		bare.Contents = nil
		if ld.ops, err = ebpf.NewMapWithOptions(bare, ebpf.MapOptions{}); err != nil {
			return nil, kernel.LoadError(cc.Name, fmt.Errorf("create struct_ops map: %w", err))
		}
		if ld.value, err = legacyOpsValue(opsSpec, ld.coll.Programs, spec.Programs, f.Spec); err != nil {
			return nil, kernel.NewError(kernel.KindBadObject, "rebuild ccload", err, "struct_ops value of %s", cc.Name)
		}
	} else {
		ld.ops = ld.coll.Maps[cc.opsMap]
	}
	info, err := ld.ops.Info()
	if err != nil {
		return nil, fmt.Errorf("read %s struct_ops map: %w", cc.Name, err)
	}
	id, _ := info.ID()
	_, hash := objectOf(cc, l.build)
	ld.record = metaRecord{Build: l.build, OpsMapID: uint32(id), Hash: hash, AttachedNs: time.Now().UnixNano()}
	return ld, nil
}

// register loads cc, registers it in mode reg as generation gen and pins
// it. It is all-or-nothing: on error, nothing is registered and nothing is
// pinned. A process killed at any step leaves a stage, which the next
// command removes (pin.CleanStale), or committed pins of a CC that is not
// registered, which it treats as stale.
func (l *Loader) register(cc *CC, f *kernel.Features, reg kernel.Registration, vals map[string]uint64, gen uint32) (rec metaRecord, err error) {
	defer func() {
		if err == nil {
			return
		}
		// Last, once our handles are closed: wait until the kernel has
		// let go of the name, so that a failed attach can be retried,
		// and give the shared maps back.
		_ = waitUnregistered(l.host.ProcSys, cc.Name, time.Second)
		if l.shared != nil {
			_ = l.shared.Release(cc.Name)
		}
	}()
	ld, err := l.loadCC(cc, f, reg, loadOptions{vals: vals})
	if err != nil {
		return rec, err
	}
	defer ld.Close()
	pin.KillPoint("cc-loaded")
	rec = ld.record
	rec.Generation = gen

	dir := l.PinDir(cc.Name)
	stage, err := pin.NewStage(l.host.PinRoot(), cc.Name, dir)
	if err != nil {
		return rec, err
	}
	defer stage.Abort()
	// Every map but the struct_ops one and the shared ones: params,
	// stats, and the trace ring buffer and switch where the CC has them.
	if err := stage.PinMaps(ld.coll.Maps, append([]string{cc.opsMap}, sharedMaps()...)...); err != nil {
		return rec, fmt.Errorf("pin %s: %w", cc.Name, err)
	}
	if err := pinMetaAt(stage.Path(pinMeta), rec); err != nil {
		return rec, fmt.Errorf("pin %s: %w", cc.Name, err)
	}
	pin.KillPoint("cc-staged-maps")
	if reg == kernel.RegLegacy {
		// Pinned and committed unregistered, then registered: a crash
		// between the two leaves stale pins, never a registration that
		// nothing pins.
		if err := ld.ops.Pin(stage.Path(pinOps)); err != nil {
			return rec, fmt.Errorf("pin %s struct_ops map: %w", cc.Name, err)
		}
		if err := stage.Commit(); err != nil {
			return rec, err
		}
		pin.KillPoint("cc-committed")
		if err := ld.ops.Put(uint32(0), ld.value); err != nil {
			_ = os.RemoveAll(dir)
			return rec, kernel.LoadError(cc.Name, fmt.Errorf("register: %w", err))
		}
		pin.KillPoint("cc-registered")
		return rec, nil
	}
	lnk, err := link.AttachStructOps(link.StructOpsOptions{Map: ld.ops})
	if err != nil {
		return rec, kernel.LoadError(cc.Name, fmt.Errorf("attach struct_ops link: %w", err))
	}
	stage.OnAbort(func() { lnk.Close() })
	pin.KillPoint("cc-link-attached")
	if err := lnk.Pin(stage.Path(pinLink)); err != nil {
		return rec, fmt.Errorf("pin %s link: %w", cc.Name, err)
	}
	pin.KillPoint("cc-link-pinned")
	if err := stage.Commit(); err != nil {
		return rec, err
	}
	pin.KillPoint("cc-committed")
	_ = lnk.Close() // the pin keeps it; closing our fd cannot undo that
	return rec, nil
}

// selectCongControl keeps the cong_control program that matches the
// kernel's prototype. A program named X_legacy implements the pre-6.10
// two-argument form of program X; exactly one of the two is loaded.
func selectCongControl(spec *ebpf.CollectionSpec, args int) error {
	for name, p := range spec.Programs {
		base, ok := strings.CutSuffix(name, "_legacy")
		if !ok {
			continue
		}
		modern, ok := spec.Programs[base]
		if !ok {
			return fmt.Errorf("program %s has no counterpart %s", name, base)
		}
		if args == 2 {
			p.AttachTo = modern.AttachTo
			delete(spec.Programs, base)
		} else {
			delete(spec.Programs, name)
		}
	}
	return nil
}

// attachState is what bpffs and the kernel say about one CC, read once
// per call.
type attachState struct {
	attached   bool // pinned and registered
	stale      bool // pinned but no longer registered
	registered bool // the kernel has a CC of this name, ccload's or not
	reg        kernel.Registration
	params     *ebpf.Map
	stats      *ebpf.Map
	meta       metaRecord // generation 1 of an unknown object without a record
}

func (s *attachState) close() {
	if s.params != nil {
		s.params.Close()
	}
	if s.stats != nil {
		s.stats.Close()
	}
}

// inspect reads the pins of cc and whether the kernel has it registered.
// A missing directory is "not attached".
func (l *Loader) inspect(cc *CC) (*attachState, error) {
	registered, err := isRegistered(l.host.ProcSys, cc.Name)
	if err != nil {
		return nil, err
	}
	st := &attachState{registered: registered}
	dir := l.PinDir(cc.Name)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return st, nil
	} else if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", dir, err)
	}
	switch {
	case kernel.Exists(filepath.Join(dir, pinLink)):
		st.reg = kernel.RegLink
	case kernel.Exists(filepath.Join(dir, pinOps)):
		st.reg = kernel.RegLegacy
	}
	if st.params, err = ebpf.LoadPinnedMap(filepath.Join(dir, mapParams), nil); err != nil {
		st.params = nil
	}
	if st.stats, err = ebpf.LoadPinnedMap(filepath.Join(dir, mapStats), nil); err != nil {
		st.stats = nil
	}
	if st.meta, err = currentMeta(dir); err != nil {
		st.meta = metaRecord{Generation: 1} // unreadable: unknown, as without one
	}
	if st.reg != "" && st.params != nil && st.stats != nil && registered {
		st.attached = true
	} else {
		st.stale = true
	}
	return st, nil
}

// inspectAttached is inspect for the calls that need cc attached: it
// returns a KindNotAttached error when it is not.
func (l *Loader) inspectAttached(cc *CC) (*attachState, error) {
	st, err := l.inspect(cc)
	if err != nil {
		return nil, err
	}
	if !st.attached {
		st.close()
		return nil, kernel.NewError(kernel.KindNotAttached, "attach it first: ccload attach "+cc.Name, nil,
			"%s is not attached", cc.Name)
	}
	return st, nil
}

// readParams decodes the pinned params map of cc.
func readParams(cc *CC, m *ebpf.Map) (map[string]uint64, *paramLayout, error) {
	spec, err := cc.load()
	if err != nil {
		return nil, nil, err
	}
	layout, err := newParamLayout(spec.Maps[mapParams].Value, cc.Params, cc.derived)
	if err != nil {
		return nil, nil, err
	}
	if m.ValueSize() != layout.size {
		return nil, nil, kernel.NewError(kernel.KindVersionMismatch,
			fmt.Sprintf("upgrade it in place to this ccload's build, which keeps its parameters: ccload attach %s --replace", cc.Name), nil,
			"%s was attached by a different ccload version (params are %d bytes, expected %d)",
			cc.Name, m.ValueSize(), layout.size)
	}
	buf := make([]byte, layout.size)
	if err := m.Lookup(uint32(0), &buf); err != nil {
		return nil, nil, fmt.Errorf("read %s params: %w", cc.Name, err)
	}
	vals := map[string]uint64{}
	for _, p := range cc.Params {
		vals[p.Name] = layout.get(buf, p.Name)
	}
	return vals, layout, nil
}

// carriedParams reads the parameters of a params map pinned at path by an
// older build whose params struct differs in layout from this build's
// (value, its BTF type): the kernel keeps the map's BTF, so each parameter
// whose member the old struct has, by the same name and size, keeps its
// value. The others are absent, and start from their defaults.
func carriedParams(cc *CC, path string, value btf.Type) (map[string]uint64, error) {
	m, err := ebpf.LoadPinnedMap(path, nil)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	info, err := m.Info()
	if err != nil {
		return nil, fmt.Errorf("map info: %w", err)
	}
	id, ok := info.BTFID()
	if !ok {
		return nil, errors.New("the old params map has no BTF")
	}
	h, err := btf.NewHandleFromID(id)
	if err != nil {
		return nil, fmt.Errorf("load the old params map's BTF: %w", err)
	}
	defer h.Close()
	types, err := h.Spec(nil)
	if err != nil {
		return nil, fmt.Errorf("parse the old params map's BTF: %w", err)
	}
	var old *btf.Struct
	if err := types.TypeByName(value.TypeName(), &old); err != nil {
		return nil, fmt.Errorf("find struct %s in the old params map's BTF: %w", value.TypeName(), err)
	}
	cur, err := newParamLayout(value, cc.Params, nil)
	if err != nil {
		return nil, err
	}
	// The parameters whose member the old struct has: laid out as it has
	// them, and carried where the member kept its size.
	var kept []ParamSpec
	for _, p := range cc.Params {
		if slices.ContainsFunc(old.Members, func(mb btf.Member) bool { return mb.Name == p.Field }) {
			kept = append(kept, p)
		}
	}
	prev, err := newParamLayout(old, kept, nil)
	if err != nil {
		return nil, fmt.Errorf("the old params: %w", err)
	}
	if m.ValueSize() != prev.size {
		return nil, fmt.Errorf("the old params map holds %d bytes, its struct %s %d", m.ValueSize(), old.Name, prev.size)
	}
	buf := make([]byte, prev.size)
	if err := m.Lookup(uint32(0), &buf); err != nil {
		return nil, fmt.Errorf("read the old params: %w", err)
	}
	vals := map[string]uint64{}
	for _, p := range kept {
		if prev.fields[p.Name].size == cur.fields[p.Name].size {
			vals[p.Name] = prev.get(buf, p.Name)
		}
	}
	return vals, nil
}

// updateParams applies given on top of the pinned values and writes them
// back in one map update, which live sockets see on their next ACK.
func (l *Loader) updateParams(cc *CC, m *ebpf.Map, given givenParams) (map[string]uint64, []string, error) {
	cur, layout, err := readParams(cc, m)
	if err != nil {
		return nil, nil, err
	}
	vals, notes, err := resolveParams(cc.Params, given, cur, l.autoParam)
	if err != nil {
		return nil, nil, err
	}
	buf, err := layout.encode(vals)
	if err != nil {
		return nil, nil, err
	}
	if err := m.Update(uint32(0), buf, ebpf.UpdateExist); err != nil {
		return nil, nil, fmt.Errorf("write %s params: %w", cc.Name, err)
	}
	return vals, notes, nil
}

func formatParams(cc *CC, vals map[string]uint64) map[string]string {
	out := map[string]string{}
	for _, p := range cc.Params {
		out[p.Name] = p.Format(vals[p.Name])
	}
	return out
}

// Set changes parameters of an attached CC at run time.
func (l *Loader) Set(name string, given map[string]string) (map[string]string, error) {
	cc, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	if len(given) == 0 {
		return nil, kernel.NewError(kernel.KindBadParam, "valid parameters: "+paramNames(cc.Params), nil,
			"no parameters given")
	}
	checked, err := parseGiven(cc.Params, given)
	if err != nil {
		return nil, err
	}
	if err := kernel.CheckCaps(); err != nil {
		return nil, err
	}
	st, err := l.inspectAttached(cc)
	if err != nil {
		return nil, err
	}
	defer st.close()
	vals, _, err := l.updateParams(cc, st.params, checked)
	if err != nil {
		return nil, err
	}
	return formatParams(cc, vals), nil
}

// DetachResult reports what Detach did.
type DetachResult struct {
	Name         string `json:"name"`
	WasAttached  bool   `json:"was_attached"`
	SocketsInUse int64  `json:"sockets_in_use"`
	ResetDefault string `json:"reset_default,omitempty"`
}

// Detach unregisters a CC and removes its pins. Sockets that use it keep
// it until they close: the kernel holds a reference for each. If it is
// the default CC of this network namespace, the default goes back to
// cubic (or reno), since new sockets would otherwise still get it.
func (l *Loader) Detach(name string) (*DetachResult, error) {
	cc, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	if err := kernel.CheckCaps(); err != nil {
		return nil, err
	}
	res := &DetachResult{Name: name}
	if _, err := l.recoverCC(cc); err != nil {
		return nil, err
	}
	st, err := l.inspect(cc)
	if err != nil {
		return nil, err
	}
	defer st.close()
	if !st.attached && !st.stale {
		if st.registered {
			return nil, kernel.NewError(kernel.KindNotAttached,
				"it was registered by another tool; find it with `bpftool struct_ops list`", nil,
				"%s is registered, but not by ccload", name)
		}
		return res, nil
	}
	res.WasAttached = st.attached
	if st.stats != nil {
		for _, g := range l.generations(cc, st) {
			res.SocketsInUse += g.SocketsInUse
		}
	}

	if def, err := kernel.ReadSysctl(l.host.ProcSys, sysctlDefault); err == nil && def == name {
		fb, err := setFallbackDefault(l.host.ProcSys)
		if err != nil {
			return nil, fmt.Errorf("reset the default congestion control before detaching %s: %w", name, err)
		}
		res.ResetDefault = fb
		pin.KillPoint("cc-detach-default-reset")
	}

	dir := l.PinDir(name)
	switch st.reg {
	case kernel.RegLink:
		if err := pin.DetachLink(filepath.Join(dir, pinLink)); err != nil {
			return nil, fmt.Errorf("unregister %s: %w", name, err)
		}
	case kernel.RegLegacy:
		ops, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinOps), nil)
		if err == nil {
			derr := ops.Delete(uint32(0))
			ops.Close()
			if derr != nil && !errors.Is(derr, ebpf.ErrKeyNotExist) && st.attached {
				return nil, fmt.Errorf("unregister %s: %w", name, derr)
			}
		}
	}
	pin.KillPoint("cc-detach-unregistered")
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("remove pins %s: %w", dir, err)
	}
	pin.KillPoint("cc-detach-unpinned")
	if err := waitUnregistered(l.host.ProcSys, name, time.Second); err != nil {
		return nil, err
	}
	if l.shared != nil {
		if err := l.shared.Release(cc.Name); err != nil {
			return nil, fmt.Errorf("detach %s: %w", name, err)
		}
	}
	return res, nil
}

func waitUnregistered(procSys, name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := isRegistered(procSys, name)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s is still registered %v after its pins were removed; another process holds it (see `bpftool struct_ops list`)", name, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
