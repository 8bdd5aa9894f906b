package loader

// Tests in this file load the real BPF objects into the running kernel.
// They need root; they use their own pin directory so they never touch a
// user's attached CCs, and they clean up even when they fail.

import (
	"encoding/binary"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/qdisc"
	"github.com/ccload/ccload/telemetry/sockops"
)

// newTestLoader returns a Loader on h wired, as the CLI's is, to the INT
// store for the CCs that read INT.
func newTestLoader(h kernel.Host, opts ...Option) *Loader {
	return New(h, append([]Option{WithSharedMaps(sockops.NewStore(h))}, opts...)...)
}

// attachForTest attaches name and detaches it when the test ends.
func attachForTest(t testing.TB, l *Loader, req AttachRequest) *AttachResult {
	t.Helper()
	res, err := l.Attach(req)
	if err != nil {
		t.Fatalf("attach %s: %v (fix: %s)", req.Name, err, kernel.FixOf(err))
	}
	t.Cleanup(func() {
		if _, err := l.Detach(req.Name); err != nil {
			t.Errorf("cleanup: detach %s: %v", req.Name, err)
		}
	})
	return res
}

func TestAttachDetachLifecycle(t *testing.T) {
	for _, cc := range Builtin() {
		for _, reg := range testutil.Registrations(t) {
			t.Run(cc.Name+"/"+string(reg), func(t *testing.T) {
				testutil.RequireKernelCC(t, cc.Name)
				l := newTestLoader(testutil.Host(t), WithRegistration(reg))

				res := attachForTest(t, l, AttachRequest{Name: cc.Name})
				if res.AlreadyAttached || res.Registration != reg {
					t.Fatalf("attach result %+v", res)
				}
				if !testutil.Registered(t, cc.Name) {
					t.Fatalf("%s not in tcp_available_congestion_control after attach", cc.Name)
				}
				pin := pinOps
				if reg == kernel.RegLink {
					pin = pinLink
				}
				for _, p := range []string{pin, mapParams, mapStats} {
					if !kernel.Exists(filepath.Join(l.PinDir(cc.Name), p)) {
						t.Errorf("pin %s missing", p)
					}
				}

				// Attaching again is idempotent and says so.
				again, err := l.Attach(AttachRequest{Name: cc.Name})
				if err != nil || !again.AlreadyAttached {
					t.Fatalf("second attach = %+v, %v; want AlreadyAttached", again, err)
				}

				det, err := l.Detach(cc.Name)
				if err != nil {
					t.Fatal(err)
				}
				if !det.WasAttached {
					t.Errorf("detach result %+v, want WasAttached", det)
				}
				if testutil.Registered(t, cc.Name) {
					t.Fatalf("%s still registered after detach", cc.Name)
				}
				if kernel.Exists(l.PinDir(cc.Name)) {
					t.Fatalf("pins left in %s after detach", l.PinDir(cc.Name))
				}
				if left, _ := os.ReadDir(l.host.PinRoot()); len(left) != 0 {
					t.Fatalf("pins left in %s after detach: %v", l.host.PinRoot(), left)
				}
				// Detaching again is a no-op.
				if det, err := l.Detach(cc.Name); err != nil || det.WasAttached {
					t.Fatalf("second detach = %+v, %v", det, err)
				}
			})
		}
	}
}

func TestAttachUpdatesParamsWhenAttached(t *testing.T) {
	testutil.RequireKernelCC(t, "theta_powertcp")
	l := New(testutil.Host(t))
	attachForTest(t, l, AttachRequest{Name: "theta_powertcp", Params: map[string]string{"gamma": "0.9", "host_bw": "10gbit"}})

	res, err := l.Attach(AttachRequest{Name: "theta_powertcp", Params: map[string]string{"gamma": "0.5"}})
	if err != nil || !res.AlreadyAttached {
		t.Fatalf("re-attach: %+v, %v", res, err)
	}
	if res.Params["gamma"] != "0.5" || res.Params["host_bw"] != "10gbit" {
		t.Fatalf("params after re-attach: %v", res.Params)
	}

	vals, err := l.Set("theta_powertcp", map[string]string{"base_rtt": "40us"})
	if err != nil {
		t.Fatal(err)
	}
	if vals["base_rtt"] != "40us" || vals["gamma"] != "0.5" {
		t.Fatalf("params after set: %v", vals)
	}
	list, err := l.List()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(list, func(s CCStatus) bool { return s.Name == "theta_powertcp" })
	if i < 0 || !list[i].Attached || list[i].Params["base_rtt"] != "40us" {
		t.Fatalf("list: %+v", list)
	}

	if _, err := l.Set("theta_powertcp", map[string]string{"gamma": "7"}); !kernel.IsKind(err, kernel.KindBadParam) {
		t.Fatalf("set gamma=7: %v, want bad parameter", err)
	}
	if vals, _ := l.Set("theta_powertcp", map[string]string{"expected_flows": "10"}); vals["gamma"] != "0.5" {
		t.Fatalf("a rejected set changed the parameters: %v", vals)
	}
}

// syntheticBTF writes a BTF blob that lacks struct_ops support, as an old
// kernel's would.
func syntheticBTF(t *testing.T) string {
	t.Helper()
	var b btf.Builder
	if _, err := b.Add(&btf.Int{Name: "int", Size: 4, Encoding: btf.Signed}); err != nil {
		t.Fatal(err)
	}
	raw, err := b.Marshal(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "vmlinux")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// withoutCaps runs fn on a fresh OS thread whose effective capability set
// lacks caps. Capabilities are per thread, so the rest of the test process
// keeps them; the thread exits with its goroutine and is never reused.
func withoutCaps(t *testing.T, caps []uint, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // no Unlock: the thread dies with the goroutine
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			t.Error(err)
			return
		}
		for _, c := range caps {
			data[c/32].Effective &^= 1 << (c % 32)
		}
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			t.Error(err)
			return
		}
		fn()
	}()
	<-done
}

func TestAttachErrors(t *testing.T) {
	testutil.RequireKernelCC(t, "theta_powertcp", "bpf_dctcp")

	fakeProcSys := func(t *testing.T) string {
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "net/ipv4"), 0o755)
		os.WriteFile(filepath.Join(dir, sysctlAvailable), []byte("reno cubic\n"), 0o644)
		// A directory where the default CC's sysctl should be: writing
		// it fails.
		os.MkdirAll(filepath.Join(dir, sysctlDefault), 0o755)
		return dir
	}

	tests := []struct {
		name  string
		host  func(t *testing.T) kernel.Host
		req   AttachRequest
		setup func(t *testing.T)
		wrap  func(t *testing.T, fn func())
		kind  kernel.Kind
	}{
		{name: "unknown CC", req: AttachRequest{Name: "powertcp_v9"}, kind: kernel.KindUnknownCC},
		{name: "bad value", req: AttachRequest{Name: "theta_powertcp", Params: map[string]string{"gamma": "1.5"}}, kind: kernel.KindBadParam},
		{name: "missing unit", req: AttachRequest{Name: "theta_powertcp", Params: map[string]string{"base_rtt": "20"}}, kind: kernel.KindBadParam},
		{name: "unknown parameter", req: AttachRequest{Name: "bpf_dctcp", Params: map[string]string{"gamma": "0.9"}}, kind: kernel.KindBadParam},
		{
			name: "no BTF",
			host: func(t *testing.T) kernel.Host { h := testutil.Host(t); h.BTFPath = "/nonexistent/vmlinux"; return h },
			req:  AttachRequest{Name: "theta_powertcp"}, kind: kernel.KindNoBTF,
		},
		{
			name: "kernel too old",
			host: func(t *testing.T) kernel.Host { h := testutil.Host(t); h.BTFPath = syntheticBTF(t); return h },
			req:  AttachRequest{Name: "theta_powertcp"}, kind: kernel.KindKernelTooOld,
		},
		{
			name: "bpffs not mounted",
			host: func(t *testing.T) kernel.Host { h := testutil.Host(t); h.BPFFS = t.TempDir(); return h },
			req:  AttachRequest{Name: "theta_powertcp"}, kind: kernel.KindNoBPFFS,
		},
		{
			name: "no CAP_BPF",
			req:  AttachRequest{Name: "theta_powertcp"}, kind: kernel.KindMissingCaps,
			wrap: func(t *testing.T, fn func()) {
				// CAP_SYS_ADMIN also grants BPF, so drop both.
				withoutCaps(t, []uint{unix.CAP_SYS_ADMIN, unix.CAP_BPF}, fn)
			},
		},
		{
			name: "name registered by someone else",
			req:  AttachRequest{Name: "bpf_dctcp"}, kind: kernel.KindNameTaken,
			setup: func(t *testing.T) {
				// Register bpf_dctcp the way another tool would: a link
				// held by this process, with no ccload pins.
				registerBehindOurBack(t, "bpf_dctcp")
			},
		},
		{
			// The kernel registers the CC, but making it the default
			// fails: the attach must roll back completely.
			name: "failure after registration rolls back",
			host: func(t *testing.T) kernel.Host { h := testutil.Host(t); h.ProcSys = fakeProcSys(t); return h },
			req:  AttachRequest{Name: "theta_powertcp", SetDefault: true}, kind: kernel.KindSysctl,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := testutil.Host(t)
			if tt.host != nil {
				h = tt.host(t)
			}
			if tt.setup != nil {
				tt.setup(t)
			}
			l := newTestLoader(h)
			var err error
			call := func() { _, err = l.Attach(tt.req) }
			if tt.wrap != nil {
				tt.wrap(t, call)
			} else {
				call()
			}
			if err == nil {
				l.Detach(tt.req.Name)
				t.Fatalf("attach succeeded, want an error of kind %v", tt.kind)
			}
			t.Logf("error: %v\n  fix: %s", err, kernel.FixOf(err))
			if tt.kind != kernel.KindUnknown {
				if !kernel.IsKind(err, tt.kind) {
					t.Fatalf("error %v is not of kind %q", err, tt.kind)
				}
				if kernel.FixOf(err) == "" {
					t.Fatalf("error %v carries no fix", err)
				}
			}
			// Nothing left behind: no pins, no registration by us.
			if kernel.Exists(l.PinDir(tt.req.Name)) {
				t.Errorf("pins left in %s", l.PinDir(tt.req.Name))
			}
			entries, _ := os.ReadDir(filepath.Join(h.BPFFS, h.PinDir))
			if len(entries) != 0 {
				t.Errorf("leftovers in the pin root: %v", entries)
			}
			if tt.setup == nil && testutil.Registered(t, tt.req.Name) {
				t.Errorf("%s is registered after a failed attach", tt.req.Name)
			}
		})
	}
}

func TestNotAttachedErrors(t *testing.T) {
	testutil.RequireKernelCC(t, "theta_powertcp")
	l := New(testutil.Host(t))
	if _, err := l.Set("theta_powertcp", map[string]string{"gamma": "0.5"}); !kernel.IsKind(err, kernel.KindNotAttached) {
		t.Fatalf("set on a detached CC: %v", err)
	}
	if _, err := l.Set("nope", map[string]string{"gamma": "0.5"}); !kernel.IsKind(err, kernel.KindUnknownCC) {
		t.Fatalf("set on an unknown CC: %v", err)
	}
	if _, err := l.Detach("nope"); !kernel.IsKind(err, kernel.KindUnknownCC) {
		t.Fatalf("detach of an unknown CC: %v", err)
	}
	if res, err := l.Detach("theta_powertcp"); err != nil || res.WasAttached {
		t.Fatalf("detach of a detached CC: %+v, %v", res, err)
	}
}

// TestStatusChecks checks `ccload status`'s list: every required check
// passes where the tests run, a failed check carries a fix, an optional one
// names what needs it, and the optional checks say what their probes say
// of this kernel (qdisc.TestProbeFQ checks the sch_fq probe against fq on
// a veth). Without BTF the BTF check fails, with a fix.
func TestStatusChecks(t *testing.T) {
	testutil.RequireKernelCC(t)
	checks := New(testutil.Host(t)).Status()
	byName := map[string]Check{}
	for _, c := range checks {
		byName[c.Name] = c
		if c.Required && !c.OK {
			t.Errorf("required check %s failed on this machine: %s (fix: %s)", c.Name, c.Detail, c.Fix)
		}
		if !c.OK && c.Fix == "" {
			t.Errorf("check %s failed without a fix: %s", c.Name, c.Detail)
		}
		if !c.Required && c.NeededBy == "" {
			t.Errorf("optional check %s names nothing that needs it", c.Name)
		}
	}
	fqErr := qdisc.ProbeFQ()
	if c, ok := byName["sch_fq"]; !ok || c.Required || c.OK != (fqErr == nil) {
		t.Errorf("sch_fq check %+v (found %v), where the probe says %v", c, ok, fqErr)
	} else if !c.OK && !strings.Contains(c.Detail+c.Fix, "CONFIG_NET_SCH_FQ") {
		t.Errorf("sch_fq check %+v does not name CONFIG_NET_SCH_FQ", c)
	}
	_, cgErr := kernel.Cgroup2Root()
	if c, ok := byName["cgroup v2"]; !ok || c.Required || c.OK != (cgErr == nil) {
		t.Errorf("cgroup v2 check %+v (found %v), where /proc/self/mountinfo says %v", c, ok, cgErr)
	}
	h := testutil.Host(t)
	h.BTFPath = "/nonexistent"
	bad := New(h).Status()
	if i := slices.IndexFunc(bad, func(c Check) bool { return c.Name == "kernel BTF" }); i < 0 || bad[i].OK || bad[i].Fix == "" {
		t.Fatalf("status without BTF: %+v", bad)
	}
}

// TestAttachDefault checks --default: the CC becomes the netns default,
// and detach hands the default back to cubic before unregistering.
func TestAttachDefault(t *testing.T) {
	testutil.RequireKernelCC(t, "theta_powertcp")
	prev, err := kernel.ReadSysctl("/proc/sys", sysctlDefault)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kernel.WriteSysctl("/proc/sys", sysctlDefault, prev) })

	l := New(testutil.Host(t))
	res := attachForTest(t, l, AttachRequest{Name: "theta_powertcp", SetDefault: true})
	if !res.Default {
		t.Fatalf("attach result %+v, want Default", res)
	}
	if def, _ := kernel.ReadSysctl("/proc/sys", sysctlDefault); def != "theta_powertcp" {
		t.Fatalf("default is %q after attach --default", def)
	}
	det, err := l.Detach("theta_powertcp")
	if err != nil {
		t.Fatal(err)
	}
	if def, _ := kernel.ReadSysctl("/proc/sys", sysctlDefault); def != "cubic" || det.ResetDefault != "cubic" {
		t.Fatalf("after detach the default is %q (reported %q), want cubic", def, det.ResetDefault)
	}
}

// registerBehindOurBack registers the CC the way another tool would: held
// by this process (a link, or a registered legacy map), with no pins.
func registerBehindOurBack(t *testing.T, name string) {
	t.Helper()
	cc, err := Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	f, err := kernel.Probe("/sys/kernel/btf/vmlinux")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := cc.load()
	if err != nil {
		t.Fatal(err)
	}
	if err := selectCongControl(spec, f.CongControlArgs); err != nil {
		t.Fatal(err)
	}
	if f.Registration == kernel.RegLegacy {
		spec.Maps[cc.opsMap].Flags &^= unix.BPF_F_LINK
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { coll.Close() })
	if f.Registration == kernel.RegLegacy {
		// Loading registered it; deleting the element unregisters it.
		t.Cleanup(func() { coll.Maps[cc.opsMap].Delete(uint32(0)) })
		return
	}
	lnk, err := link.AttachStructOps(link.StructOpsOptions{Map: coll.Maps[cc.opsMap]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lnk.Close() })
}

// TestSharedMapsOfCCs checks that each CC takes, from the shared maps, the
// ones its object declares (the INT store for the CCs that read INT,
// On-Ramp's holds for those that read the RTT), that its programs use the
// pinned map itself, and that its detach gives them back.
func TestSharedMapsOfCCs(t *testing.T) {
	tests := []struct {
		cc   string
		want []string
	}{
		{"theta_powertcp", []string{mapOnRampHolds}},
		{"powertcp", []string{mapINTStore, mapOnRampHolds}},
		{"hpcc", []string{mapINTStore}},
		{"bpf_dctcp", nil},
	}
	for _, tt := range tests {
		t.Run(tt.cc, func(t *testing.T) {
			testutil.RequireKernelCC(t, tt.cc)
			h := testutil.Host(t)
			store := sockops.NewStore(h)
			l := New(h, WithSharedMaps(store))
			if _, err := l.Attach(AttachRequest{Name: tt.cc}); err != nil {
				t.Fatalf("attach %s: %v", tt.cc, err)
			}
			detached := false
			t.Cleanup(func() {
				if !detached {
					_, _ = l.Detach(tt.cc)
				}
			})
			for _, name := range sharedMaps() {
				path := store.PinPath(name)
				if !slices.Contains(tt.want, name) {
					if kernel.Exists(path) {
						t.Errorf("%s is pinned, but %s does not use it", path, tt.cc)
					}
					continue
				}
				m, err := ebpf.LoadPinnedMap(path, nil)
				if err != nil {
					t.Fatalf("%s uses %s, but it is not pinned: %v", tt.cc, name, err)
				}
				info, err := m.Info()
				m.Close()
				if err != nil {
					t.Fatal(err)
				}
				id, _ := info.ID()
				if n := structOpsProgsUsing(t, id); n == 0 {
					t.Errorf("no struct_ops program uses the pinned %s (map %d)", name, id)
				}
			}
			holders, err := store.Holders()
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			if len(tt.want) > 0 {
				want = []string{tt.cc}
			}
			if !slices.Equal(holders, want) {
				t.Errorf("holders %v, want %v", holders, want)
			}
			if _, err := l.Detach(tt.cc); err != nil {
				t.Fatal(err)
			}
			detached = true
			if kernel.Exists(store.Dir()) {
				t.Errorf("%s is left after detaching %s, its only holder", store.Dir(), tt.cc)
			}
		})
	}
}

// structOpsProgsUsing counts the loaded struct_ops programs that use map id.
func structOpsProgsUsing(t *testing.T, id ebpf.MapID) int {
	t.Helper()
	n := 0
	if err := kernel.WalkPrograms(func(_ ebpf.ProgramID, _ *ebpf.Program, info *ebpf.ProgramInfo) bool {
		if ids, ok := info.MapIDs(); ok && info.Type == ebpf.StructOps && slices.Contains(ids, id) {
			n++
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCarriedParamsAcrossLayouts checks that an upgrade whose params struct
// differs in layout keeps the old build's values by member name: a params
// map pinned with an older, shorter power_params (no derived members, no
// onramp_holds, beta_bytes before expected_flows) gives back what it
// holds, and nothing for the members it lacks.
func TestCarriedParamsAcrossLayouts(t *testing.T) {
	testutil.RequireRoot(t)
	u32 := &btf.Int{Name: "__u32", Size: 4}
	u64 := &btf.Int{Name: "__u64", Size: 8}
	old := &btf.Struct{Name: "power_params", Size: 24, Members: []btf.Member{
		{Name: "host_bw_bps", Type: u64, Offset: 0},
		{Name: "gamma", Type: u32, Offset: 64},
		{Name: "base_rtt_us", Type: u32, Offset: 96},
		{Name: "beta_bytes", Type: u32, Offset: 128},
		{Name: "expected_flows", Type: u32, Offset: 160},
	}}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "params", Type: ebpf.Array, KeySize: 4, ValueSize: 24, MaxEntries: 1, Key: u32, Value: old})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	buf := make([]byte, 24)
	binary.NativeEndian.PutUint64(buf[0:], 25_000_000_000)
	binary.NativeEndian.PutUint32(buf[8:], 58982) // gamma 0.9
	binary.NativeEndian.PutUint32(buf[12:], 40)
	binary.NativeEndian.PutUint32(buf[16:], 9000)
	binary.NativeEndian.PutUint32(buf[20:], 4)
	if err := m.Put(uint32(0), buf); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(testutil.Host(t).PinRoot(), "params")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := m.Pin(path); err != nil {
		t.Fatal(err)
	}

	cc, err := Lookup("theta_powertcp")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := cc.load()
	if err != nil {
		t.Fatal(err)
	}
	got, err := carriedParams(cc, path, spec.Maps[mapParams].Value)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"host_bw": 25_000_000_000, "gamma": 58982, "base_rtt": 40, "beta": 9000, "expected_flows": 4}
	if !maps.Equal(got, want) {
		t.Errorf("carried %v, want %v (onramp_holds absent: it starts from its default)", got, want)
	}
}
