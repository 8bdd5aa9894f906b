package main

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestCheckTools runs checkTools with a fake lookup that lacks the given
// tools, and checks the whole error: each missing tool with its package,
// and one fix command that installs each package once.
func TestCheckTools(t *testing.T) {
	tests := []struct {
		name   string
		absent []string
		want   string // the error; empty for none
	}{
		{name: "all present"},
		{
			name:   "no depmod",
			absent: []string{"depmod"},
			want: "missing tools: depmod (Debian package kmod)\n" +
				"  fix: apt-get install kmod",
		},
		{
			name:   "no depmod or qemu",
			absent: []string{"depmod", "qemu-system-x86_64"},
			want: "missing tools: depmod (Debian package kmod), qemu-system-x86_64 (Debian package qemu-system-x86)\n" +
				"  fix: apt-get install kmod qemu-system-x86",
		},
		{
			name:   "two tools of one package",
			absent: []string{"apt-cache", "apt-get", "cpio"},
			want: "missing tools: apt-cache (Debian package apt), apt-get (Debian package apt), cpio (Debian package cpio)\n" +
				"  fix: apt-get install apt cpio",
		},
		{
			name:   "go alone",
			absent: []string{"go"},
			want: "missing tools: go (Go from https://go.dev/dl/)\n" +
				"  fix: install Go from https://go.dev/dl/",
		},
		{
			name:   "go and a package",
			absent: []string{"busybox", "go"},
			want: "missing tools: go (Go from https://go.dev/dl/), busybox (Debian package busybox-static)\n" +
				"  fix: apt-get install busybox-static; install Go from https://go.dev/dl/",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asked []string
			look := func(name string) (string, error) {
				asked = append(asked, name)
				if slices.Contains(tt.absent, name) {
					return "", exec.ErrNotFound
				}
				return "/usr/bin/" + name, nil
			}
			err := checkTools(look)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("checkTools error:\n%s\nwant:\n%s", got, tt.want)
			}
			for _, h := range hostTools() {
				if !slices.Contains(asked, h.name) {
					t.Errorf("checkTools never looked up %s", h.name)
				}
			}
		})
	}
}

// TestCheckToolsAllMissing checks that a machine with none of the tools
// hears about every one of them, and about every package, in one error.
func TestCheckToolsAllMissing(t *testing.T) {
	err := checkTools(func(string) (string, error) { return "", errors.New("not found") })
	if err == nil {
		t.Fatal("checkTools = nil with no tools at all")
	}
	msg := err.Error()
	_, fix, ok := strings.Cut(msg, "\n  fix: ")
	if !ok {
		t.Fatalf("no fix line in:\n%s", msg)
	}
	words := strings.FieldsFunc(fix, func(r rune) bool { return r == ' ' || r == ';' })
	for _, h := range hostTools() {
		if !strings.Contains(msg, h.name+" ("+h.source()+")") {
			t.Errorf("error does not name %s with its source:\n%s", h.name, msg)
		}
		if h.pkg != "" && !slices.Contains(words, h.pkg) {
			t.Errorf("fix %q does not install %s", fix, h.pkg)
		}
	}
}

// TestWithSbin checks that withSbin appends only the sbin directories PATH
// lacks, after the ones it has.
func TestWithSbin(t *testing.T) {
	tests := []struct{ path, want string }{
		{"/usr/bin:/sbin", "/usr/bin:/sbin:/usr/sbin"},
		{"/usr/local/bin", "/usr/local/bin:/usr/sbin:/sbin"},
		{"/usr/sbin:/usr/bin:/sbin", "/usr/sbin:/usr/bin:/sbin"},
	}
	for _, tt := range tests {
		if got := withSbin(tt.path); got != tt.want {
			t.Errorf("withSbin(%q) = %q, want %q", tt.path, got, tt.want)
		}
	}
}
