package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// hostTool is a program vmtests runs on the host and where it comes from:
// a Debian bookworm package (pkg), or, when no package fits, how else to
// get it (other).
type hostTool struct {
	name  string // what vmtests executes, found on PATH
	pkg   string // the Debian package that installs it; empty if none fits
	other string // how to install it when pkg is empty
}

// source says where t comes from, for the error that names it.
func (t hostTool) source() string {
	if t.pkg != "" {
		return "Debian package " + t.pkg
	}
	return t.other
}

// hostTools returns the programs vmtests runs on the host, in the order it
// first needs them: apt-cache, apt-get and dpkg-deb find, fetch and unpack
// the kernels (kernel.go), depmod indexes their modules, go builds the
// guest's binaries, xz decompresses modules, busybox, find and cpio make
// the initramfs (initramfs.go), and QEMU boots it (qemu.go). Programs the
// guest runs (busybox's insmod, sysctl, ...) are not here: the initramfs
// carries them. The packages are those `dpkg -S` names on Debian bookworm.
func hostTools() []hostTool {
	return []hostTool{
		{name: "apt-cache", pkg: "apt"},
		{name: "apt-get", pkg: "apt"},
		{name: "dpkg-deb", pkg: "dpkg"},
		{name: "depmod", pkg: "kmod"},
		// go.mod needs a newer Go than bookworm's golang-go.
		{name: "go", other: "Go from https://go.dev/dl/"},
		{name: "xz", pkg: "xz-utils"},
		// Copied into the guest, so it must be the static build.
		{name: "busybox", pkg: "busybox-static"},
		{name: "find", pkg: "findutils"},
		{name: "cpio", pkg: "cpio"},
		{name: "qemu-system-x86_64", pkg: "qemu-system-x86"},
	}
}

// sbinDirs returns the directories that hold depmod on Debian, which a
// non-root user's PATH often lacks.
func sbinDirs() []string {
	return []string{"/usr/sbin", "/sbin"}
}

// withSbin returns the PATH value path with the sbin directories appended
// where it lacks them, so that they are searched last.
func withSbin(path string) string {
	dirs := filepath.SplitList(path)
	for _, d := range sbinDirs() {
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return strings.Join(dirs, string(os.PathListSeparator))
}

// checkTools reports, in one error, every host tool that lookPath (as
// exec.LookPath) cannot find, each with the package that installs it, and
// the command that installs them all. It returns nil when none is missing.
func checkTools(lookPath func(string) (string, error)) error {
	var missing, pkgs, others []string
	for _, t := range hostTools() {
		if _, err := lookPath(t.name); err == nil {
			continue
		}
		missing = append(missing, fmt.Sprintf("%s (%s)", t.name, t.source()))
		switch {
		case t.pkg == "":
			others = append(others, "install "+t.other)
		case !slices.Contains(pkgs, t.pkg):
			pkgs = append(pkgs, t.pkg)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	var fixes []string
	if len(pkgs) > 0 {
		fixes = append(fixes, "apt-get install "+strings.Join(pkgs, " "))
	}
	fixes = append(fixes, others...)
	return fmt.Errorf("missing tools: %s\n  fix: %s", strings.Join(missing, ", "), strings.Join(fixes, "; "))
}

// prepareHostTools puts the sbin directories on PATH, for the lookups here
// and for the tools vmtests runs later, which therefore find the same
// programs the check found, and then checks that every host tool is there.
func prepareHostTools() error {
	if err := os.Setenv("PATH", withSbin(os.Getenv("PATH"))); err != nil {
		return fmt.Errorf("add %s to PATH: %w", strings.Join(sbinDirs(), " and "), err)
	}
	// checkTools's error already says what it is about: "missing tools".
	return checkTools(exec.LookPath)
}
