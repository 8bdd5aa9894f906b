package e2e

// The tests of issue 15 §8: a long flow and 1000 short connections between
// a netns pair keep running across `ccload attach theta_powertcp
// --replace`, which swaps in a build with another version constant, and
// across a daemon restart into such a build (a DaemonSet roll). No
// connection may notice.

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/telemetry/sockops"
	"github.com/ccload/ccload/testbed"
)

// Bounds and sizes of TestUpgradeUnderTraffic.
const (
	upgradeCC         = "theta_powertcp"
	upgradeBuild      = "7"     // --build-version of the build swapped in
	shortConns        = 1000    // short connections across the upgrade
	shortBytes        = 8 << 10 // payload of each
	shortWorkers      = 4       // short connections open at once
	upgradeAfter      = 250     // short connections done before the upgrade starts; the second half start after it
	longChunk         = 32 << 10
	longPause         = time.Millisecond // between the long flow's chunks: about 250 Mbit/s at most
	longMaxBytes      = 4 << 30
	upgradeTestBudget = 2 * time.Minute
)

// TestUpgradeUnderTraffic runs a long flow and shortConns short
// connections from netns A to netns B, whose CC A's default selects (the
// sysctl, in a netns that is not the loader's), and upgrades the CC with
// the ccload binary while they run. It checks: no resets (nstat's
// TcpExtTCPAbortOn* in both namespaces, and every client's errors), every
// byte intact (the long flow's SHA-256 on both ends; the sink's pattern
// check for the short ones), every short connection ran the CC (no reno
// fallback), both generations listed while the long flow lives, and the
// new generation's counters: the new build counts every socket made after
// the swap, the old one none.
func TestUpgradeUnderTraffic(t *testing.T) {
	underTraffic(t, func(t *testing.T, ctx context.Context, bin string, args []string) *loader.UpgradeResult {
		args = append(args, "attach", upgradeCC, "--replace", "--build-version", upgradeBuild, "--json")
		out, err := exec.CommandContext(ctx, bin, args...).Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("ccload %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
		}
		var res loader.AttachResult
		if err := json.Unmarshal(out, &res); err != nil || res.Upgrade == nil {
			t.Fatalf("attach --replace printed %s (%v)", out, err)
		}
		return res.Upgrade
	})
}

// TestDaemonRestartUnderTraffic is TestUpgradeUnderTraffic with the daemon
// doing the work, as a DaemonSet roll does: a daemon whose config names
// the CC runs while the traffic starts; it is stopped (SIGTERM) and a
// daemon of a newer build starts, adopts the pins and upgrades the CC in
// place.
func TestDaemonRestartUnderTraffic(t *testing.T) {
	underTraffic(t, func(t *testing.T, ctx context.Context, bin string, args []string) *loader.UpgradeResult {
		config := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(config, []byte("ccs:\n  - name: "+upgradeCC+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		daemonArgs := append(slices.Clone(args), "daemon", "--config", config)
		// The old daemon serves /readyz on a port of the kernel's choosing,
		// so that the test knows when its first reconcile is done.
		old := exec.CommandContext(ctx, bin, append(slices.Clone(daemonArgs), "--metrics-addr", "127.0.0.1:0")...)
		var oldLog testutil.Buffer
		old.Stdout, old.Stderr = &oldLog, &oldLog
		if err := old.Start(); err != nil {
			t.Fatal(err)
		}
		// The old daemon adopts what the test attached (the same build),
		// then gets SIGTERM and leaves it pinned. A signal sent before it
		// has set up its handlers would kill it, and a slow guest can take
		// more than a second to get there: wait until it is ready.
		waitDaemonReady(t, ctx, &oldLog)
		if err := old.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		if err := old.Wait(); err != nil {
			t.Fatalf("the old daemon: %v\n%s", err, oldLog.String())
		}
		if strings.Contains(oldLog.String(), "reconcile: attach") || strings.Contains(oldLog.String(), "reconcile: upgrade") {
			t.Errorf("the old daemon changed the CC, which it should have adopted:\n%s", oldLog.String())
		}
		next := exec.CommandContext(ctx, bin, append(daemonArgs, "--metrics-addr", "", "--build-version", upgradeBuild)...)
		var nextLog testutil.Buffer
		next.Stdout, next.Stderr = &nextLog, &nextLog
		if err := next.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = next.Process.Signal(os.Interrupt)
			_ = next.Wait()
		}()
		for i := 0; !strings.Contains(nextLog.String(), "reconcile: upgrade "+upgradeCC); i++ {
			if i > 600 || ctx.Err() != nil {
				t.Fatalf("the new daemon did not upgrade %s within a minute:\n%s", upgradeCC, nextLog.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("the new daemon: %s", strings.TrimSpace(nextLog.String()))
		return nil
	})
}

// waitDaemonReady waits, for a minute at most, until the daemon whose
// output is log serves /readyz and it answers 200: the daemon has set up
// its signal handlers and finished its first reconcile.
func waitDaemonReady(t *testing.T, ctx context.Context, log *testutil.Buffer) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	for i := 0; ; i++ {
		if i > 600 || ctx.Err() != nil {
			t.Fatalf("the daemon was not ready within a minute:\n%s", log.String())
		}
		if _, addr, ok := strings.Cut(log.String(), "/readyz on "); ok {
			addr, _, _ = strings.Cut(addr, "\n")
			resp, err := client.Get("http://" + strings.TrimSpace(addr) + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// underTraffic runs the traffic of TestUpgradeUnderTraffic and calls
// upgrade, which swaps in the build upgradeBuild with the ccload binary
// bin (args are its global flags), once upgradeAfter short connections
// are done. It returns what the upgrade reported, or nil when it has no
// report (the daemon's).
func underTraffic(t *testing.T, upgrade func(t *testing.T, ctx context.Context, bin string, args []string) *loader.UpgradeResult) {
	for _, reg := range testutil.Registrations(t) {
		t.Run(string(reg), func(t *testing.T) {
			testutil.RequireKernelCC(t, upgradeCC)
			bin := ccloadBinary(t)
			ctx, cancel := context.WithTimeout(context.Background(), upgradeTestBudget)
			defer cancel()

			// A pin root of our own that the binary's --bpffs reaches:
			// <bpffs dir>/ccload.
			bpffs := filepath.Join(kernel.DefaultHost().BPFFS, fmt.Sprintf("ccload-test-upgrade-%d", os.Getpid()))
			if err := os.MkdirAll(bpffs, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(bpffs) })
			h := kernel.DefaultHost()
			h.BPFFS = bpffs
			l := loader.New(h, loader.WithSharedMaps(sockops.NewStore(h)), loader.WithRegistration(reg))
			attachForTest(t, l, loader.AttachRequest{Name: upgradeCC})

			p := testnet.NewPair(t)
			netnsSysctl(t, p.A, "net.ipv4.tcp_congestion_control="+upgradeCC)
			sink := testnet.StartSink(t, p.B, p.B.Addr)
			abortsA, abortsB := tcpAborts(t, p.A), tcpAborts(t, p.B)

			long := startLongFlow(t, p.A, p.B)
			if got := socketCC(t, long.conn); got != upgradeCC {
				t.Fatalf("the long flow runs %q, not the default %s", got, upgradeCC)
			}

			// The short connections, shortWorkers at a time.
			var (
				next, done atomic.Int64
				wg         sync.WaitGroup
				mu         sync.Mutex
				failures   []string
				ccs        = map[string]int{}
			)
			upgradeNow, upgraded := make(chan struct{}), make(chan struct{})
			var once sync.Once
			for range shortWorkers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1) - 1
						if i >= shortConns || ctx.Err() != nil {
							return
						}
						if i >= shortConns/2 {
							// The second half opens after the upgrade,
							// however quick the first half was.
							select {
							case <-upgraded:
							case <-ctx.Done():
								return
							}
						}
						res, err := testbed.SendFlow(ctx, p.A, sink.Addr, testbed.FlowConfig{
							Bytes: shortBytes, Seed: uint64(i), Timeout: 20 * time.Second,
						})
						mu.Lock()
						if err != nil {
							failures = append(failures, fmt.Sprintf("connection %d: %v", i, err))
						} else {
							ccs[res.CC]++
						}
						mu.Unlock()
						if done.Add(1) == upgradeAfter {
							once.Do(func() { close(upgradeNow) })
						}
					}
				}()
			}

			select {
			case <-upgradeNow:
			case <-ctx.Done():
				t.Fatalf("only %d short connections in the time allowed", done.Load())
			}
			args := []string{"--bpffs", bpffs}
			if reg == kernel.RegLegacy {
				args = append([]string{"--legacy-registration"}, args...)
			}
			before := done.Load()
			up := upgrade(t, ctx, bin, args)
			during := done.Load() - before
			close(upgraded)
			if up != nil {
				t.Logf("upgrade: generation %d -> %d, gap %v, %d short connections finished during it, notes %q",
					up.FromGeneration, up.Generation, up.Gap, during, up.Notes)
				if !up.Upgraded || up.Generation != up.FromGeneration+1 || strconv.Itoa(int(up.To.Build)) != upgradeBuild {
					t.Fatalf("upgrade result %+v", up)
				}
			} else {
				t.Logf("%d short connections finished during the restart and upgrade", during)
			}

			wg.Wait()
			// While the long flow lives: both generations.
			st := ccStatus(t, l)
			if len(st.Generations) != 2 {
				t.Fatalf("generations while the long flow lives: %+v", st.Generations)
			}
			cur, old := st.Generations[0], st.Generations[1]
			t.Logf("generation %d (current): %d sockets, sock_init %d, build_inits %d; generation %d: %d sockets, sock_init %d, build_inits %d",
				cur.Generation, cur.SocketsInUse, cur.Stats["sock_init"], cur.Stats["build_inits"],
				old.Generation, old.SocketsInUse, old.Stats["sock_init"], old.Stats["build_inits"])
			if !cur.Current || old.Current || old.SocketsInUse < 1 {
				t.Errorf("the old generation has %d sockets while the long flow lives", old.SocketsInUse)
			}
			if old.Stats["build_inits"] != 0 || cur.Stats["build_inits"] == 0 || cur.Stats["build_inits"] != cur.Stats["sock_init"] {
				t.Errorf("build_inits: old %d, new %d of %d", old.Stats["build_inits"], cur.Stats["build_inits"], cur.Stats["sock_init"])
			}
			if n := old.Stats["sock_init"] + cur.Stats["sock_init"]; n != shortConns+1 {
				t.Errorf("%d sockets ran %s, want %d (the long flow and every short connection)", n, upgradeCC, shortConns+1)
			}

			sent, received := long.stop(t)
			if sent.n == 0 || sent != received {
				t.Errorf("long flow: sent %d bytes (%x), received %d (%x)", sent.n, sent.sum[:8], received.n, received.sum[:8])
			}
			t.Logf("long flow: %d bytes intact", sent.n)

			if len(failures) > 0 {
				t.Errorf("%d of %d short connections failed, the first: %s", len(failures), shortConns, failures[0])
			}
			if ccs[upgradeCC] != shortConns {
				t.Errorf("short connections ran %v, want all %d on %s", ccs, shortConns, upgradeCC)
			}
			results, err := sink.WaitResults(ctx, shortConns)
			if err != nil {
				t.Fatalf("sink: %v", err)
			}
			bad := 0
			for _, r := range results {
				if !r.OK || r.Bytes != shortBytes {
					bad++
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d short connections arrived damaged", bad, len(results))
			}
			for _, side := range []struct {
				h      *testbed.Host
				before map[string]int64
			}{{p.A, abortsA}, {p.B, abortsB}} {
				after := tcpAborts(t, side.h)
				for k, v := range after {
					if v != side.before[k] {
						t.Errorf("%s: %s went from %d to %d", side.h.Name, k, side.before[k], v)
					}
				}
			}
		})
	}
}

// ccStatus returns upgradeCC's entry of l.List.
func ccStatus(t *testing.T, l *loader.Loader) loader.CCStatus {
	t.Helper()
	list, err := l.List()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(list, func(s loader.CCStatus) bool { return s.Name == upgradeCC })
	if i < 0 || !list[i].Attached {
		t.Fatalf("%s is not attached: %+v", upgradeCC, list)
	}
	return list[i]
}

// tcpAborts reads the TcpExt TCPAbortOn* counters of h's netns (what
// `nstat -az TcpExtTCPAbortOn*` shows), from /proc/net/netstat.
func tcpAborts(t *testing.T, h *testbed.Host) map[string]int64 {
	t.Helper()
	ext, err := h.Counters("netstat", "TcpExt")
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	for name, n := range ext {
		if strings.HasPrefix(name, "TCPAbortOn") {
			counts["TcpExt"+name] = n
		}
	}
	if len(counts) == 0 {
		t.Fatalf("no TcpExt TCPAbortOn* counters in %s's /proc/net/netstat", h.Name)
	}
	return counts
}

// digest is what one end of the long flow saw: bytes and their SHA-256.
type digest struct {
	n   int64
	sum [sha256.Size]byte
}

// longFlow is a connection from one netns to another that sends
// pseudo-random bytes until stopped, with the CC of the sender's default.
type longFlow struct {
	conn     *net.TCPConn
	quit     chan struct{}
	sent     chan digest
	received chan digest
	errs     chan error
}

func startLongFlow(t *testing.T, from, to *testbed.Host) *longFlow {
	t.Helper()
	f := &longFlow{quit: make(chan struct{}), sent: make(chan digest, 1), received: make(chan digest, 1), errs: make(chan error, 2)}
	var ln net.Listener
	if err := to.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(to.Addr, 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			f.errs <- fmt.Errorf("accept: %w", err)
			f.received <- digest{}
			return
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(upgradeTestBudget))
		h := sha256.New()
		n, err := io.Copy(h, c)
		if err != nil {
			f.errs <- fmt.Errorf("receive: %w", err)
		}
		d := digest{n: n}
		copy(d.sum[:], h.Sum(nil))
		f.received <- d
	}()
	if err := from.Do(func() error {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err == nil {
			f.conn = c.(*net.TCPConn)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.conn.Close() })
	go func() {
		rng := rand.NewChaCha8([32]byte{1, 5})
		buf := make([]byte, longChunk)
		h := sha256.New()
		var n int64
		deadline := time.Now().Add(upgradeTestBudget)
		f.conn.SetWriteDeadline(deadline)
	send:
		for n < longMaxBytes && time.Now().Before(deadline) {
			select {
			case <-f.quit:
				break send
			default:
			}
			rng.Read(buf)
			w, err := f.conn.Write(buf)
			h.Write(buf[:w])
			n += int64(w)
			if err != nil {
				f.errs <- fmt.Errorf("send: %w", err)
				break send
			}
			time.Sleep(longPause)
		}
		if err := f.conn.CloseWrite(); err != nil {
			f.errs <- fmt.Errorf("shut down: %w", err)
		}
		d := digest{n: n}
		copy(d.sum[:], h.Sum(nil))
		f.sent <- d
	}()
	return f
}

// stop ends the long flow and returns what each end saw.
func (f *longFlow) stop(t *testing.T) (sent, received digest) {
	t.Helper()
	close(f.quit)
	sent, received = <-f.sent, <-f.received
	close(f.errs)
	for err := range f.errs {
		t.Errorf("long flow: %v", err)
	}
	return sent, received
}
