package kernel

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Cgroup2Root finds where the cgroup v2 hierarchy is mounted, from
// /proc/self/mountinfo: the first cgroup2 mount, seen from this process's
// mount namespace.
func Cgroup2Root() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ... mountpoint ... - fstype source options
		fields := strings.Fields(sc.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 {
				return fields[4], nil
			}
		}
	}
	return "", errors.New("no cgroup2 file system is mounted")
}

// CgroupPath finds the directory of the cgroup v2 whose id (its inode
// number) is id, below Cgroup2Root, or describes the id ("cgroup id 42")
// when it cannot. It gives up after 100,000 directories.
func CgroupPath(id uint64) string {
	root, err := Cgroup2Root()
	if err != nil {
		return fmt.Sprintf("cgroup id %d", id)
	}
	found, seen := "", 0
	filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if seen++; seen > 100_000 {
			return filepath.SkipAll
		}
		var st unix.Stat_t
		if unix.Stat(path, &st) == nil && st.Ino == id {
			found = path
			return filepath.SkipAll
		}
		return nil
	})
	if found == "" {
		return fmt.Sprintf("cgroup id %d", id)
	}
	return found
}
