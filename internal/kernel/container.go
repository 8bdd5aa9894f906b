package kernel

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// initPIDNS is how /proc/self/ns/pid reads in the host's PID namespace:
// the kernel gives the initial namespaces fixed inode numbers
// (PROC_PID_INIT_INO, 0xEFFFFFFC, since Linux 3.8).
const initPIDNS = "pid:[4026531836]"

// InContainer reports whether this process runs in a container, or in
// some other mount namespace than the host's, where a file system it
// mounts stays with it; and what showed that, for messages. The signals,
// in the order they are tried:
//
//   - A PID namespace other than the host's (/proc/self/ns/pid is not
//     the initial one). Every container runtime makes one unless told
//     to share the host's (hostPID, --pid=host), and a process cannot
//     fake it, so it is the signal to trust.
//   - A mount namespace other than PID 1's, where /proc/1/ns/mnt can be
//     read: a hostPID container, or `ip netns exec`, `unshare -m` or a
//     systemd unit's private mounts.
//   - Markers that runtimes leave: /run/.containerenv (podman, CRI-O),
//     the variable "container" (podman, systemd-nspawn, LXC), and
//     KUBERNETES_SERVICE_HOST (set in every Kubernetes pod).
//
// /.dockerenv is not a signal: images made from a Docker container keep
// it once they boot as machines of their own (some of the project's own
// machines have one in their host namespaces). Nor is /proc/1/cgroup,
// which shows "0::/" in every container that has a cgroup namespace.
func InContainer() (signal string, ok bool) {
	return detectContainer("/", os.Getenv)
}

// detectContainer is InContainer reading its files below root and its
// variables with getenv, so that tests can lay them out.
func detectContainer(root string, getenv func(string) string) (string, bool) {
	at := func(p string) string { return filepath.Join(root, p) }
	if ns, err := os.Readlink(at("proc/self/ns/pid")); err == nil && ns != initPIDNS {
		return fmt.Sprintf("its PID namespace %s is not the host's", ns), true
	}
	self, err := os.Readlink(at("proc/self/ns/mnt"))
	if err == nil {
		if init, err := os.Readlink(at("proc/1/ns/mnt")); err == nil && init != self {
			return fmt.Sprintf("its mount namespace %s is not PID 1's (%s)", self, init), true
		}
	}
	if Exists(at("run/.containerenv")) {
		return "/run/.containerenv exists", true
	}
	if v := getenv("container"); v != "" {
		return fmt.Sprintf("container=%s is set", v), true
	}
	if getenv("KUBERNETES_SERVICE_HOST") != "" {
		return "KUBERNETES_SERVICE_HOST is set", true
	}
	return "", false
}

// sharedMount reports whether a mount made at path would propagate to
// the mount's peers, according to mountinfo (the text of
// /proc/self/mountinfo): whether the mount that holds path, the last one
// listed with the longest mount point above it, is shared ("shared:N"). A
// Kubernetes hostPath volume mounted with Bidirectional propagation is,
// and its peer is the host's directory; Docker's and podman's
// `-v SRC:DST:rshared` is too.
func sharedMount(mountinfo []byte, path string) bool {
	path = filepath.Clean(path)
	best, shared := -1, false
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		f := strings.Fields(sc.Text())
		if len(f) < 7 {
			continue
		}
		mp := unescapeMountinfo(f[4])
		if !pathUnder(path, mp) || len(mp) < best {
			continue
		}
		best, shared = len(mp), false
		for _, opt := range f[6:] {
			if opt == "-" {
				break
			}
			if strings.HasPrefix(opt, "shared:") {
				shared = true
			}
		}
	}
	return shared
}

// pathUnder reports whether path is dir or lies below it.
func pathUnder(path, dir string) bool {
	if dir == "/" || path == dir {
		return true
	}
	return strings.HasPrefix(path, dir+"/")
}

// unescapeMountinfo undoes the octal escapes (\040 for a space, \011,
// \012, \134) with which the kernel writes paths in mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// containerMountError is the refusal to mount a bpffs at path in a
// container: signal says why this process is taken to be in one, and
// mountinfo lets a shared mount through, whose new mounts reach the host.
// It returns nil when the mount would outlive this process.
func containerMountError(path, signal string, inContainer bool, mountinfo []byte) error {
	if !inContainer || sharedMount(mountinfo, path) {
		return nil
	}
	return NewError(KindNoBPFFS,
		fmt.Sprintf("mount the host's %s into the container: -v %s:%s, or a hostPath volume with Bidirectional propagation in Kubernetes", path, path, path),
		nil, "%s in this container is not the host's bpffs: pins would die with the container (%s), so ccload mounts none there", path, signal)
}
