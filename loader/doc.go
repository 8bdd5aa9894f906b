// Package loader loads ccload's BPF congestion controls into the kernel,
// registers them as tcp_congestion_ops through struct_ops, pins them in
// bpffs so that they outlive the process, tunes their parameters at run
// time, upgrades them in place, and unregisters them.
//
// Pins live in /sys/fs/bpf/ccload/NAME/: "link" (kernels >= 6.4) or "ops"
// (the legacy struct_ops map registration of older kernels), plus the
// "params" and "stats" maps and, for the CCs that trace, "events" and
// "trace_on", and "meta", the record of the generation attached: the
// identity of its object (Object: a SHA-256 of the embedded ELF and of the
// constants set in it), its number, and its struct_ops map's ID. The
// kernel and these pins are the only state: the Loader itself holds none
// between calls. The CCs that read INT (powertcp, hpcc) share the INT
// store with the INT sockops program, and θ-PowerTCP (and powertcp's θ
// mode) share On-Ramp's holds with On-Ramp's tc programs; internal/sharedmaps
// owns those maps, and the Loader gets them through SharedMaps.
//
// An upgrade (AttachRequest.Replace, Upgrade) registers a new generation
// under the same name: with one BPF_LINK_UPDATE on the link, or, without
// links, by unregistering the old one and registering the new one, which
// leaves the name missing for a moment. Live sockets keep the generation
// they started with; the counters of a replaced generation move to
// gen/<n>/ and go once nothing uses it. next/ holds the new generation
// while the swap runs; a command killed meanwhile leaves it for the next
// one (Recover) to finish or undo.
//
// Each BPF object carries both cong_control prototypes (before and since
// Linux 6.10); the one that matches the running kernel's BTF is loaded.
package loader
