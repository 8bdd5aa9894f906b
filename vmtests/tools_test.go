package main

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestCheckTools(t *testing.T) {
	tests := []struct {
		name    string
		absent  []string
		want    []string // in the error
		wantNil bool
	}{
		{name: "all present", wantNil: true},
		{name: "no depmod", absent: []string{"depmod"}, want: []string{"depmod (Debian package kmod)", "fix: apt-get install kmod"}},
		{name: "two missing, one command", absent: []string{"depmod", "qemu-system-x86_64"},
			want: []string{"depmod (Debian package kmod)", "qemu-system-x86_64 (Debian package qemu-system-x86)", "apt-get install kmod qemu-system-x86"}},
		{name: "go is no apt package of ours", absent: []string{"go"}, want: []string{"go (Debian package golang", "fix: install them"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			look := func(name string) (string, error) {
				if slices.Contains(tt.absent, name) {
					return "", errors.New("not found")
				}
				return "/usr/bin/" + name, nil
			}
			err := checkTools(look)
			if tt.wantNil {
				if err != nil {
					t.Fatalf("checkTools = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("checkTools = nil, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestWithSbin(t *testing.T) {
	if got := withSbin("/usr/bin:/sbin"); got != "/usr/bin:/sbin:/usr/sbin" {
		t.Errorf("withSbin = %q", got)
	}
}
