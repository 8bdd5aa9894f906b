package loader

// Tests of upgrades in place (attach --replace): they load two builds of
// theta_powertcp into the running kernel, the shipped one and one with
// ccload_build = upgradeBuild, and swap the second in for the first while
// sockets over loopback use it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/testbed"
)

const (
	upgradeCC    = "theta_powertcp"
	upgradeBuild = 7 // ccload_build of the build the tests upgrade to
)

// sink accepts connections on loopback and reads each to EOF.
type sink struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	bytes int64
}

func newSink(t *testing.T) *sink {
	t.Helper()
	// The listener runs cubic, and so do the sockets it accepts: only the
	// dialling ends run the CC under test.
	lc := net.ListenConfig{Control: testbed.SetCC("cubic")}
	ln, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for range 1 << 12 {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				c.SetReadDeadline(time.Now().Add(time.Minute))
				n, _ := io.Copy(io.Discard, c)
				s.mu.Lock()
				s.bytes += n
				s.mu.Unlock()
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

// dial connects to s, selecting cc by setsockopt, or taking the netns
// default when cc is "".
func (s *sink) dial(t *testing.T, cc string) *net.TCPConn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, Control: testbed.SetCC(cc)}
	c, err := d.Dial("tcp4", s.ln.Addr().String())
	if err != nil {
		t.Fatalf("dial with cc %q: %v", cc, err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

func connCC(t *testing.T, c *net.TCPConn) string {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var name string
	var gerr error
	raw.Control(func(fd uintptr) { name, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION) })
	if gerr != nil {
		t.Fatal(gerr)
	}
	return strings.TrimRight(name, "\x00")
}

func send(t *testing.T, c *net.TCPConn, n int) {
	t.Helper()
	c.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(make([]byte, n)); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// presence polls tcp_available_congestion_control for name until stopped,
// and measures how long name was missing.
type presence struct {
	stop    chan struct{}
	done    chan struct{}
	reads   int
	missing int           // reads that lacked the name
	gap     time.Duration // the longest run of such reads, first to first read with the name
	// badDefault counts reads at which the name was missing and yet the
	// netns default named it.
	badDefault int
}

func watchPresence(name string) *presence {
	p := &presence{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		var since time.Time
		for p.reads < 1<<22 {
			select {
			case <-p.stop:
				return
			default:
			}
			p.reads++
			avail, err := kernel.ReadSysctl("/proc/sys", sysctlAvailable)
			if err != nil {
				continue
			}
			if slices.Contains(strings.Fields(avail), name) {
				if !since.IsZero() {
					p.gap = max(p.gap, time.Since(since))
					since = time.Time{}
				}
				continue
			}
			p.missing++
			if since.IsZero() {
				since = time.Now()
			}
			// Bad only if the name is still missing after the default
			// was read: the two reads are not one.
			if def, err := kernel.ReadSysctl("/proc/sys", sysctlDefault); err == nil && def == name {
				if again, err := kernel.ReadSysctl("/proc/sys", sysctlAvailable); err == nil && !slices.Contains(strings.Fields(again), name) {
					p.badDefault++
				}
			}
		}
	}()
	return p
}

func (p *presence) end() { close(p.stop); <-p.done }

// generation returns the generation n of cc in l's list.
func generation(t *testing.T, l *Loader, n uint32) (GenerationStatus, CCStatus) {
	t.Helper()
	list, err := l.List()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(list, func(s CCStatus) bool { return s.Name == upgradeCC })
	if i < 0 || !list[i].Attached {
		t.Fatalf("%s not attached: %+v", upgradeCC, list)
	}
	for _, g := range list[i].Generations {
		if g.Generation == n {
			return g, list[i]
		}
	}
	return GenerationStatus{}, list[i]
}

// TestUpgradeInPlace swaps a build with another ccload_build in for the
// attached theta_powertcp while sockets use it, in each registration mode
// the kernel has (legacy on every kernel): the name stays registered with
// links (and the gap is measured without), live sockets keep working on
// the old generation, new ones get the new build whether they ask by
// setsockopt or by the netns default, list shows both generations, and
// the old one's pins go once its sockets close.
func TestUpgradeInPlace(t *testing.T) {
	for _, reg := range testutil.Registrations(t) {
		t.Run(string(reg), func(t *testing.T) {
			testutil.RequireKernelCC(t, upgradeCC)
			prev, err := kernel.ReadSysctl("/proc/sys", sysctlDefault)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { kernel.WriteSysctl("/proc/sys", sysctlDefault, prev) })
			s := newSink(t)
			l := newTestLoader(testutil.Host(t), WithRegistration(reg))
			attachForTest(t, l, AttachRequest{Name: upgradeCC, SetDefault: true, Params: map[string]string{"gamma": "0.8"}})

			var old []*net.TCPConn
			for range 3 {
				c := s.dial(t, upgradeCC)
				send(t, c, 64<<10)
				old = append(old, c)
			}
			byDefault := s.dial(t, "")
			send(t, byDefault, 64<<10)
			if got := connCC(t, byDefault); got != upgradeCC {
				t.Fatalf("a socket that takes the default runs %q", got)
			}
			g1, _ := generation(t, l, 1)
			if g1.SocketsInUse != 4 || g1.Stats["build_inits"] != 0 {
				t.Fatalf("generation 1 before the upgrade: %+v", g1)
			}

			up := l.With(WithBuildVersion(upgradeBuild))
			watch := watchPresence(upgradeCC)
			res, err := up.Attach(AttachRequest{Name: upgradeCC, Replace: true})
			watch.end()
			if err != nil {
				t.Fatalf("attach --replace: %v (fix: %s)", err, kernel.FixOf(err))
			}
			u := res.Upgrade
			t.Logf("upgrade: %+v", u)
			t.Logf("%s missing at %d of %d reads of tcp_available_congestion_control, for at most %v; the loader's gap: %v",
				upgradeCC, watch.missing, watch.reads, watch.gap, u.Gap)
			if u == nil || !u.Upgraded || u.FromGeneration != 1 || u.Generation != 2 || u.To.Build != upgradeBuild || u.From.Build != 0 || u.OldSockets != 4 {
				t.Fatalf("upgrade result %+v", u)
			}
			if watch.badDefault > 0 {
				t.Errorf("the default named %s at %d reads while it was missing", upgradeCC, watch.badDefault)
			}
			switch reg {
			case kernel.RegLink:
				if watch.missing > 0 || u.Gap != 0 {
					t.Errorf("%s was missing at %d reads with a link update", upgradeCC, watch.missing)
				}
			case kernel.RegLegacy:
				if u.Gap <= 0 || u.DefaultFallback == "" {
					t.Errorf("legacy swap: gap %v, default fallback %q", u.Gap, u.DefaultFallback)
				}
			}
			if def, _ := kernel.ReadSysctl("/proc/sys", sysctlDefault); def != upgradeCC {
				t.Errorf("the default is %q after the upgrade", def)
			}
			if !testutil.Registered(t, upgradeCC) {
				t.Fatal("not registered after the upgrade")
			}

			// New sockets get the new build, by setsockopt and by the
			// default; the old ones keep working on the old build.
			for range 2 {
				send(t, s.dial(t, upgradeCC), 64<<10)
			}
			send(t, s.dial(t, ""), 64<<10)
			for _, c := range append(old, byDefault) {
				send(t, c, 256<<10)
				if got := connCC(t, c); got != upgradeCC {
					t.Errorf("a live socket runs %q after the upgrade", got)
				}
			}
			g2, st := generation(t, l, 2)
			g1, _ = generation(t, l, 1)
			if !g2.Current || g2.Object.Build != upgradeBuild || g2.Stats["sock_init"] != 3 || g2.Stats["build_inits"] != 3 {
				t.Errorf("generation 2: %+v", g2)
			}
			if g1.Current || g1.SocketsInUse != 4 || g1.Stats["build_inits"] != 0 || g1.Stats["acks"] == 0 {
				t.Errorf("generation 1: %+v", g1)
			}
			if st.Generation != 2 || st.SocketsInUse != 7 || st.Params["gamma"] != "0.8" || !st.UpgradeAvailable {
				t.Errorf("list (by a loader of the shipped build): %+v", st)
			}
			if need, err := up.NeedsUpgrade(upgradeCC); err != nil || need {
				t.Errorf("NeedsUpgrade by the new build = %v, %v", need, err)
			}
			if need, err := l.NeedsUpgrade(upgradeCC); err != nil || !need {
				t.Errorf("NeedsUpgrade by the shipped build = %v, %v", need, err)
			}

			// The same object again: a no-op that says so.
			again, err := up.Attach(AttachRequest{Name: upgradeCC, Replace: true})
			if err != nil || again.Upgrade == nil || again.Upgrade.Upgraded || again.Generation != 2 || again.Upgrade.To != again.Object {
				t.Fatalf("second attach --replace: %+v, %v", again, err)
			}

			// Once the old sockets close, the old generation goes.
			for _, c := range append(old, byDefault) {
				c.Close()
			}
			oldDir := filepath.Join(l.PinDir(upgradeCC), dirGen, "1")
			if !kernel.Exists(filepath.Join(oldDir, mapStats)) {
				t.Fatalf("no counters of generation 1 at %s", oldDir)
			}
			deadline := time.Now().Add(10 * time.Second)
			for kernel.Exists(oldDir) && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
				up.PruneGenerations()
			}
			if kernel.Exists(oldDir) {
				g1, _ = generation(t, l, 1)
				t.Fatalf("generation 1's pins are left after its sockets closed: %+v", g1)
			}
			if _, st := generation(t, l, 2); len(st.Generations) != 1 {
				t.Errorf("generations after the old one finished: %+v", st.Generations)
			}
		})
	}
}

// TestUpgradeOtherNetnsDefault checks that a network namespace other than
// the loader's whose default names the CC gets the new build for its new
// sockets after a link upgrade: ccload writes its sysctl again.
func TestUpgradeOtherNetnsDefault(t *testing.T) {
	testutil.RequireKernelCC(t, upgradeCC)
	l := newTestLoader(testutil.Host(t))
	attachForTest(t, l, AttachRequest{Name: upgradeCC})
	// A namespace of testnet's: `ip netns add` is not in the guests'
	// busybox.
	ns := testnet.NewPair(t).A
	inNetns(t, ns, func() {
		if err := kernel.WriteSysctl("/proc/sys", sysctlDefault, upgradeCC); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := l.With(WithBuildVersion(upgradeBuild)).Attach(AttachRequest{Name: upgradeCC, Replace: true}); err != nil {
		t.Fatal(err)
	}
	inNetns(t, ns, func() {
		if def, _ := kernel.ReadSysctl("/proc/sys", sysctlDefault); def != upgradeCC {
			t.Errorf("the other netns's default is %q", def)
		}
		// A socket that takes the default: its init runs at connect
		// over the namespace's own loopback.
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		c, err := net.DialTimeout("tcp4", ln.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	})
	g2, _ := generation(t, l, 2)
	if g2.Stats["build_inits"] < 1 {
		t.Errorf("no socket of the other netns got the new build: %+v", g2)
	}
}

// inNetns runs fn on a thread in h's network namespace.
func inNetns(t *testing.T, h *testbed.Host, fn func()) {
	t.Helper()
	if err := h.Do(func() error { fn(); return nil }); err != nil {
		t.Fatal(err)
	}
}

// TestUpgradeWithoutRecord upgrades a pin set made by a ccload that kept
// no generation record: it counts as generation 1 of an unknown object.
func TestUpgradeWithoutRecord(t *testing.T) {
	testutil.RequireKernelCC(t, upgradeCC)
	l := newTestLoader(testutil.Host(t))
	attachForTest(t, l, AttachRequest{Name: upgradeCC})
	// A socket keeps generation 1, and its pins, after the upgrade.
	send(t, newSink(t).dial(t, upgradeCC), 16<<10)
	if err := os.Remove(filepath.Join(l.PinDir(upgradeCC), pinMeta)); err != nil {
		t.Fatal(err)
	}
	_, st := generation(t, l, 1)
	if st.Generation != 1 || st.Object.Hash != "" || !st.UpgradeAvailable {
		t.Fatalf("list without a record: %+v", st)
	}
	res, err := l.Attach(AttachRequest{Name: upgradeCC, Replace: true})
	if err != nil || res.Upgrade == nil || !res.Upgrade.Upgraded || res.Generation != 2 {
		t.Fatalf("upgrade: %+v, %v", res, err)
	}
	rec, err := readMeta(filepath.Join(l.PinDir(upgradeCC), dirGen, "1", pinMeta))
	if err != nil || rec.OpsMapID == 0 {
		t.Fatalf("record of generation 1: %+v, %v", rec, err)
	}
}

// Environment of the test binary when TestUpgradeKilled runs it as an
// upgrader that a kill point stops (see TestMain): the pin root, and the
// registration mode.
const (
	upgradeChildEnv    = "CCLOAD_TEST_UPGRADE_CHILD"
	upgradeChildRegEnv = "CCLOAD_TEST_UPGRADE_REG"
)

// TestMain runs the tests, or, in TestUpgradeKilled's child, the upgrade
// alone.
func TestMain(m *testing.M) {
	if root := os.Getenv(upgradeChildEnv); root != "" {
		h := kernel.DefaultHost()
		h.BPFFS, h.PinDir = filepath.Split(root)
		reg := kernel.Registration(os.Getenv(upgradeChildRegEnv))
		l := newTestLoader(h, WithRegistration(reg), WithBuildVersion(upgradeBuild))
		if _, err := l.Attach(AttachRequest{Name: upgradeCC, Replace: true}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestUpgradeKilled kills an upgrade at each of its kill points, in each
// registration mode, and checks that what the next command's recovery
// sweep (stages, then Loader.Recover) leaves is a complete, registered
// CC of one generation or the other, with the default back.
func TestUpgradeKilled(t *testing.T) {
	points := map[kernel.Registration][]string{
		kernel.RegLink: {"cc-upgrade-loaded", "cc-upgrade-staged", "cc-upgrade-swapped", "cc-upgrade-defaults",
			"cc-upgrade-moved-old-stats", "cc-upgrade-moved-old-meta", "cc-upgrade-committed"},
		kernel.RegLegacy: {"cc-upgrade-loaded", "cc-upgrade-staged", "cc-upgrade-default-fallback", "cc-upgrade-unregistered",
			"cc-upgrade-registered", "cc-upgrade-default-restored", "cc-upgrade-moved-old-stats", "cc-upgrade-moved-old-meta",
			"cc-upgrade-committed"},
	}
	for _, reg := range testutil.Registrations(t) {
		for _, point := range points[reg] {
			t.Run(string(reg)+"/"+point, func(t *testing.T) {
				testutil.RequireKernelCC(t, upgradeCC)
				prev, err := kernel.ReadSysctl("/proc/sys", sysctlDefault)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { kernel.WriteSysctl("/proc/sys", sysctlDefault, prev) })
				h := testutil.Host(t)
				l := newTestLoader(h, WithRegistration(reg))
				attachForTest(t, l, AttachRequest{Name: upgradeCC, SetDefault: true})

				cmd := exec.Command(os.Args[0])
				cmd.Env = append(os.Environ(), upgradeChildEnv+"="+h.PinRoot(), upgradeChildRegEnv+"="+string(reg),
					pin.KillAtEnv+"="+point)
				out, err := cmd.CombinedOutput()
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
					t.Fatalf("the upgrader was not killed at %s: %v\n%s", point, err, out)
				}

				// The next command's sweep.
				if _, err := pin.CleanStale(h.PinRoot(), pin.UnregisterStructOps); err != nil {
					t.Fatal(err)
				}
				notes, err := l.Recover()
				t.Logf("recover: %q", notes)
				if err != nil {
					t.Fatalf("recover: %v", err)
				}

				entries, _ := os.ReadDir(h.PinRoot())
				for _, e := range entries {
					// shared/: the maps upgradeCC shares with On-Ramp.
					if e.Name() != upgradeCC && e.Name() != "int" && e.Name() != "shared" {
						t.Errorf("left in the pin root: %s", e.Name())
					}
				}
				if kernel.Exists(filepath.Join(l.PinDir(upgradeCC), dirNext)) {
					t.Error("next/ is left")
				}
				if !testutil.Registered(t, upgradeCC) {
					t.Fatal("not registered after recovery")
				}
				if def, _ := kernel.ReadSysctl("/proc/sys", sysctlDefault); def != upgradeCC {
					t.Errorf("the default is %q after recovery", def)
				}
				_, st := generation(t, l, 1)
				if st.Generation != 1 && st.Generation != 2 {
					t.Errorf("generation %d after recovery", st.Generation)
				}
				// Usable: a socket gets the CC, and an upgrade finishes.
				send(t, newSink(t).dial(t, upgradeCC), 16<<10)
				up, err := l.With(WithBuildVersion(upgradeBuild)).Attach(AttachRequest{Name: upgradeCC, Replace: true})
				if err != nil {
					t.Fatalf("upgrade after recovery: %v", err)
				}
				if up.Object.Build != upgradeBuild {
					t.Errorf("after recovery and an upgrade: %+v", up)
				}
			})
		}
	}
}

// TestUpgradeEveryCC upgrades each built-in CC, in each registration
// mode: the CCs that read INT take the INT store over, and each CC's
// parameters carry over.
func TestUpgradeEveryCC(t *testing.T) {
	for _, cc := range Builtin() {
		for _, reg := range testutil.Registrations(t) {
			t.Run(cc.Name+"/"+string(reg), func(t *testing.T) {
				testutil.RequireKernelCC(t, cc.Name)
				l := newTestLoader(testutil.Host(t), WithRegistration(reg))
				p := cc.Params[0]
				att := attachForTest(t, l, AttachRequest{Name: cc.Name, Params: map[string]string{p.Name: p.Format(p.Max)}})
				res, err := l.With(WithBuildVersion(upgradeBuild)).Attach(AttachRequest{Name: cc.Name, Replace: true})
				if err != nil {
					t.Fatalf("attach --replace: %v (fix: %s)", err, kernel.FixOf(err))
				}
				if res.Upgrade == nil || !res.Upgrade.Upgraded || res.Generation != 2 || res.Object.Build != upgradeBuild {
					t.Fatalf("upgrade: %+v", res)
				}
				if res.Params[p.Name] != att.Params[p.Name] {
					t.Errorf("%s was %s, is %s after the upgrade", p.Name, att.Params[p.Name], res.Params[p.Name])
				}
				if !testutil.Registered(t, cc.Name) {
					t.Fatal("not registered after the upgrade")
				}
			})
		}
	}
}
