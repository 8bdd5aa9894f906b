package kernel

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeRoot lays out the files detectContainer reads below a directory of
// the test's own: links maps paths to symlink targets (the /proc/*/ns
// links read as "pid:[N]"), files lists empty files.
func fakeRoot(t *testing.T, links map[string]string, files ...string) string {
	t.Helper()
	root := t.TempDir()
	for p, target := range links {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range files {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestDetectContainer(t *testing.T) {
	hostNS := map[string]string{
		"proc/self/ns/pid": initPIDNS,
		"proc/self/ns/mnt": "mnt:[4026531832]",
		"proc/1/ns/mnt":    "mnt:[4026531832]",
	}
	with := func(m map[string]string, k, v string) map[string]string {
		out := map[string]string{}
		for a, b := range m {
			out[a] = b
		}
		if v == "" {
			delete(out, k)
		} else {
			out[k] = v
		}
		return out
	}
	tests := []struct {
		name   string
		links  map[string]string
		files  []string
		env    map[string]string
		want   bool
		signal string // a part of the signal
	}{
		{name: "host", links: hostNS},
		{name: "host with a leftover /.dockerenv", links: hostNS, files: []string{".dockerenv"}},
		{name: "host where PID 1's namespaces cannot be read", links: with(hostNS, "proc/1/ns/mnt", "")},
		{name: "PID namespace of its own", links: with(hostNS, "proc/self/ns/pid", "pid:[4026532301]"), want: true, signal: "PID namespace pid:[4026532301]"},
		{name: "mount namespace of its own", links: with(hostNS, "proc/self/ns/mnt", "mnt:[4026532290]"), want: true, signal: "mount namespace mnt:[4026532290] is not PID 1's"},
		{name: "podman or CRI-O", links: hostNS, files: []string{"run/.containerenv"}, want: true, signal: "/run/.containerenv"},
		{name: "systemd's container variable", links: hostNS, env: map[string]string{"container": "podman"}, want: true, signal: "container=podman"},
		{name: "a Kubernetes pod", links: hostNS, env: map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, want: true, signal: "KUBERNETES_SERVICE_HOST"},
		{name: "no /proc: nothing known", links: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fakeRoot(t, tt.links, tt.files...)
			signal, got := detectContainer(root, func(k string) string { return tt.env[k] })
			if got != tt.want || !strings.Contains(signal, tt.signal) {
				t.Errorf("detectContainer = %q, %v; want %v with a signal that says %q", signal, got, tt.want, tt.signal)
			}
		})
	}
}

func TestSharedMount(t *testing.T) {
	// Lines as a container's /proc/self/mountinfo shows them.
	const (
		rootfs   = "600 550 0:52 / / rw,relatime - overlay overlay rw\n"
		sys      = "610 600 0:55 / /sys rw,nosuid - sysfs sysfs rw\n"
		bpfShare = "620 610 0:25 / /sys/fs/bpf rw,relatime shared:12 master:3 - bpf bpf rw,mode=700\n"
		bpfPriv  = "621 610 0:25 / /sys/fs/bpf rw,relatime - bpf bpf rw,mode=700\n"
		dirShare = "622 610 254:1 /var/lib/host/bpf /sys/fs/bpf rw shared:40 - ext4 /dev/vda1 rw\n"
		spaced   = "623 600 254:1 /data /mnt/with\\040space rw shared:41 - ext4 /dev/vda1 rw\n"
		shareAll = "600 550 0:52 / / rw,relatime shared:1 - overlay overlay rw\n"
	)
	tests := []struct {
		name, mountinfo, path string
		want                  bool
	}{
		{"private rootfs, no mount at the path", rootfs + sys, "/sys/fs/bpf", false},
		{"a Bidirectional hostPath at the path", rootfs + sys + dirShare, "/sys/fs/bpf", true},
		{"the path does not exist yet, below a shared mount", rootfs + sys + dirShare, "/sys/fs/bpf/new", true},
		{"a private mount stacked on a shared one", rootfs + sys + dirShare + bpfPriv, "/sys/fs/bpf", false},
		{"a shared mount stacked on a private one", rootfs + sys + bpfPriv + bpfShare, "/sys/fs/bpf", true},
		{"a sibling's prefix is not a parent", rootfs + sys + dirShare, "/sys/fs/bpfx", false},
		{"a shared root, the nearest mount private", shareAll + sys, "/sys/fs/bpf", false},
		{"a shared root holds the path", shareAll, "/sys/fs/bpf", true},
		{"escaped mount point", rootfs + spaced, "/mnt/with space/x", true},
		{"no mountinfo", "", "/sys/fs/bpf", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sharedMount([]byte(tt.mountinfo), tt.path); got != tt.want {
				t.Errorf("sharedMount(%s) = %v, want %v", tt.path, got, tt.want)
			}
		})
	}
}

func TestContainerMountError(t *testing.T) {
	const private = "600 550 0:52 / / rw - overlay overlay rw\n610 600 0:55 / /sys rw - sysfs sysfs rw\n"
	const shared = private + "620 610 254:1 /sys/fs/bpf /sys/fs/bpf rw shared:40 - sysfs sysfs rw\n"
	if err := containerMountError("/sys/fs/bpf", "", false, []byte(private)); err != nil {
		t.Errorf("outside a container: %v, want nil", err)
	}
	if err := containerMountError("/sys/fs/bpf", "/run/.containerenv exists", true, []byte(shared)); err != nil {
		t.Errorf("in a container, on a shared mount: %v, want nil (the mount reaches the host)", err)
	}
	err := containerMountError("/sys/fs/bpf", "/run/.containerenv exists", true, []byte(private))
	if !IsKind(err, KindNoBPFFS) {
		t.Fatalf("in a container, on a private mount: %v, want a %v error", err, KindNoBPFFS)
	}
	for _, want := range []string{"/sys/fs/bpf in this container is not the host's bpffs: pins would die with the container", "/run/.containerenv exists"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	for _, want := range []string{"-v /sys/fs/bpf:/sys/fs/bpf", "hostPath volume with Bidirectional propagation"} {
		if !strings.Contains(FixOf(err), want) {
			t.Errorf("fix %q does not say %q", FixOf(err), want)
		}
	}
}
