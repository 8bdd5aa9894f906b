// Package clocksync is ccload's clock-offset agent, in the way of Huygens
// (Geng et al., NSDI'18): each agent probes up to K peers over UDP with
// coded probe pairs stamped by the kernel, fits each peer's offset and
// drift with a maximum-margin line, corrects the offsets over the loops of
// the probe graph (least squares on the graph Laplacian, with the
// estimates its neighbours send it), and publishes them in a pinned BPF
// map per network namespace, where data-path programs read them to turn
// two hosts' timestamps into a one-way delay.
//
// It is a package of its own because it is a concern of its own: a
// long-running protocol between hosts, with its own wire format, socket
// timestamps and estimator, that the CCs and INT don't use and On-Ramp
// only reads through the map. docs/clock.md documents the protocol and the
// map's layout, which is an API (bpf/include/clock.h).
//
// Every time it handles is nanoseconds of CLOCK_TAI, the clock that
// bpf_ktime_get_tai_ns reads; Clock is the one place where kernel
// timestamps (CLOCK_REALTIME) become TAI, and the test seam (Skewed) for
// clocks that disagree.
package clocksync
