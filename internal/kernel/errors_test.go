package kernel

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

func TestLoadErrorKinds(t *testing.T) {
	ve := &ebpf.VerifierError{Cause: unix.EACCES, Log: []string{"0: (b7) r0 = 0", "R1 invalid mem access"}}
	tests := []struct {
		name string
		err  error
		kind Kind
	}{
		{"verifier", fmt.Errorf("load program: %w", ve), KindVerifier},
		{"name taken", fmt.Errorf("update: %w", unix.EEXIST), KindNameTaken},
		{"permission", fmt.Errorf("create map: %w", unix.EPERM), KindMissingCaps},
		{"not supported", fmt.Errorf("link: %w", ebpf.ErrNotSupported), KindKernelTooOld},
		{"other", errors.New("boom"), KindLoad},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := LoadError("theta_powertcp", tt.err)
			if !IsKind(err, tt.kind) || FixOf(err) == "" {
				t.Fatalf("LoadError(%v) = %v (fix %q), want kind %v with a fix", tt.err, err, FixOf(err), tt.kind)
			}
			if !errors.Is(err, tt.err) {
				t.Errorf("LoadError(%v) does not wrap its cause", tt.err)
			}
		})
	}
	// The verifier's error stays inspectable, log and all.
	var got *ebpf.VerifierError
	if err := LoadError("x", fmt.Errorf("w: %w", ve)); !errors.As(err, &got) || len(got.Log) != 2 {
		t.Fatalf("errors.As(LoadError(verifier error)) = %v, want the *ebpf.VerifierError with its log", got)
	}
}

func TestErrorIs(t *testing.T) {
	err := fmt.Errorf("attach: %w", NewError(KindBadParam, "fix it", nil, "gamma out of range"))
	if !errors.Is(err, &Error{Kind: KindBadParam}) || errors.Is(err, &Error{Kind: KindNoBTF}) {
		t.Errorf("errors.Is does not match on the kind: %v", err)
	}
	if got := FixOf(err); got != "fix it" {
		t.Errorf("FixOf = %q", got)
	}
	for k := range kindNames {
		if k.String() == "" {
			t.Errorf("kind %d has no name", k)
		}
	}
}

func TestProbeCachesPerPath(t *testing.T) {
	if _, err := Probe("/nonexistent/vmlinux"); !IsKind(err, KindNoBTF) {
		t.Fatalf("Probe of a missing file: %v, want KindNoBTF", err)
	}
	const path = "/sys/kernel/btf/vmlinux"
	// Every kernel ccload supports, and every machine it is tested on,
	// has BTF.
	a, err := Probe(path)
	if err != nil {
		t.Fatalf("Probe(%s): %v", path, err)
	}
	b, err := Probe(path)
	if err != nil || a != b {
		t.Fatalf("second Probe = %p, %v; want the cached %p", b, err, a)
	}
}
