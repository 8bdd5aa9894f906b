package deploy

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/pin"
	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/testbed"
)

// testCC is the congestion control the image tests attach.
const testCC = "theta_powertcp"

// nsPrelude starts every script that runs podman: it runs in a mount
// namespace of the test's own (unshare --mount --propagation private), so
// nothing it mounts, and no propagation it changes, reaches the host.
//
// crun refuses to start a container on a host with the hybrid cgroup
// layout whose cgroup2 hierarchy has a controller ("cgroups in hybrid mode
// not supported, drop all controllers from cgroupv2"), as the project's
// machines have (hugetlb). The prelude hides that list from crun, in this
// namespace only; hosts with cgroup v2 alone are left as they are.
const nsPrelude = `
c=/sys/fs/cgroup/unified/cgroup.controllers
if [ -n "$(cat "$c" 2>/dev/null)" ]; then mount --bind /dev/null "$c"; fi
`

// imageEnv is the image under test and what runs it.
type imageEnv struct {
	image string // the image's name
	bin   string // the image's /ccload, copied out to run on the host
	// limits are podman's --ulimit flags. Podman's defaults (1048576 open
	// files and processes) are above the hard limits of the project's
	// machines, which crun may not raise there (no CAP_SYS_RESOURCE). So
	// the container gets this process's own open files, and 4096
	// processes, below the limit podman gives conmon (32768); root is
	// exempt from RLIMIT_NPROC anyway.
	limits []string
}

// newImageEnv builds the image with build-image.sh and copies its binary
// out. It skips unless podman, unshare and root are there.
func newImageEnv(t *testing.T) *imageEnv {
	t.Helper()
	testutil.RequireRoot(t)
	for _, tool := range []string{"podman", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.Skip(t, tool+" is not installed (apt-get install podman util-linux): the image tests build and run the image with it")
		}
	}
	e := &imageEnv{image: fmt.Sprintf("localhost/ccload-test:%d", os.Getpid())}
	var files unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &files); err != nil {
		t.Fatal(err)
	}
	e.limits = []string{"--ulimit", fmt.Sprintf("nofile=%d:%d", files.Cur, files.Max), "--ulimit", "nproc=4096:4096"}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t.Cleanup(func() { podman(t, "rmi", "--force", e.image) })
	start := time.Now()
	cmd := exec.CommandContext(ctx, "./build-image.sh", e.image)
	cmd.Env = append(os.Environ(), "GO="+filepath.Join(runtime.GOROOT(), "bin", "go"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build-image.sh %s: %v\n%s", e.image, err, out)
	}
	t.Logf("built %s in %v (the binary and the image)", e.image, time.Since(start).Round(time.Millisecond))
	out := podman(t, "image", "inspect", "--format", "{{.Size}} {{len .RootFS.Layers}}", e.image)
	var size, layers int64
	if _, err := fmt.Sscan(out, &size, &layers); err != nil {
		t.Fatalf("podman image inspect: %q: %v", out, err)
	}
	t.Logf("image size %.1f MB in %d layer(s)", float64(size)/1e6, layers)
	if layers != 1 {
		t.Errorf("the image has %d layers, want 1: FROM scratch and the binary", layers)
	}

	// The binary, as the image holds it, for the host side of the tests.
	name := fmt.Sprintf("ccload-test-%d-copy", os.Getpid())
	podman(t, "create", "--name", name, e.image)
	e.bin = filepath.Join(t.TempDir(), "ccload")
	podman(t, "cp", name+":/ccload", e.bin)
	podman(t, "rm", name)
	return e
}

// podman runs podman on the host and returns its output; a failure fails t.
func podman(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "podman", args...).CombinedOutput()
	if err != nil {
		t.Errorf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// script returns the command that runs a shell script in a mount
// namespace of its own, after nsPrelude, with args as $1, $2, ...
func script(ctx context.Context, body string, args ...string) *exec.Cmd {
	argv := append([]string{"--mount", "--propagation", "private", "sh", "-euc", nsPrelude + body, "sh"}, args...)
	return exec.CommandContext(ctx, "unshare", argv...)
}

// run runs the image with podman, with flags and then the image's args,
// and returns its exit code, stdout and stderr.
func (e *imageEnv) run(t *testing.T, flags []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := append(append(append([]string{"run", "--rm"}, e.limits...), flags...), e.image)
	cmd := script(ctx, `exec podman "$@"`, append(argv, args...)...)
	var o, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &se
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("podman run %s: %v", strings.Join(args, " "), err)
	}
	return code, o.String(), se.String()
}

// asTheDaemonSet are the podman flags that run a container the way
// deploy/kubernetes/daemonset.yaml does: privileged, in the host's
// network namespace, with the host's bpffs and cgroup hierarchy.
var asTheDaemonSet = []string{"--privileged", "--network", "host",
	"-v", "/sys/fs/bpf:/sys/fs/bpf", "-v", "/sys/fs/cgroup:/sys/fs/cgroup"}

// pinBase makes a directory of the test's own in the host's bpffs, to
// pass as --bpffs: pins go to <it>/ccload, apart from a user's. When t
// ends, the image's binary removes everything ccload pinned there
// (`ccload reset`), and the directory goes.
func (e *imageEnv) pinBase(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("ccload-image-test-%d-%s", os.Getpid(), name))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(e.bin, "--bpffs", dir, "reset").CombinedOutput(); err != nil {
			t.Errorf("ccload --bpffs %s reset: %v\n%s", dir, err, out)
			if out, err := exec.Command(e.bin, "--bpffs", dir, "detach", testCC).CombinedOutput(); err != nil {
				t.Errorf("ccload --bpffs %s detach %s: %v\n%s", dir, testCC, err, out)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	return dir
}

// checkPinned checks that cc is registered in the kernel and pinned under
// base's pin root, as the host sees it.
func checkPinned(t *testing.T, base, cc string) {
	t.Helper()
	if !testutil.Registered(t, cc) {
		t.Errorf("%s is not registered once the container is gone", cc)
	}
	link := filepath.Join(base, "ccload", cc, "link")
	if _, err := os.Stat(link); err != nil {
		t.Errorf("the host's bpffs has no %s once the container is gone: %v", link, err)
	}
}

func TestImage(t *testing.T) {
	e := newImageEnv(t)

	t.Run("StaticFromScratch", func(t *testing.T) {
		f, err := elf.Open(e.bin)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("the image's /ccload asks for a dynamic loader: it cannot run FROM scratch")
			}
		}
		if libs, err := f.ImportedLibraries(); err != nil || len(libs) != 0 {
			t.Errorf("the image's /ccload needs shared libraries %v (%v)", libs, err)
		}
		code, out, stderr := e.run(t, nil, "version")
		if code != 0 || !strings.HasPrefix(out, "ccload ") {
			t.Errorf("ccload version in the image: exit %d, %q %q", code, out, stderr)
		}
		// Everything it reads comes from the runtime: /proc, /sys.
		code, out, stderr = e.run(t, asTheDaemonSet, "status")
		if code != 0 {
			t.Errorf("ccload status in the image, run as the DaemonSet runs it: exit %d\n%s%s", code, out, stderr)
		}
	})

	t.Run("AttachPinsOnTheHost", func(t *testing.T) {
		testutil.RequireKernelCC(t, testCC)
		base := e.pinBase(t, "attach")
		name := fmt.Sprintf("ccload-test-%d-attach", os.Getpid())
		code, out, stderr := e.run(t, append([]string{"--name", name}, asTheDaemonSet...),
			"--bpffs", base, "attach", testCC, "--param", "base_rtt=20us")
		if code != 0 {
			t.Fatalf("ccload attach in the image: exit %d\n%s%s", code, out, stderr)
		}
		if got := podman(t, "ps", "--all", "--quiet", "--filter", "name=^"+name+"$"); got != "" {
			t.Fatalf("container %s is still there (%s) after podman run --rm", name, got)
		}
		checkPinned(t, base, testCC)
		checkFlows(t, testCC)
	})

	t.Run("LockSharedWithTheHost", func(t *testing.T) {
		// The host holds ccload's lock on the pin root, as a CLI
		// command on the host would; the same command in the container,
		// whose mount and PID namespaces differ, must wait for it and
		// give up after --lock-wait, leaving nothing behind.
		testutil.RequireKernelCC(t, testCC)
		base := e.pinBase(t, "lock")
		lock, err := pin.AcquireLock(filepath.Join(base, "ccload"), 0)
		if err != nil {
			t.Fatal(err)
		}
		code, out, stderr := e.run(t, asTheDaemonSet, "--bpffs", base, "--lock-wait", "1s", "attach", testCC)
		lock.Release()
		if code == 0 || !strings.Contains(stderr, "held the lock") {
			t.Fatalf("attach in the container while the host holds the lock: exit %d\n%s%s", code, out, stderr)
		}
		if testutil.Registered(t, testCC) {
			t.Fatalf("the container attached %s while the host held the lock", testCC)
		}
		// Released, the container's command goes through.
		if code, out, stderr := e.run(t, asTheDaemonSet, "--bpffs", base, "attach", testCC); code != 0 {
			t.Fatalf("attach in the container once the lock is free: exit %d\n%s%s", code, out, stderr)
		}
		checkPinned(t, base, testCC)
	})

	t.Run("DaemonLeavesItsPins", func(t *testing.T) {
		testutil.RequireKernelCC(t, testCC)
		base := e.pinBase(t, "daemon")
		cfg := t.TempDir()
		if err := os.WriteFile(filepath.Join(cfg, "config.yaml"),
			[]byte("ccs:\n  - name: "+testCC+"\n    params:\n      base_rtt: 20us\nreconcile-interval: 5s\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		port := freePort(t)
		name := fmt.Sprintf("ccload-test-%d-daemon", os.Getpid())
		t.Cleanup(func() { exec.Command("podman", "rm", "--force", "--ignore", name).Run() })

		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		argv := append(append([]string{"run", "--rm", "--name", name}, e.limits...), asTheDaemonSet...)
		argv = append(argv, "-v", cfg+":/etc/ccload:ro", e.image, "--bpffs", base,
			"daemon", "--config", "/etc/ccload/config.yaml", "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port))
		cmd := script(ctx, `exec podman "$@"`, argv...)
		var out testutil.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// exited is closed when podman run returns, with its error in
		// runErr.
		exited := make(chan struct{})
		var runErr error
		go func() { runErr = cmd.Wait(); close(exited) }()

		baseURL := fmt.Sprintf("http://127.0.0.1:%d", port)
		if err := waitReady(baseURL+"/readyz", exited, time.Minute); err != nil {
			exec.Command("podman", "stop", "--time", "5", name).Run()
			select {
			case <-exited:
				t.Fatalf("the daemon in the image: %v (podman run: %v)\n%s", err, runErr, out.String())
			case <-time.After(time.Minute):
				t.Fatalf("the daemon in the image: %v (and podman run still runs)\n%s", err, out.String())
			}
		}
		metrics := httpGet(t, baseURL+"/metrics")
		if !strings.Contains(metrics, "ccload_reconcile_runs_total") {
			t.Errorf("/metrics has no ccload_reconcile_runs_total:\n%s", metrics)
		}
		// Stop it as the kubelet does: SIGTERM, then the grace period.
		if got := podman(t, "stop", "--time", "20", name); got != name {
			t.Errorf("podman stop %s: %q", name, got)
		}
		select {
		case <-exited:
			if runErr != nil {
				t.Errorf("podman run of the daemon: %v\n%s", runErr, out.String())
			}
		case <-time.After(time.Minute):
			t.Fatalf("podman run of the daemon has not returned a minute after podman stop\n%s", out.String())
		}
		t.Logf("the daemon's output:\n%s", out.String())
		checkPinned(t, base, testCC)
		checkFlows(t, testCC)
	})

	t.Run("RefusesAPrivateBPFFS", func(t *testing.T) {
		testutil.RequireKernelCC(t, testCC)
		hostDir := t.TempDir()
		tests := []struct {
			name  string
			flags []string
		}{
			// A network namespace of its own gets a fresh sysfs, whose
			// /sys/fs/bpf is an empty directory: a pod without the
			// hostPath volume.
			{"no bind mount", []string{"--privileged"}},
			{"host network, a tmpfs over /sys/fs/bpf", []string{"--privileged", "--network", "host", "--tmpfs", "/sys/fs/bpf"}},
			// A host directory bound without propagation: a mount on it
			// would stay in the container.
			{"a private bind of a host directory", []string{"--privileged", "--network", "host", "-v", hostDir + ":/sys/fs/bpf"}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				code, out, stderr := e.run(t, tt.flags, "attach", testCC)
				if code != 1 {
					t.Errorf("ccload attach exited %d, want 1\n%s%s", code, out, stderr)
				}
				for _, want := range []string{
					"/sys/fs/bpf in this container is not the host's bpffs: pins would die with the container",
					"fix: mount the host's /sys/fs/bpf into the container: -v /sys/fs/bpf:/sys/fs/bpf, or a hostPath volume with Bidirectional propagation in Kubernetes",
				} {
					if !strings.Contains(stderr, want) {
						t.Errorf("stderr does not say %q:\n%s", want, stderr)
					}
				}
				if testutil.Registered(t, testCC) {
					t.Errorf("%s is registered after the refusal", testCC)
				}
			})
		}
	})

	// A host directory with Bidirectional propagation, which the
	// DaemonSet asks for: the bpffs ccload mounts there in the container
	// propagates back to the host's side, and the pins outlive the
	// container. The host's mounts are private, so the shared mount is
	// made in the test's own mount namespace, which stands for the host.
	t.Run("BidirectionalMountReachesTheHost", func(t *testing.T) {
		testutil.RequireKernelCC(t, testCC)
		hostDir := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		body := `
dir=$1 bin=$2; shift 2
mount --make-rshared /
mount --bind "$dir" "$dir"
podman "$@" -v "$dir:/sys/fs/bpf:rshared" -v /sys/fs/cgroup:/sys/fs/cgroup "$IMAGE" attach ` + testCC + `
echo "fs: $(stat -f -c %T "$dir")"
ls "$dir/ccload/` + testCC + `/link" && echo "pinned"
echo "registered: $(cat /proc/sys/net/ipv4/tcp_available_congestion_control)"
"$bin" --bpffs "$dir" detach ` + testCC + `
`
		argv := append(append([]string{hostDir, e.bin, "run", "--rm"}, e.limits...), "--privileged", "--network", "host")
		cmd := script(ctx, body, argv...)
		cmd.Env = append(os.Environ(), "IMAGE="+e.image)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the container with a Bidirectional /sys/fs/bpf: %v\n%s", err, out)
		}
		for _, want := range []string{"note: mounted bpffs at /sys/fs/bpf", "fs: bpf_fs", "pinned", "detached " + testCC} {
			if !bytes.Contains(out, []byte(want)) {
				t.Errorf("output does not say %q:\n%s", want, out)
			}
		}
		if !strings.Contains(registeredLine(out), testCC) {
			t.Errorf("%s was not registered after the container exited:\n%s", testCC, out)
		}
		if testutil.Registered(t, testCC) {
			t.Errorf("%s is still registered after detach (and the end of the mount namespace)", testCC)
		}
	})
}

// registeredLine returns the "registered: ..." line of the script's output.
func registeredLine(out []byte) string {
	for line := range strings.SplitSeq(string(out), "\n") {
		if strings.HasPrefix(line, "registered: ") {
			return line
		}
	}
	return ""
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// waitReady polls url until it answers 200, exited is closed, or limit
// passes.
func waitReady(url string, exited <-chan struct{}, limit time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(limit)
	last := "no answer"
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("exited before it was ready; last %s", last)
		case <-time.After(250 * time.Millisecond):
		}
		resp, err := client.Get(url)
		if err != nil {
			last = err.Error()
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return fmt.Errorf("%s is not ready after %v; last %s", url, limit, last)
}

// httpGet returns the body of url.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d, %v", url, resp.StatusCode, err)
	}
	return string(body)
}

// checkFlows checks that TCP flows on the host select cc: one over the
// host's loopback with setsockopt(TCP_CONGESTION), as an application
// does, and one between two network namespaces whose default CC is set
// by sysctl, as a pod with net.ipv4.tcp_congestion_control in its
// securityContext gets it.
func checkFlows(t *testing.T, cc string) {
	t.Helper()
	if got, err := loopbackFlow(cc, 1<<20); err != nil {
		t.Errorf("a loopback flow with TCP_CONGESTION %s: %v", cc, err)
	} else if got != cc {
		t.Errorf("a loopback flow asked for %s and runs %s", cc, got)
	} else {
		t.Logf("a loopback flow selected %s with setsockopt and sent 1 MiB", got)
	}

	p := testnet.NewPair(t)
	for _, h := range []*testbed.Host{p.A, p.B} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := h.Command(ctx, "sysctl", "-w", "net.ipv4.tcp_congestion_control="+cc).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("sysctl net.ipv4.tcp_congestion_control=%s in %s: %v: %s", cc, h.Name, err, out)
		}
	}
	sink := testnet.StartSink(t, p.B, p.B.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := testbed.SendFlow(ctx, p.A, netip.AddrPortFrom(p.B.Addr, sink.Addr.Port()),
		testbed.FlowConfig{Bytes: 1 << 20, Seed: 15, Timeout: 25 * time.Second})
	if err != nil {
		t.Fatalf("a flow between netns whose default is %s: %v", cc, err)
	}
	if res.CC != cc {
		t.Errorf("a flow in a netns whose default is %s runs %s", cc, res.CC)
	} else {
		t.Logf("a flow between netns %s and %s ran %s, their default by sysctl, and sent %d bytes", p.A.Name, p.B.Name, res.CC, res.Bytes)
	}
	sink.Close() // its sockets hold the CC until they close
}

// loopbackFlow sends n bytes over the host's loopback on a socket that
// selects cc with setsockopt, and returns the CC the socket runs at the
// end.
func loopbackFlow(cc string, n int) (string, error) {
	setCC := testbed.SetCC(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ln, err := (&net.ListenConfig{Control: setCC}).Listen(ctx, "tcp4", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	received := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			received <- -1
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(15 * time.Second))
		got, _ := io.Copy(io.Discard, c)
		received <- got
	}()
	c, err := (&net.Dialer{Control: setCC}).DialContext(ctx, "tcp4", ln.Addr().String())
	if err != nil {
		return "", fmt.Errorf("dial: %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := c.Write(make([]byte, n)); err != nil {
		return "", fmt.Errorf("write: %w", err)
	}
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return "", err
	}
	var got string
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		got, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	}); err != nil || gerr != nil {
		return "", fmt.Errorf("getsockopt TCP_CONGESTION: %v %v", err, gerr)
	}
	c.(*net.TCPConn).CloseWrite()
	select {
	case r := <-received:
		if r != int64(n) {
			return got, fmt.Errorf("the receiver got %d bytes of %d", r, n)
		}
	case <-ctx.Done():
		return got, ctx.Err()
	}
	return got, nil
}
