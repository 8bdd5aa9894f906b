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
)

// Host names the kernel interfaces the loader uses. Tests point them
// elsewhere to exercise error paths; everything else uses DefaultHost.
type Host struct {
	BTFPath string // kernel BTF, normally /sys/kernel/btf/vmlinux
	BPFFS   string // bpffs mount point, normally /sys/fs/bpf
	PinDir  string // ccload's directory below BPFFS, normally "ccload"
	ProcSys string // /proc/sys of the network namespace to act in
}

// DefaultHost returns the standard locations.
func DefaultHost() Host {
	return Host{
		BTFPath: "/sys/kernel/btf/vmlinux",
		BPFFS:   "/sys/fs/bpf",
		PinDir:  "ccload",
		ProcSys: "/proc/sys",
	}
}

func (h Host) isDefaultBPFFS() bool { return h.BPFFS == DefaultHost().BPFFS }

// Loader attaches, tunes and detaches ccload's congestion controls.
// It keeps no state of its own: everything lives in the kernel and in
// bpffs pins, so separate ccload processes see the same picture.
type Loader struct {
	host Host
	reg  Registration // forced registration mode; "" = best available
}

// Option changes how a Loader works.
type Option func(*Loader)

// WithRegistration forces a registration mode instead of the best the
// kernel has. Tests use it to run the legacy (6.1) path on newer kernels.
func WithRegistration(r Registration) Option {
	return func(l *Loader) { l.reg = r }
}

// New returns a Loader acting on host.
func New(host Host, opts ...Option) *Loader {
	l := &Loader{host: host}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Names of the pins in a CC's directory.
const (
	pinLink   = "link"   // struct_ops link (RegLink)
	pinOps    = "ops"    // struct_ops map (RegLegacy)
	pinParams = "params" // parameters array map
	pinStats  = "stats"  // counters per-CPU array map
)

func (l *Loader) pinRoot() string { return filepath.Join(l.host.BPFFS, l.host.PinDir) }

// PinDir returns the bpffs directory that holds name's pins.
func (l *Loader) PinDir(name string) string { return filepath.Join(l.pinRoot(), name) }

// AttachRequest says what to attach and how.
type AttachRequest struct {
	Name       string            // built-in CC name
	Params     map[string]string // parameter overrides, as typed by the user
	SetDefault bool              // also make it the netns default CC
}

// AttachResult reports what Attach did.
type AttachResult struct {
	Name            string            `json:"name"`
	AlreadyAttached bool              `json:"already_attached"`
	Registration    Registration      `json:"registration"`
	CongControl     string            `json:"cong_control_prototype,omitempty"`
	PinDir          string            `json:"pin_dir"`
	Params          map[string]string `json:"params"`
	Default         bool              `json:"default"`
	Notes           []string          `json:"notes,omitempty"`
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
	if err := checkParams(cc.Params, req.Params); err != nil {
		return nil, err
	}
	if err := checkCaps(); err != nil {
		return nil, err
	}
	f, err := probeFeatures(l.host.BTFPath)
	if err != nil {
		return nil, err
	}
	if err := f.requireCC(); err != nil {
		return nil, err
	}
	res := &AttachResult{Name: cc.Name, PinDir: l.PinDir(cc.Name)}

	mounted, err := ensureBPFFS(l.host.BPFFS, l.host.isDefaultBPFFS())
	if err != nil {
		return nil, err
	}
	if mounted {
		res.Notes = append(res.Notes, "mounted bpffs at "+l.host.BPFFS)
	}

	st, err := l.inspect(cc)
	if err != nil {
		return nil, err
	}
	switch {
	case st.attached:
		defer st.close()
		vals, notes, err := l.updateParams(cc, st.params, req.Params)
		if err != nil {
			return nil, err
		}
		res.AlreadyAttached = true
		res.Registration = st.reg
		res.Params = formatParams(cc, vals)
		res.Notes = append(res.Notes, notes...)
		return res, l.maybeSetDefault(req, res)
	case st.stale:
		st.close()
		if err := os.RemoveAll(res.PinDir); err != nil {
			return nil, fmt.Errorf("remove stale pins %s: %w", res.PinDir, err)
		}
		res.Notes = append(res.Notes, "removed stale pins of an earlier attach that is no longer registered")
	}

	taken, err := isRegistered(l.host.ProcSys, cc.Name)
	if err != nil {
		return nil, err
	}
	if taken {
		return nil, newError(KindNameTaken,
			"find its owner with `bpftool struct_ops list` (or lsmod for a module) and unregister it, then attach again",
			nil, "a congestion control named %q is already registered, and not by ccload", cc.Name)
	}

	vals, notes, err := resolveParams(cc.Params, req.Params, nil, l.autoParam)
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
	if err := writeSysctl(l.host.ProcSys, sysctlDefault, req.Name); err != nil {
		return newError(KindLoad, "check that ccload runs with CAP_NET_ADMIN in this network namespace", err,
			"make %s the default congestion control", req.Name)
	}
	res.Default = true
	return nil
}

// register loads cc, registers it in mode reg and pins it. It is
// all-or-nothing: on error, nothing is registered and nothing is pinned.
func (l *Loader) register(cc *CC, f *Features, reg Registration, vals map[string]uint64) (err error) {
	spec, err := cc.load()
	if err != nil {
		return fmt.Errorf("read embedded object %s: %w", cc.Name, err)
	}
	if err := selectCongControl(spec, f.CongControlArgs); err != nil {
		return fmt.Errorf("select programs for %s: %w", cc.Name, err)
	}
	ops, ok := spec.Maps[cc.Name]
	if !ok {
		return fmt.Errorf("object %s has no struct_ops map %s", cc.Name, cc.Name)
	}
	if reg == RegLegacy {
		// Without BPF_F_LINK, cilium/ebpf's final map update registers
		// the CC: the legacy path, and the only one before 6.4.
		ops.Flags &^= unix.BPF_F_LINK
	}
	// Parameters go in at map creation, so no socket ever sees zeros.
	layout, err := newParamLayout(spec.Maps[pinParams].Value, cc.Params)
	if err != nil {
		return err
	}
	buf, err := layout.encode(vals)
	if err != nil {
		return err
	}
	spec.Maps[pinParams].Contents = []ebpf.MapKV{{Key: uint32(0), Value: buf}}

	opts := ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{KernelTypes: f.spec}}
	if cc.UsesINT {
		store, serr := l.sharedMap(intStoreMap, spec.Maps[intStoreMap])
		if serr != nil {
			return serr
		}
		defer store.Close()
		defer func() {
			if err != nil {
				l.releaseShared()
			}
		}()
		opts.MapReplacements = map[string]*ebpf.Map{intStoreMap: store}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, opts)
	if err != nil {
		if reg == RegLegacy {
			// The failure may have come after the registering update.
			l.unregisterOrphan(cc.Name)
		}
		return loadError(cc.Name, err)
	}
	defer coll.Close()
	opsMap := coll.Maps[cc.Name]

	stage := filepath.Join(l.pinRoot(), fmt.Sprintf("staging-%s-%d", cc.Name, os.Getpid()))
	var lnk link.Link
	defer func() {
		if err == nil {
			return
		}
		// Pins first: dropping a pinned link's last reference through
		// the pin defers its release to a kernel worker, while closing
		// our fd last releases it (and unregisters) synchronously.
		os.RemoveAll(stage)
		if lnk != nil {
			lnk.Close()
		}
		if reg == RegLegacy {
			_ = opsMap.Delete(uint32(0))
		}
		_ = waitUnregistered(l.host.ProcSys, cc.Name, time.Second)
	}()

	if err := os.MkdirAll(stage, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", stage, err)
	}
	// Every map but the struct_ops one, the shared INT store and the
	// compiler's data sections (.rodata: constants; bpffs refuses dots):
	// params, stats, and the trace ring buffer and switch where the CC has
	// them.
	for name, m := range coll.Maps {
		if name == cc.Name || name == intStoreMap || strings.HasPrefix(name, ".") {
			continue
		}
		if err := m.Pin(filepath.Join(stage, name)); err != nil {
			return fmt.Errorf("pin %s %s: %w", cc.Name, name, err)
		}
	}
	if reg == RegLink {
		lnk, err = link.AttachStructOps(link.StructOpsOptions{Map: opsMap})
		if err != nil {
			return loadError(cc.Name, fmt.Errorf("attach struct_ops link: %w", err))
		}
		if err := lnk.Pin(filepath.Join(stage, pinLink)); err != nil {
			return fmt.Errorf("pin %s link: %w", cc.Name, err)
		}
	} else if err := opsMap.Pin(filepath.Join(stage, pinOps)); err != nil {
		return fmt.Errorf("pin %s struct_ops map: %w", cc.Name, err)
	}
	if err := os.Rename(stage, l.PinDir(cc.Name)); err != nil {
		return fmt.Errorf("move pins into %s: %w", l.PinDir(cc.Name), err)
	}
	stage = l.PinDir(cc.Name) // the rollback above now removes the final dir

	if ok, err := isRegistered(l.host.ProcSys, cc.Name); err != nil || !ok {
		return newError(KindLoad, "the kernel accepted the registration but does not list the CC; run `ccload status` and report it",
			err, "%s is missing from %s after registration; attach rolled back", cc.Name, sysctlAvailable)
	}
	if lnk != nil {
		lnk.Close() // the pin keeps it
		lnk = nil
	}
	return nil
}

func loadError(name string, err error) error {
	fix := "this kernel rejected the program; run `ccload status` and report the output with `ccload version`"
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return newError(KindLoad, fix, fmt.Errorf("%+v", ve), "the verifier rejected %s", name)
	}
	if errors.Is(err, unix.EEXIST) {
		return newError(KindNameTaken, "another process registered it at the same moment; run `ccload list`, then attach again",
			err, "the kernel already has a congestion control named %q", name)
	}
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return newError(KindMissingCaps, "run as root, or with CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN; check that no LSM (lockdown=confidentiality) blocks BPF", err, "the kernel refused to load %s", name)
	}
	if errors.Is(err, ebpf.ErrNotSupported) {
		return newError(KindKernelTooOld, "ccload supports kernels 6.1 to 6.18; run `ccload status`", err, "kernel cannot load %s", name)
	}
	return newError(KindLoad, fix, err, "load %s", name)
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

// attachState is what bpffs and the kernel say about one CC.
type attachState struct {
	attached bool // pinned and registered
	stale    bool // pinned but no longer registered
	reg      Registration
	params   *ebpf.Map
	stats    *ebpf.Map
}

func (s *attachState) close() {
	if s.params != nil {
		s.params.Close()
	}
	if s.stats != nil {
		s.stats.Close()
	}
}

// inspect reads the pins of cc. A missing directory is "not attached".
func (l *Loader) inspect(cc *CC) (*attachState, error) {
	dir := l.PinDir(cc.Name)
	st := &attachState{}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return st, nil
	} else if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", dir, err)
	}
	switch {
	case exists(filepath.Join(dir, pinLink)):
		st.reg = RegLink
	case exists(filepath.Join(dir, pinOps)):
		st.reg = RegLegacy
	}
	var err error
	if st.params, err = ebpf.LoadPinnedMap(filepath.Join(dir, pinParams), nil); err != nil {
		st.params = nil
	}
	if st.stats, err = ebpf.LoadPinnedMap(filepath.Join(dir, pinStats), nil); err != nil {
		st.stats = nil
	}
	registered, err := isRegistered(l.host.ProcSys, cc.Name)
	if err != nil {
		st.close()
		return nil, err
	}
	if st.reg != "" && st.params != nil && st.stats != nil && registered {
		st.attached = true
	} else {
		st.stale = true
	}
	return st, nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// readParams decodes the pinned params map of cc.
func readParams(cc *CC, m *ebpf.Map) (map[string]uint64, *paramLayout, error) {
	spec, err := cc.load()
	if err != nil {
		return nil, nil, err
	}
	layout, err := newParamLayout(spec.Maps[pinParams].Value, cc.Params)
	if err != nil {
		return nil, nil, err
	}
	if m.ValueSize() != layout.size {
		return nil, nil, newError(KindLoad, "detach and attach it again with this ccload", nil,
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
func (l *Loader) updateParams(cc *CC, m *ebpf.Map, given map[string]string) (map[string]uint64, []string, error) {
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
		return nil, newError(KindBadParam, "valid parameters: "+paramNames(cc.Params), nil,
			"no parameters given")
	}
	if err := checkParams(cc.Params, given); err != nil {
		return nil, err
	}
	if err := checkCaps(); err != nil {
		return nil, err
	}
	st, err := l.inspect(cc)
	if err != nil {
		return nil, err
	}
	defer st.close()
	if !st.attached {
		return nil, newError(KindNotAttached, "attach it first: ccload attach "+name, nil,
			"%s is not attached", name)
	}
	vals, _, err := l.updateParams(cc, st.params, given)
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
	if err := checkCaps(); err != nil {
		return nil, err
	}
	res := &DetachResult{Name: name}
	st, err := l.inspect(cc)
	if err != nil {
		return nil, err
	}
	defer st.close()
	if !st.attached && !st.stale {
		if ok, _ := isRegistered(l.host.ProcSys, name); ok {
			return nil, newError(KindNotAttached,
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

	if def, err := readSysctl(l.host.ProcSys, sysctlDefault); err == nil && def == name {
		// cubic where allowed; in a child netns only CCs flagged
		// TCP_CONG_NON_RESTRICTED may be the default, and reno always is.
		var werr error
		for _, fallback := range []string{"cubic", "reno"} {
			if werr = writeSysctl(l.host.ProcSys, sysctlDefault, fallback); werr == nil {
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
	case RegLink:
		if err := detachPinnedLink(filepath.Join(dir, pinLink)); err != nil {
			return nil, fmt.Errorf("unregister %s: %w", name, err)
		}
	case RegLegacy:
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
	if cc.UsesINT {
		l.releaseShared()
	}
	if err := waitUnregistered(l.host.ProcSys, name, time.Second); err != nil {
		return nil, err
	}
	return res, nil
}

// detachPinnedLink unpins the link at path and closes it. Unpinning first
// means that closing our fd drops the last reference, so the kernel
// releases the link (and what it holds registered) synchronously. A
// missing pin is not an error.
func detachPinnedLink(path string) error {
	lnk, err := link.LoadPinnedLink(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open pinned link %s: %w", path, err)
	}
	defer lnk.Close()
	if err := lnk.Unpin(); err != nil {
		return fmt.Errorf("unpin %s: %w", path, err)
	}
	return nil
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
