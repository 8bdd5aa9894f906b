// Package plot turns the results of a ccload bench run into small PNG
// figures, so that congestion controls (cubic, bbr, reno, bpf_dctcp,
// theta_powertcp, powertcp, hpcc, ...) can be compared at a glance
// without leaving Go or installing a plotting toolchain.
//
// The benchmark records bottleneck queue length and throughput as time
// series and flow completion times as per-bucket statistics; this package
// draws them the way the datacenter congestion-control literature does:
//
//   - [Queue]: bottleneck queue (KB) over time (ms), one line per
//     congestion control, in the spirit of the PowerTCP paper's Figure 4.
//   - [Throughput]: throughput (Gbit/s) over time (ms).
//   - [FCT]: grouped bars, e.g. p99 flow completion time per flow-size
//     bucket and congestion control, on a log scale when the values span
//     more than two decades.
//
// [Lines] and [Bar] are the general forms the three figures are built on.
//
// # Input
//
// The input types ([Point], [Series], [Bars], [BarSeries]) are
// deliberately plain: callers convert their own measurement records into
// them. Series are drawn in the order given, and the i-th series always
// gets the i-th colour and dash style, so keeping congestion controls in
// the same order across figures keeps their colours the same.
//
// # Robustness
//
// Non-finite values (NaN, ±Inf) are treated as missing: line points holding
// them are skipped, and bars holding them are not drawn. Input that leaves
// nothing at all to draw fails with an error wrapping [ErrNoData]. Errors
// carry the kind of figure and the output path. A panic raised while
// drawing is recovered and returned as an error, so bad data never brings
// a benchmark run down.
//
// # Size and speed
//
// Figures are 640×360 pixels by default (see [Size]). A line series with
// more points than the figure has pixel columns is downsampled before
// drawing: the time range is cut into one bucket per pixel column and each
// bucket keeps only its minimum and maximum point, in time order. Spikes
// and the envelope of the signal therefore survive, while a 100,000-point
// series draws quickly and yields a PNG of well under 150 KB.
//
// Rendering is deterministic: the same input gives byte-identical files.
package plot
