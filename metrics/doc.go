// Package metrics turns ccload's pinned kernel state into Prometheus
// metrics: the counters of the attached CCs, INT and its hops, On-Ramp,
// the clock agent's offsets, and the run counts and run times of ccload's
// BPF programs. A Collector reads the kernel at every scrape and keeps
// nothing between scrapes; the daemon registers it and serves it.
//
// A scrape never fails as a whole. What is not enabled (no INT, no clock
// agent, no On-Ramp) yields no series; what is enabled but cannot be read
// yields no series either, and counts one in ccload_scrape_errors_total
// under the part it belongs to.
//
// Every family, its type, labels and help text is in catalog.go; the
// tests check them all against the Prometheus naming conventions and
// promtool.
package metrics
