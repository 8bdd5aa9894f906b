// Package kernel is what every part of ccload that loads BPF needs from
// the host it runs on: where its kernel BTF, bpffs and /proc/sys are
// ([Host]), what the kernel can do ([Probe]), whether this process may load
// BPF ([CheckCaps]), a mounted bpffs ([EnsureBPFFS]), and the error type
// that names a problem together with its fix ([Error]).
//
// The congestion controls (loader), INT (telemetry/...) and the qdisc
// code sit above it; it imports none of them.
package kernel
