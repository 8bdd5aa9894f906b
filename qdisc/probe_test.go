package qdisc

import (
	"errors"
	"strings"
	"testing"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/testutil"
)

// TestProbeFQ checks the probe behind `ccload status` against fq installed
// on a veth: both say the same of this kernel, and on a kernel without fq
// (the project's host) the probe's error wraps ErrNoFQ, names
// CONFIG_NET_SCH_FQ and carries the fix. The vmtests guests, which have
// fq, run it too.
func TestProbeFQ(t *testing.T) {
	testutil.RequireRoot(t)
	has := kernelHasFQ(t)
	err := ProbeFQ()
	t.Logf("fq installs on a veth: %v; ProbeFQ: %v (fix: %s)", has, err, kernel.FixOf(err))
	if has {
		if err != nil {
			t.Fatalf("fq installs on a veth, but ProbeFQ says: %v", err)
		}
		return
	}
	if !errors.Is(err, ErrNoFQ) {
		t.Fatalf("fq does not install on a veth, but ProbeFQ says %v; want an error wrapping ErrNoFQ", err)
	}
	if !kernel.IsKind(err, kernel.KindKernelTooOld) {
		t.Errorf("ProbeFQ's error is not of kind %v: %v", kernel.KindKernelTooOld, err)
	}
	if !strings.Contains(err.Error(), "CONFIG_NET_SCH_FQ") || !strings.Contains(kernel.FixOf(err), "modprobe sch_fq") {
		t.Errorf("ProbeFQ's error %q (fix %q) should name CONFIG_NET_SCH_FQ and modprobe sch_fq", err, kernel.FixOf(err))
	}
}
