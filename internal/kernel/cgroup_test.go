package kernel

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestCgroupPath(t *testing.T) {
	root, err := Cgroup2Root()
	if err != nil {
		t.Skipf("no cgroup v2 hierarchy here: %v", err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(root, &fs); err != nil || fs.Type != unix.CGROUP2_SUPER_MAGIC {
		t.Fatalf("Cgroup2Root() = %s, which is not a cgroup2 mount (statfs: %v)", root, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(root, &st); err != nil {
		t.Fatal(err)
	}
	if got := CgroupPath(st.Ino); got != root {
		t.Errorf("CgroupPath(%d) = %s, want the root %s", st.Ino, got, root)
	}
	// A cgroup of its own, where this process may make one.
	dir := filepath.Join(root, fmt.Sprintf("ccload-test-cgroup-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Logf("cannot make a cgroup to look for: %v", err)
	} else {
		defer os.Remove(dir)
		if err := unix.Stat(dir, &st); err != nil {
			t.Fatal(err)
		}
		if got := CgroupPath(st.Ino); got != dir {
			t.Errorf("CgroupPath(%d) = %s, want %s", st.Ino, got, dir)
		}
	}
	if got, want := CgroupPath(math.MaxUint64), "cgroup id 18446744073709551615"; got != want {
		t.Errorf("CgroupPath of no cgroup = %q, want %q", got, want)
	}
}
