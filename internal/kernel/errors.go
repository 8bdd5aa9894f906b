package kernel

import (
	"errors"
	"fmt"
)

// Kind classifies a ccload error, so that callers (and tests) can tell the
// failures apart with errors.Is or IsKind without matching on text.
type Kind int

// The kinds of error ccload returns. Each one comes with a fix.
const (
	KindUnknown         Kind = iota
	KindUnknownCC            // the name is not a CC built into ccload
	KindBadParam             // a parameter name, value or unit is wrong
	KindNoBTF                // the kernel exposes no BTF
	KindKernelTooOld         // a kernel feature ccload needs is missing
	KindMissingCaps          // the process lacks a capability
	KindNameTaken            // another CC already has the name
	KindNoBPFFS              // bpffs is not mounted where pins go
	KindNotAttached          // the CC is not attached by ccload
	KindLoad                 // the kernel refused to create a program or map
	KindAlreadyAttached      // something is attached where ccload would attach
	KindVerifier             // the verifier rejected a program; the error wraps *ebpf.VerifierError
	KindVersionMismatch      // pins were made by a ccload whose objects differ from this one's
	KindBadObject            // an embedded BPF object lacks what the Go code expects: a build bug
	KindSysctl               // a sysctl could not be read or written
	KindDetach               // something attached could not be detached
)

var kindNames = map[Kind]string{
	KindUnknown:         "error",
	KindUnknownCC:       "unknown congestion control",
	KindBadParam:        "bad parameter",
	KindNoBTF:           "no kernel BTF",
	KindKernelTooOld:    "kernel too old",
	KindMissingCaps:     "missing capability",
	KindNameTaken:       "name already registered",
	KindNoBPFFS:         "bpffs not mounted",
	KindNotAttached:     "not attached",
	KindLoad:            "load failed",
	KindAlreadyAttached: "already attached",
	KindVerifier:        "verifier rejected a program",
	KindVersionMismatch: "pinned by another ccload version",
	KindBadObject:       "broken BPF object",
	KindSysctl:          "sysctl failed",
	KindDetach:          "detach failed",
}

// String returns a short name for the kind.
func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Error is a failure: what went wrong, and what the user can do about it.
type Error struct {
	Kind    Kind
	Problem string // what is wrong, in one sentence
	Fix     string // what to do about it
	Err     error  // the underlying error, if any
}

// Error implements error. The fix is not part of it; see [Error.Fix].
func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %v", e.Problem, e.Err)
	}
	return e.Problem
}

// Unwrap returns the underlying error, so that errors.As reaches it (for
// example the *ebpf.VerifierError of a KindVerifier error).
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error of the same kind, so that
// errors.Is(err, &Error{Kind: KindBadParam}) works.
func (e *Error) Is(target error) bool {
	var t *Error
	if !errors.As(target, &t) {
		return false
	}
	return t.Kind == e.Kind && t.Problem == "" && t.Err == nil
}

// IsKind reports whether err is, or wraps, an *Error of kind k.
func IsKind(err error, k Kind) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == k
}

// FixOf returns the suggested fix carried by err, or "".
func FixOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Fix
	}
	return ""
}

// NewError returns an *Error of kind k: the problem is format and args,
// err the cause (or nil), fix what the user can do.
func NewError(k Kind, fix string, err error, format string, args ...any) *Error {
	return &Error{Kind: k, Problem: fmt.Sprintf(format, args...), Fix: fix, Err: err}
}
