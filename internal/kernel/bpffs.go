package kernel

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// IsBPFFS reports whether path is on a bpf filesystem.
func IsBPFFS(path string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false, err
	}
	return uint32(st.Type) == unix.BPF_FS_MAGIC, nil
}

// CheckBPFFS reports whether pins can go under path. When canMount is
// true a missing mount is not an error, attach mounts it, unless this
// process runs in a container (InContainer): a bpffs mounted there would
// be the container's own, and every pin in it would die with the
// container, so CheckBPFFS refuses instead. A mount point that is shared
// (a Kubernetes hostPath with Bidirectional propagation) is let through,
// because a mount made on it propagates to the host.
func CheckBPFFS(path string, canMount bool) error {
	ok, err := IsBPFFS(path)
	if err == nil && ok {
		return nil
	}
	if canMount && (err == nil || errors.Is(err, os.ErrNotExist)) {
		signal, in := InContainer()
		if !in {
			return nil
		}
		// Unreadable, it shows no mount to be shared.
		mountinfo, _ := os.ReadFile("/proc/self/mountinfo")
		return containerMountError(path, signal, in, mountinfo)
	}
	fix := fmt.Sprintf("mount it: mount -t bpf bpf %s (in Kubernetes, mount the host's /sys/fs/bpf into the pod)", path)
	if err != nil {
		return NewError(KindNoBPFFS, fix, err, "%s is not usable for BPF pins", path)
	}
	return NewError(KindNoBPFFS, fix, nil, "%s is not a bpf filesystem", path)
}

// EnsureBPFFS makes sure path is a mounted bpffs, mounting it when it is
// the system default location (and CheckBPFFS allows it: not in a
// container). It returns true when it mounted it.
func EnsureBPFFS(path string, canMount bool) (bool, error) {
	if ok, err := IsBPFFS(path); err == nil && ok {
		return false, nil
	}
	if err := CheckBPFFS(path, canMount); err != nil {
		return false, err
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		return false, NewError(KindNoBPFFS, "mount -t bpf bpf "+path, err, "create %s", path)
	}
	if err := unix.Mount("bpf", path, "bpf", 0, "mode=0700"); err != nil {
		return false, NewError(KindNoBPFFS, "mount -t bpf bpf "+path, err, "mount bpffs at %s", path)
	}
	return true, nil
}
