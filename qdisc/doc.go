// Package qdisc sets up the traffic-control side of ccload on one network
// interface: it installs sch_fq as the root qdisc, attaches tc BPF
// programs, and removes both again.
//
// fq is the qdisc that honours an earliest departure time (EDT) written to
// skb->tstamp: it holds each packet until then. A tc program that stamps
// packets (EDTDelay, On-Ramp's per-flow pauses) does nothing without it,
// so the two are installed together:
//
//	fq, err := qdisc.InstallFQ("eth0", qdisc.FQConfig{})
//	prog, err := qdisc.LoadEDTDelay()
//	err = prog.SetDelay(5 * time.Millisecond)
//	att, err := qdisc.Attach("eth0", prog.Program(), qdisc.AttachOptions{Direction: qdisc.Egress})
//	...
//	att.Close(); prog.Close(); fq.Close()
//
// Programs are attached with TCX where the kernel has it (6.6+), and with
// a clsact qdisc and a direct-action cls_bpf filter otherwise;
// Attachment.Method says which one was used.
//
// Every function works on the network namespace of the calling thread: the
// interface name is looked up there, and the netlink sockets that FQ and
// Attachment keep until Close are opened there. To work on another
// namespace, call them on a thread inside it (testbed.Host.Do). Close may
// then be called from any goroutine.
//
// Nothing is left behind: a constructor that fails removes what it had
// created, and Close removes the qdisc, the filter or the link. Close is
// idempotent. The package never replaces or removes a qdisc it did not
// create, with two exceptions: a clsact qdisc that has no filters left after
// Close removed the last one is deleted, whoever added it; and
// EnsureFQRoot(iface, cfg, true) replaces a root qdisc somebody else
// installed, when its caller says so (`ccload onramp enable
// --replace-qdisc`).
//
// EnsureFQRoot is what On-Ramp uses: it keeps an fq root that is already
// there, puts fq in place of the kernel's default root, or mq with an fq
// on every queue on a multi-queue device, and refuses any other root.
// RemoveFQRoot removes only the root ccload installed (handle cc0f:).
// go-tc (pinned at v0.4.8) implements fq but not mq, so mq is added and
// deleted through vishvananda/netlink, in the same network namespace.
//
// An attachment can also outlive the process: Attachment.Pin pins it on
// a bpf filesystem (the TCX link, or the program of a cls_bpf filter),
// Attachment.Release lets go of it without detaching, and DetachPinned
// removes it later from any process. InspectPinned tells whether a pinned
// attachment still runs.
//
// The package needs CAP_NET_ADMIN, and CAP_BPF for the programs. A kernel
// without sch_fq (the module is missing) yields ErrNoFQ.
package qdisc
