package qdisc

import (
	"errors"

	"golang.org/x/sys/unix"
)

// ErrNoFQ is returned by InstallFQ when the kernel has no sch_fq: the
// module is neither built in nor loadable. Most distributions ship it as
// a module; `modprobe sch_fq` loads it.
var ErrNoFQ = errors.New("kernel lacks sch_fq (modprobe sch_fq)")

// noFQFix is the fix of every error that says the kernel has no sch_fq.
const noFQFix = "load it with `modprobe sch_fq`, or build the kernel with CONFIG_NET_SCH_FQ=m"

// ErrNoClsact is returned by Attach when it needs a clsact qdisc (kernels
// without TCX) and the kernel has no sch_ingress, the module that
// provides clsact.
var ErrNoClsact = errors.New("kernel lacks clsact (modprobe sch_ingress)")

// ErrNoClsBPF is returned by Attach when it needs a BPF filter (kernels
// without TCX) and the kernel has no cls_bpf.
var ErrNoClsBPF = errors.New("kernel lacks cls_bpf (modprobe cls_bpf)")

// errUnknownKind reports whether err is the kernel's answer to a qdisc or
// filter kind it does not know: ENOENT ("Specified qdisc kind is
// unknown") once loading the module failed, or EOPNOTSUPP.
func errUnknownKind(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EOPNOTSUPP)
}

// errGone reports whether err says that the object to remove, or its
// interface, no longer exists.
func errGone(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV)
}
