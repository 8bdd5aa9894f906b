package main

import (
	"bytes"
	"compress/gzip"
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

//go:embed init.sh
var initScript []byte

// testPackage is a Go test package run inside the guest.
type testPackage struct {
	name  string // binary name in the guest: /tests/NAME.test
	path  string // Go package path, relative to the module root
	tests string // -test.run regexp
}

// guestModules are the modules the tests need from the guest kernel.
func guestModules() []string {
	return []string{"veth", "sch_htb", "sch_fq", "sch_netem", "sch_fq_codel", "sch_red",
		"sch_ingress", "cls_bpf", "tcp_dctcp", "tcp_bbr", "bridge", "cls_matchall", "act_mirred", "tun"}
}

// buildBinaries compiles the guest's static binaries into dir.
func buildBinaries(ctx context.Context, root, dir string, pkgs []testPackage) error {
	env := append(os.Environ(), "CGO_ENABLED=0")
	build := func(args ...string) error {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir, cmd.Env = root, env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := build("build", "-o", filepath.Join(dir, "ccload"), "./cmd/ccload"); err != nil {
		return err
	}
	for _, p := range pkgs {
		if err := build("test", "-c", "-o", filepath.Join(dir, p.name+".test"), "./"+p.path); err != nil {
			return err
		}
	}
	return nil
}

// buildInitramfs assembles the guest's root file system for k and packs
// it as a gzip'd newc cpio archive at out.
func buildInitramfs(ctx context.Context, k *kernel, bins string, pkgs []testPackage, bench []string, out string) error {
	rootfs, err := os.MkdirTemp("", "ccload-vmtest-rootfs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(rootfs)
	for _, d := range []string{"bin", "proc", "sys", "dev", "tmp", "tests", "modules", "etc"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return err
		}
	}
	copyFile := func(src, dst string, mode os.FileMode) error {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, mode)
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		return fmt.Errorf("busybox not found: apt-get install busybox-static")
	}
	if err := copyFile(busybox, filepath.Join(rootfs, "bin", "busybox"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(rootfs, "init"), initScript, 0o755); err != nil {
		return err
	}
	if err := copyFile(filepath.Join(bins, "ccload"), filepath.Join(rootfs, "bin", "ccload"), 0o755); err != nil {
		return err
	}
	var manifest strings.Builder
	for _, p := range pkgs {
		if err := copyFile(filepath.Join(bins, p.name+".test"), filepath.Join(rootfs, "tests", p.name+".test"), 0o755); err != nil {
			return err
		}
		fmt.Fprintf(&manifest, "%s|%s\n", p.name, p.tests)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "tests", "manifest"), []byte(manifest.String()), 0o644); err != nil {
		return err
	}
	if len(bench) > 0 {
		if err := os.WriteFile(filepath.Join(rootfs, "etc", "bench-args"), []byte(strings.Join(bench, " ")+"\n"), 0o644); err != nil {
			return err
		}
	}

	// Modules, decompressed (busybox insmod reads plain .ko), in load order.
	order, err := k.moduleOrder(guestModules())
	if err != nil {
		return err
	}
	var names []string
	for _, rel := range order {
		src := filepath.Join(k.modDir(), rel)
		name := strings.TrimSuffix(filepath.Base(rel), ".xz")
		dst := filepath.Join(rootfs, "modules", name)
		if strings.HasSuffix(rel, ".xz") {
			raw, err := runCmd(ctx, "", "xz", "-dc", src)
			if err != nil {
				return err
			}
			err = os.WriteFile(dst, raw, 0o644)
			if err != nil {
				return err
			}
		} else if err := copyFile(src, dst, 0o644); err != nil {
			return err
		}
		names = append(names, name)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "modules", "order"), []byte(strings.Join(names, "\n")+"\n"), 0o644); err != nil {
		return err
	}

	// Pack: cpio reads the file list from find, relative to the root.
	list, err := runCmd(ctx, rootfs, "find", ".", "-mindepth", "1")
	if err != nil {
		return err
	}
	cpio := exec.CommandContext(ctx, "cpio", "--quiet", "-o", "-H", "newc", "-R", "0:0")
	cpio.Dir = rootfs
	cpio.Stdin = bytes.NewReader(list)
	archive, err := cpio.Output()
	if err != nil {
		return fmt.Errorf("cpio: %w (is cpio installed? apt-get install cpio)", err)
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	zw, _ := gzip.NewWriterLevel(f, gzip.BestSpeed)
	if _, err := zw.Write(archive); err != nil {
		f.Close()
		return err
	}
	if err := zw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
