package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// hostTool is a program vmtests runs on the host, and the Debian package
// that installs it.
type hostTool struct {
	name string
	pkg  string
}

// hostTools are the programs vmtests runs on the host, in the order it
// needs them: apt-get and dpkg-deb fetch and unpack the kernels, depmod
// indexes their modules, xz decompresses them, go builds the test
// binaries, busybox, find and cpio make the initramfs, QEMU boots it.
var hostTools = []hostTool{
	{"apt-get", "apt"},
	{"dpkg-deb", "dpkg"},
	{"depmod", "kmod"},
	{"xz", "xz-utils"},
	{"go", "golang (or Go from go.dev)"},
	{"busybox", "busybox-static"},
	{"find", "findutils"},
	{"cpio", "cpio"},
	{"qemu-system-x86_64", "qemu-system-x86"},
}

// sbinDirs hold depmod on Debian; a non-root user's PATH often lacks them.
var sbinDirs = []string{"/usr/sbin", "/sbin"}

// withSbin returns path with the sbin directories appended where missing.
func withSbin(path string) string {
	dirs := filepath.SplitList(path)
	for _, d := range sbinDirs {
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return strings.Join(dirs, string(os.PathListSeparator))
}

// checkTools reports, in one error, every host tool that lookPath cannot
// find, with the Debian packages to install and the command that does.
func checkTools(lookPath func(string) (string, error)) error {
	var missing, pkgs []string
	for _, t := range hostTools {
		if _, err := lookPath(t.name); err == nil {
			continue
		}
		missing = append(missing, fmt.Sprintf("%s (Debian package %s)", t.name, t.pkg))
		if !strings.Contains(t.pkg, " ") && !slices.Contains(pkgs, t.pkg) {
			pkgs = append(pkgs, t.pkg)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	fix := "install them"
	if len(pkgs) > 0 {
		fix = "apt-get install " + strings.Join(pkgs, " ")
	}
	return fmt.Errorf("missing tools: %s\n  fix: %s (scripts/test.sh installs everything the tests need)",
		strings.Join(missing, ", "), fix)
}

// prepareHostTools puts the sbin directories on PATH, for this process and
// the tools it runs, and checks that every host tool is there.
func prepareHostTools() error {
	if err := os.Setenv("PATH", withSbin(os.Getenv("PATH"))); err != nil {
		return fmt.Errorf("set PATH: %w", err)
	}
	return checkTools(exec.LookPath)
}
