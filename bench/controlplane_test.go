package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/telemetry/sockops"
)

// TestMeasureControlPlane times a stand-in executable that records its
// arguments, and checks the commands, their order and the figures; then
// that a CC attached already is refused, and left attached.
func TestMeasureControlPlane(t *testing.T) {
	testutil.RequireKernelCC(t, controlPlaneCC)
	// A pin root the CLI reaches: <--bpffs>/ccload.
	host := testutil.Host(t)
	host.BPFFS, host.PinDir = host.PinRoot(), kernel.DefaultHost().PinDir
	if err := os.MkdirAll(host.BPFFS, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(host.BPFFS) })
	l := loader.New(host, loader.WithSharedMaps(sockops.New(host).Store()))
	dir := t.TempDir()
	log := filepath.Join(dir, "calls")
	exe := filepath.Join(dir, "ccload")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\necho \"$*\" >> "+log+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	got, err := MeasureControlPlane(ctx, l, exe, controlPlaneCC, 2)
	if err != nil {
		t.Fatalf("MeasureControlPlane: %v", err)
	}
	want := []string{"attach theta_powertcp", "set theta_powertcp gamma=0.9", "detach theta_powertcp", "--help"}
	if len(got) != len(want) {
		t.Fatalf("got %d commands, want %d: %+v", len(got), len(want), got)
	}
	for i, c := range got {
		if c.Command != want[i] || c.Runs != 2 || !(c.MinMs > 0 && c.MinMs <= c.MedianMs && c.MedianMs <= c.MaxMs) {
			t.Errorf("command %d: %+v, want %q twice with min <= median <= max", i, c, want[i])
		}
	}
	calls, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	// Every command names the loader's pin root, the bench's own.
	first := "--bpffs " + host.BPFFS + " " + want[0]
	if lines := strings.Split(strings.TrimSpace(string(calls)), "\n"); len(lines) != 8 || lines[0] != first || lines[4] != first {
		t.Errorf("the executable ran as %q, want each round in order, starting with %q", lines, first)
	}

	for _, n := range []int{0, MaxControlPlaneRuns + 1} {
		if _, err := MeasureControlPlane(ctx, l, exe, controlPlaneCC, n); err == nil {
			t.Errorf("%d runs: no error", n)
		}
	}
	if _, err := l.Attach(loader.AttachRequest{Name: controlPlaneCC}); err != nil {
		t.Fatalf("attach %s: %v", controlPlaneCC, err)
	}
	t.Cleanup(func() { l.Detach(controlPlaneCC) })
	if _, err := MeasureControlPlane(ctx, l, exe, controlPlaneCC, 1); err == nil || !strings.Contains(err.Error(), "attached already") {
		t.Errorf("with %s attached: %v, want a refusal", controlPlaneCC, err)
	}
	list, err := l.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range list {
		if st.Name == controlPlaneCC && !st.Attached {
			t.Errorf("the refusal detached the user's %s", controlPlaneCC)
		}
	}
}
