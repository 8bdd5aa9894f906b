package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
)

// Loader attaches, tunes and detaches ccload's congestion controls.
// It keeps no state of its own: everything lives in the kernel and in
// bpffs pins, so separate ccload processes see the same picture.
type Loader struct {
	host   kernel.Host
	reg    kernel.Registration // forced registration mode; "" = best available
	shared SharedMaps          // the INT store, for CCs that read INT
}

// SharedMaps lends the CCs that read INT (CC.UsesINT) the map they share
// with the INT sockops program, which fills it. The INT side
// (telemetry/sockops) owns that map and implements this interface; the
// loader knows it only through it, and neither package imports the other.
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

// WithSharedMaps gives the Loader the INT store that powertcp and hpcc
// share with the INT sockops program. Without it they cannot be attached.
func WithSharedMaps(s SharedMaps) Option {
	return func(l *Loader) { l.shared = s }
}

// New returns a Loader acting on host.
func New(host kernel.Host, opts ...Option) *Loader {
	l := &Loader{host: host}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Names of the pins in a CC's directory that are not its maps. The maps
// are pinned under their names in the object (mapParams, mapStats, ...).
const (
	pinLink = "link" // struct_ops link (RegLink)
	pinOps  = "ops"  // struct_ops map (RegLegacy)
)

// PinDir returns the bpffs directory that holds name's pins.
func (l *Loader) PinDir(name string) string { return filepath.Join(l.host.PinRoot(), name) }

// AttachRequest says what to attach and how.
type AttachRequest struct {
	Name       string            // built-in CC name
	Params     map[string]string // parameter overrides, as typed by the user
	SetDefault bool              // also make it the netns default CC
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
	Notes           []string            `json:"notes,omitempty"`
}

// Attach registers a built-in CC with the kernel and pins it, so that it
// stays registered after ccload exits. Attaching an attached CC changes
// only the parameters given. On failure nothing is left registered or
// pinned.
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

	st, err := l.inspect(cc)
	if err != nil {
		return nil, err
	}
	defer st.close()
	switch {
	case st.attached:
		vals, notes, err := l.updateParams(cc, st.params, given)
		if err != nil {
			return nil, err
		}
		res.AlreadyAttached = true
		res.Registration = st.reg
		res.Params = formatParams(cc, vals)
		res.Notes = append(res.Notes, notes...)
		return res, l.maybeSetDefault(req, res)
	case st.stale:
		if err := os.RemoveAll(res.PinDir); err != nil {
			return nil, fmt.Errorf("remove stale pins %s: %w", res.PinDir, err)
		}
		res.Notes = append(res.Notes, "removed stale pins of an earlier attach that is no longer registered")
	}
	if st.registered {
		return nil, kernel.NewError(kernel.KindNameTaken,
			"find its owner with `bpftool struct_ops list` (or lsmod for a module) and unregister it, then attach again",
			nil, "a congestion control named %q is already registered, and not by ccload", cc.Name)
	}

	vals, notes, err := resolveParams(cc.Params, given, nil, l.autoParam)
	if err != nil {
		return nil, err
	}
	res.Notes = append(res.Notes, notes...)

	reg := f.Registration
	if l.reg != "" {
		reg = l.reg
	}
	if err := l.register(cc, f, reg, vals); err != nil {
		return nil, err
	}
	res.Registration = reg
	res.CongControl = fmt.Sprintf("%d-argument cong_control", f.CongControlArgs)
	res.Params = formatParams(cc, vals)

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
	res.Default = true
	return nil
}

// register loads cc, registers it in mode reg and pins it. It is
// all-or-nothing: on error, nothing is registered and nothing is pinned.
func (l *Loader) register(cc *CC, f *kernel.Features, reg kernel.Registration, vals map[string]uint64) (err error) {
	spec, err := cc.load()
	if err != nil {
		return kernel.NewError(kernel.KindBadObject, "rebuild ccload", err, "read embedded object %s", cc.Name)
	}
	if err := selectCongControl(spec, f.CongControlArgs); err != nil {
		return kernel.NewError(kernel.KindBadObject, "rebuild ccload", err, "select programs for %s", cc.Name)
	}
	ops, ok := spec.Maps[cc.opsMap]
	if !ok {
		return kernel.NewError(kernel.KindBadObject, "rebuild ccload", nil, "object %s has no struct_ops map %s", cc.Name, cc.opsMap)
	}
	if reg == kernel.RegLegacy {
		// Without BPF_F_LINK, cilium/ebpf's final map update registers
		// the CC: the legacy path, and the only one before 6.4.
		ops.Flags &^= unix.BPF_F_LINK
	}
	// Parameters go in at map creation, so no socket ever sees zeros.
	layout, err := newParamLayout(spec.Maps[mapParams].Value, cc.Params, cc.derived)
	if err != nil {
		return err
	}
	buf, err := layout.encode(vals)
	if err != nil {
		return err
	}
	spec.Maps[mapParams].Contents = []ebpf.MapKV{{Key: uint32(0), Value: buf}}

	opts := ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{KernelTypes: f.Spec}, Cache: f.Cache}
	if cc.UsesINT {
		if l.shared == nil {
			return kernel.NewError(kernel.KindBadObject, "this is a bug in ccload: report it", nil,
				"%s reads INT, but this loader was made without the INT store (loader.WithSharedMaps)", cc.Name)
		}
		store, err := l.shared.Acquire(cc.Name, spec.Maps[mapINTStore])
		if err != nil {
			return err
		}
		defer store.Close()
		opts.MapReplacements = map[string]*ebpf.Map{mapINTStore: store}
	}
	defer func() {
		if err == nil {
			return
		}
		// Last, once our handles are closed: wait until the kernel has
		// let go of the name, so that a failed attach can be retried,
		// and give the INT store back.
		_ = waitUnregistered(l.host.ProcSys, cc.Name, time.Second)
		if cc.UsesINT {
			_ = l.shared.Release(cc.Name)
		}
	}()
	coll, err := ebpf.NewCollectionWithOptions(spec, opts)
	if err != nil {
		if reg == kernel.RegLegacy {
			// The failure may have come after the registering update.
			l.unregisterOrphan(cc.Name)
		}
		return kernel.LoadError(cc.Name, err)
	}
	defer coll.Close()
	opsMap := coll.Maps[cc.opsMap]

	stage, err := pin.NewStage(l.host.PinRoot(), cc.Name, l.PinDir(cc.Name))
	if err != nil {
		return err
	}
	defer stage.Abort()
	if reg == kernel.RegLegacy {
		stage.OnAbort(func() { _ = opsMap.Delete(uint32(0)) })
	}
	// Every map but the struct_ops one and the shared INT store: params,
	// stats, and the trace ring buffer and switch where the CC has them.
	if err := stage.PinMaps(coll.Maps, cc.opsMap, mapINTStore); err != nil {
		return fmt.Errorf("pin %s: %w", cc.Name, err)
	}
	if reg == kernel.RegLegacy {
		if err := opsMap.Pin(stage.Path(pinOps)); err != nil {
			return fmt.Errorf("pin %s struct_ops map: %w", cc.Name, err)
		}
		return stage.Commit()
	}
	lnk, err := link.AttachStructOps(link.StructOpsOptions{Map: opsMap})
	if err != nil {
		return kernel.LoadError(cc.Name, fmt.Errorf("attach struct_ops link: %w", err))
	}
	stage.OnAbort(func() { lnk.Close() })
	if err := lnk.Pin(stage.Path(pinLink)); err != nil {
		return fmt.Errorf("pin %s link: %w", cc.Name, err)
	}
	if err := stage.Commit(); err != nil {
		return err
	}
	_ = lnk.Close() // the pin keeps it; closing our fd cannot undo that
	return nil
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

// unregisterOrphan deletes a legacy registration of name that has no pin,
// left by a load that failed after the registering map update.
func (l *Loader) unregisterOrphan(name string) {
	if ok, _ := isRegistered(l.host.ProcSys, name); !ok {
		return
	}
	var id ebpf.MapID
	for i := 0; i < 1<<16; i++ {
		next, err := ebpf.MapGetNextID(id)
		if err != nil {
			return
		}
		id = next
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue
		}
		info, err := m.Info()
		if err == nil && info.Type == ebpf.StructOpsMap && info.Name != "" && strings.HasPrefix(name, info.Name) {
			_ = m.Delete(uint32(0))
		}
		m.Close()
	}
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
		return nil, nil, kernel.NewError(kernel.KindVersionMismatch, "detach and attach it again with this ccload", nil,
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
		if s, err := readStats(st.stats); err == nil {
			res.SocketsInUse = s.SocketsInUse()
		}
	}

	if def, err := kernel.ReadSysctl(l.host.ProcSys, sysctlDefault); err == nil && def == name {
		// cubic where allowed; in a child netns only CCs flagged
		// TCP_CONG_NON_RESTRICTED may be the default, and reno always is.
		var werr error
		for _, fallback := range []string{"cubic", "reno"} {
			if werr = kernel.WriteSysctl(l.host.ProcSys, sysctlDefault, fallback); werr == nil {
				res.ResetDefault = fallback
				break
			}
		}
		if werr != nil {
			return nil, fmt.Errorf("reset the default congestion control before detaching %s: %w", name, werr)
		}
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
			if derr != nil && !errors.Is(derr, ebpf.ErrKeyNotExist) {
				return nil, fmt.Errorf("unregister %s: %w", name, derr)
			}
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("remove pins %s: %w", dir, err)
	}
	if err := waitUnregistered(l.host.ProcSys, name, time.Second); err != nil {
		return nil, err
	}
	if cc.UsesINT && l.shared != nil {
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
