// Package onramp runs On-Ramp (NSDI'21, "Breaking the Transience-Equilibrium
// Nexus") on stock kernels, under any congestion control: when the one-way
// delay of a flow's packets exceeds a threshold T, the sender holds the
// flow's next packets back at its own egress, with earliest departure times
// that sch_fq enforces, while fq keeps serving the other flows.
//
// It owns three things, each in one place:
//   - the wire format of its TCP options (option.go; docs/onramp-option.md);
//   - the tc programs of bpf/onramp.c, one set per interface, which stamp
//     data segments, compute one-way delays from the clock agent's map
//     (package clocksync), echo them on ACKs and run the sender's control;
//   - the sockops program of bpf/onramp_sockops.c, one per cgroup, which
//     makes room in TCP headers for the options.
//
// Pins: <pin root>/onramp/<ifname>-<ifindex>-ns<netns inode>/ holds an
// interface's programs and maps, and the record of the object they were
// built from; <pin root>/onramp/sockops/ the sockops program, shared by
// every interface on which On-Ramp is enabled, with its own record;
// <pin root>/onramp/holders/<interface key>/ records those interfaces and
// the peer prefixes each asked for; <pin root>/onramp/fq/<interface key>
// records an fq root qdisc that On-Ramp installed (fqroot.go). The
// sockops program goes when the last interface does. A command killed at
// any step leaves what Recover (recover.go) finishes; a newer build
// swaps its programs in place (upgrade.go). docs/onramp.md is the user's
// guide.
package onramp
