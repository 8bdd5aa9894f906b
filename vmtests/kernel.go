package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// kernelSpec says which Debian package provides a kernel series.
type kernelSpec struct {
	series  string         // what users pass to --kernel: "6.1"
	pattern *regexp.Regexp // package names; the first group orders them
}

// knownKernels lists the series the harness can boot: Debian bookworm's
// cloud kernels, which carry BTF and every module the tests need.
func knownKernels() []kernelSpec {
	return []kernelSpec{
		{"6.1", regexp.MustCompile(`^linux-image-6\.1\.0-(\d+)-cloud-amd64$`)},
		{"6.12", regexp.MustCompile(`^linux-image-6\.12\.(\d+)\+deb12-cloud-amd64$`)},
	}
}

func lookupKernel(series string) (kernelSpec, error) {
	var names []string
	for _, k := range knownKernels() {
		if k.series == series {
			return k, nil
		}
		names = append(names, k.series)
	}
	return kernelSpec{}, fmt.Errorf("unknown kernel %q: known are %s", series, strings.Join(names, ", "))
}

// kernel is a kernel image with its modules, extracted in the cache.
type kernel struct {
	series  string
	pkg     string // Debian package name
	release string // uname -r
	root    string // the extracted package
}

func (k *kernel) vmlinuz() string {
	return filepath.Join(k.root, "boot", "vmlinuz-"+k.release)
}

func (k *kernel) modDir() string {
	return filepath.Join(k.root, "lib", "modules", k.release)
}

func runCmd(ctx context.Context, dir, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// resolvePackage finds the newest package of the series the archive has.
func resolvePackage(ctx context.Context, spec kernelSpec) (string, error) {
	search := func() ([]string, error) {
		out, err := runCmd(ctx, "", "apt-cache", "search", "--names-only", `^linux-image-6\.[0-9]+.*cloud-amd64$`)
		if err != nil {
			return nil, err
		}
		var names []string
		for _, line := range strings.Split(string(out), "\n") {
			name, _, _ := strings.Cut(line, " ")
			if spec.pattern.MatchString(name) {
				names = append(names, name)
			}
		}
		return names, nil
	}
	names, err := search()
	if err == nil && len(names) == 0 {
		// A fresh machine may have no package lists yet.
		if _, uerr := runCmd(ctx, "", "apt-get", "update", "-qq"); uerr != nil {
			return "", fmt.Errorf("no package for kernel %s, and apt-get update failed: %w", spec.series, uerr)
		}
		names, err = search()
	}
	if err != nil {
		return "", err
	}
	if len(names) == 0 {
		return "", fmt.Errorf("the Debian archive has no package matching %s", spec.pattern)
	}
	sort.Slice(names, func(i, j int) bool {
		a, _ := strconv.Atoi(spec.pattern.FindStringSubmatch(names[i])[1])
		b, _ := strconv.Atoi(spec.pattern.FindStringSubmatch(names[j])[1])
		return a < b
	})
	return names[len(names)-1], nil
}

// fetchKernel downloads (once) and extracts (once) the newest kernel of
// spec into cache.
func fetchKernel(ctx context.Context, cache string, spec kernelSpec, logf func(string, ...any)) (*kernel, error) {
	pkg, err := resolvePackage(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("kernel %s: %w", spec.series, err)
	}
	debs := filepath.Join(cache, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return nil, err
	}
	matches, _ := filepath.Glob(filepath.Join(debs, pkg+"_*.deb"))
	if len(matches) == 0 {
		logf("downloading %s", pkg)
		// apt drops privileges to _apt for downloads; let it write here.
		os.Chmod(debs, 0o777)
		if _, err := runCmd(ctx, debs, "apt-get", "download", "-q", pkg); err != nil {
			return nil, fmt.Errorf("download kernel %s: %w", spec.series, err)
		}
		matches, _ = filepath.Glob(filepath.Join(debs, pkg+"_*.deb"))
		if len(matches) == 0 {
			return nil, fmt.Errorf("download kernel %s: apt-get left no %s_*.deb in %s", spec.series, pkg, debs)
		}
	} else {
		logf("using cached %s", filepath.Base(matches[0]))
	}

	root := filepath.Join(cache, "kernels", pkg)
	done := filepath.Join(root, ".extracted")
	if _, err := os.Stat(done); err != nil {
		os.RemoveAll(root)
		if err := os.MkdirAll(root, 0o755); err != nil {
			return nil, err
		}
		if _, err := runCmd(ctx, "", "dpkg-deb", "-x", matches[0], root); err != nil {
			return nil, fmt.Errorf("extract kernel %s: %w", spec.series, err)
		}
		if err := os.WriteFile(done, nil, 0o644); err != nil {
			return nil, err
		}
	}
	entries, err := os.ReadDir(filepath.Join(root, "lib", "modules"))
	if err != nil || len(entries) != 1 {
		return nil, fmt.Errorf("kernel %s: expected one module tree in %s (err %v)", spec.series, root, err)
	}
	k := &kernel{series: spec.series, pkg: pkg, release: entries[0].Name(), root: root}
	if _, err := os.Stat(k.vmlinuz()); err != nil {
		return nil, fmt.Errorf("kernel %s: %w", spec.series, err)
	}
	if _, err := os.Stat(filepath.Join(k.modDir(), "modules.dep")); err != nil {
		if _, err := runCmd(ctx, "", "depmod", "-b", root, k.release); err != nil {
			return nil, fmt.Errorf("depmod kernel %s: %w", spec.series, err)
		}
	}
	return k, nil
}

// moduleOrder returns the module files (relative to modDir) that loading
// wanted needs, dependencies first, from the tree's modules.dep.
func (k *kernel) moduleOrder(wanted []string) ([]string, error) {
	f, err := os.Open(filepath.Join(k.modDir(), "modules.dep"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	deps := map[string][]string{} // file -> files it needs
	byName := map[string]string{} // module name -> file
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		file, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		deps[file] = strings.Fields(rest)
		byName[moduleName(file)] = file
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var order []string
	seen := map[string]bool{}
	var visit func(file string)
	visit = func(file string) {
		if seen[file] {
			return
		}
		seen[file] = true
		for _, d := range deps[file] {
			visit(d)
		}
		order = append(order, file)
	}
	for _, name := range wanted {
		file, ok := byName[name]
		if !ok {
			if builtin, _ := k.isBuiltin(name); builtin {
				continue
			}
			return nil, fmt.Errorf("kernel %s has no module %s", k.release, name)
		}
		visit(file)
	}
	return order, nil
}

func (k *kernel) isBuiltin(name string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(k.modDir(), "modules.builtin"))
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if moduleName(line) == name {
			return true, nil
		}
	}
	return false, nil
}

// moduleName turns kernel/net/sched/sch-x.ko.xz into sch_x.
func moduleName(path string) string {
	base := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(path), ".xz"), ".ko")
	return strings.ReplaceAll(base, "-", "_")
}
