// Package loader loads ccload's BPF congestion controls into the kernel,
// registers them as tcp_congestion_ops through struct_ops, pins them in
// bpffs so that they outlive the process, tunes their parameters at run
// time, and unregisters them.
//
// Pins live in /sys/fs/bpf/ccload/NAME/: "link" (kernels >= 6.4) or "ops"
// (the legacy struct_ops map registration of older kernels), plus the
// "params" and "stats" maps and, for the CCs that trace, "events" and
// "trace_on". The kernel and these pins are the only state: the Loader
// itself holds none between calls. The CCs that read INT (powertcp, hpcc)
// share the INT store with the INT sockops program; telemetry/sockops owns
// it, and the Loader gets it through SharedMaps.
//
// Each BPF object carries both cong_control prototypes (before and since
// Linux 6.10); the one that matches the running kernel's BTF is loaded.
package loader
