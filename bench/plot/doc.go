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
//     more than two decades, with whiskers for the spread over repeated
//     runs ([BarSeries] Lo and Hi).
//   - [QueuePanels]: the queue with one panel per congestion control, on
//     shared axes, every run of it in the panel (the first dark, later
//     ones light); given a time window, the same figure zooms on one
//     episode, such as an incast.
//   - [QueueCDF]: the distribution of the queue samples, one line per
//     congestion control, on a log axis when they span decades.
//
// [Lines], [Bar], [Panels] and [CDF] are the general forms these figures
// are built on.
//
// # Input
//
// The input types ([Point], [Series], [Panel], [CDFSeries], [Bars],
// [BarSeries]) are deliberately plain: callers convert their own
// measurement records into them. Series are drawn in the order given, and
// the i-th series always gets the i-th colour and dash style, so keeping
// congestion controls in the same order across figures keeps their
// colours the same; the i-th panel of a [Panels] figure gets the i-th
// colour too.
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
// Figures are 640×360 pixels by default (see [Size]); a [Panels] figure
// grows with its panels instead. A line series with
// more points than the figure has pixel columns is downsampled before
// drawing: the time range is cut into one bucket per pixel column and each
// bucket keeps only its minimum and maximum point, in time order. Spikes
// and the envelope of the signal therefore survive, while a 100,000-point
// series draws quickly and yields a PNG of well under 150 KB. A CDF line
// keeps at most 2000 points of its sorted values however many it is given,
// with the top percent at full resolution up to about 100,000 values.
//
// Rendering is deterministic: the same input gives byte-identical files.
package plot
