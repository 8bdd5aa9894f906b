// Package bench runs ccload's benchmark scenarios: it builds an emulated
// datacenter bottleneck out of network namespaces (package testbed), runs
// the same traffic once per congestion control, and measures what the
// papers measure: throughput and utilisation, the bottleneck queue over
// time, flow completion times by size, fairness and convergence, and the
// CPU cost of the BPF programs.
//
// It is a package of its own, apart from testbed, because it owns the
// experiment: which CCs to attach, whether INT is on, which traffic runs,
// and how the numbers are summarised and written (results.json, whose
// schema is results.schema.json, and PNG plots). `ccload bench` is its
// command-line front end.
//
// Subpackages hold the pure parts: workload (flow sizes and arrivals),
// stats (percentiles, FCT buckets, fairness) and plot (PNG figures).
package bench
