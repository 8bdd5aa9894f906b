package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ccload/ccload/bench/plot"
	"github.com/ccload/ccload/bench/stats"
)

// Table writes one row per CC with the scenario's main figures. With
// more than one repeat, each figure is the median over the runs, followed
// by its range, min–max, in parentheses; flow completion times are
// percentiles of the flows of all runs pooled.
func (r *Report) Table(w io.Writer) error {
	res := r.Results
	repeats := ""
	if res.Repeat > 1 {
		repeats = fmt.Sprintf(", %d repeats", res.Repeat)
	}
	marking := ""
	if t := res.Topology; t.ECNThresholdBytes > 0 {
		by := t.ECNMarker
		if by == "" {
			by = MarkerHop
		}
		marking = fmt.Sprintf(", CE above %d KB by %s", t.ECNThresholdBytes/1000, by)
	}
	if t := res.Topology.INTTag; t != "" && t != DefaultINTTag {
		marking += ", INT tags " + t
	}
	awake := ""
	if res.Machine.CPUsKeptAwake {
		awake = ", CPUs kept awake (a SCHED_IDLE spinner on each; cpu % counts them)"
	}
	fmt.Fprintf(w, "%s: %s bottleneck, %d KiB buffer%s, base RTT %.0fus, %v per CC%s, %s, kernel %s%s\n",
		res.Scenario, formatRate(float64(res.Topology.RateBps)), res.Topology.BufferBytes>>10, marking, res.Topology.BaseRTTMicros,
		time.Duration(res.Workload.DurationSeconds*float64(time.Second)), repeats, workloadText(res.Workload), res.Machine.Kernel, awake)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	head := []string{"cc", "ran as", "Mbit/s", "util %", "queue KB p50", "p99", "max", "INT q p99", "drops", "retrans"}
	fctBuckets := r.fctColumns()
	for _, b := range fctBuckets {
		head = append(head, "FCT p99 "+b, "p99.9")
	}
	if res.Scenario == ScenarioFairness {
		head = append(head, "jain", "conv max")
	}
	if res.Scenario == ScenarioIncast {
		head = append(head, "drained %", "drain RTTs p50", "p90", "util after p50 %")
	}
	head = append(head, "CC ns/ACK", "above floor", "arith ns", "INT sockops ns/ACK", "flows", "failed", "cpu %")
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	undersized := false
	for _, c := range res.CCs {
		f := func(name string, format func(float64) string) string { return figureCell(c, name, format) }
		row := []string{c.CC, strings.Join(c.KernelCCs, ","), f("throughput_bps", scaled(1e-6, "%.0f")),
			f("utilization", scaled(100, "%.0f")), f("queue_p50_bytes", kbf), f("queue_p99_bytes", kbf),
			f("queue_max_bytes", kbf), f("int_queue_p99_bytes", kbf), f("drops", scaled(1, "%.0f")),
			f("retransmits", scaled(1, "%.0f"))}
		for _, b := range fctBuckets {
			p99, p999 := "-", "-"
			for _, x := range c.FCT {
				if x.Bucket != b {
					continue
				}
				switch {
				case x.P99Us != nil:
					p99 = us(*x.P99Us)
				case x.TailP > 0:
					p99, undersized = fmt.Sprintf("p%g=%s", x.TailP, us(x.TailUs)), true
				}
				if x.P999Us != nil {
					p999 = us(*x.P999Us)
				}
			}
			row = append(row, p99, p999)
		}
		if res.Scenario == ScenarioFairness {
			row = append(row, f("jain", scaled(1, "%.3f")), f("convergence_max_ms", scaled(1, "%.0fms")))
		}
		if res.Scenario == ScenarioIncast {
			row = append(row, f("incast_drained_fraction", scaled(100, "%.0f")), f("incast_drain_rtts_p50", scaled(1, "%.1f")),
				f("incast_drain_rtts_p90", scaled(1, "%.1f")), f("incast_util_after_drain_p50", scaled(100, "%.0f")))
		}
		flows, failed := 0, 0
		for _, run := range c.Runs {
			flows += run.Flows
			failed += run.FlowsFailed
		}
		row = append(row, f("cc_ns_per_run", scaled(1, "%.0f")), f("cc_ns_above_floor", scaled(1, "%.0f")), f("arith_ns_above_floor", scaled(1, "%.0f")),
			f("sockops_ns_per_ack", scaled(1, "%.0f")), fmt.Sprint(flows), fmt.Sprint(failed), f("cpu_busy", scaled(100, "%.0f")))
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if res.Repeat > 1 {
		fmt.Fprintf(w, "Each figure: the median of %d runs per CC (min-max); the CCs' runs interleave, repeat i with workload seed %d+i.\n",
			res.Repeat, res.Workload.Seed)
	}
	fmt.Fprintln(w, "queue: the bottleneck qdisc's backlog, KB; INT q: the INT hop's model of it.")
	if len(fctBuckets) > 0 {
		fmt.Fprintln(w, "FCT in us, by flow size, over the flows of all runs, from connect() to the kernel's timestamp of the ACK of the last byte; flows: all runs' flows.")
		byApp := 0
		for _, c := range res.CCs {
			for _, run := range c.Runs {
				byApp += run.FCTsByAppClock
			}
		}
		if byApp > 0 {
			fmt.Fprintf(w, "%d FCTs ran to the receiver's FIN instead, read in user space: the kernel gave no ACK timestamp for them (fcts_by_app_clock).\n", byApp)
		}
		if undersized {
			fmt.Fprintln(w, "pNN=v: too few flows for p99 (it needs 1,000, p99.9 10,000); v is the highest percentile the flows support.")
		}
	}
	if err := r.tailQueueTable(w, fctBuckets); err != nil {
		return err
	}
	if res.Scenario == ScenarioIncast {
		fmt.Fprintln(w, "drained: share of incasts whose queue fell to one GSO packet (64 KiB) for 1.5 ms before the next; drain RTTs: from the peak, in RTTs at the peak; util after: the 100 ms after the drain.")
	}
	if len(res.ControlPlane) > 0 {
		fmt.Fprintf(w, "control plane, as whole processes (%d runs each): ", res.ControlPlane[0].Runs)
		for i, c := range res.ControlPlane {
			if i > 0 {
				fmt.Fprint(w, "; ")
			}
			fmt.Fprintf(w, "ccload %s %.0f ms (%.0f-%.0f)", c.Command, c.MedianMs, c.MinMs, c.MaxMs)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "CC ns/ACK: the CC's busiest BPF program's mean run time (one run per ACK), from the kernel's BPF statistics;")
	fmt.Fprintln(w, "above floor: less a null CC's, measured in the same repeat; arith ns: the CC's per-ACK arithmetic alone under BPF_PROG_TEST_RUN, less the test loop's cost;\n"+
		"INT sockops ns/ACK: INT's sockops program per ACK of the CC. cpu: all CPUs, whole emulation.")
	return nil
}

// tailQueueTable writes, per CC and FCT bucket, the bottleneck queueing
// delay the bucket's slowest flows saw (PooledFCT.TailQueue): whether the
// queue explains the FCT tail, or something else on the path does.
func (r *Report) tailQueueTable(w io.Writer, buckets []string) error {
	if len(buckets) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	head := []string{"cc"}
	for _, b := range buckets {
		head = append(head, b+" tail FCT", "its queue p50", "max", "flows", "all flows' p50")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	seen := false
	for _, c := range r.Results.CCs {
		row := []string{c.CC}
		for _, b := range buckets {
			cells := []string{"-", "-", "-", "-", "-"}
			for _, x := range c.FCT {
				if x.Bucket != b || x.TailP == 0 {
					continue
				}
				cells[0] = fmt.Sprintf("p%g=%s", x.TailP, us(x.TailUs))
				if q := x.TailQueue; q != nil {
					cells[1], cells[2], cells[3], cells[4] = us(q.P50Us), us(q.MaxUs), fmt.Sprint(q.Flows), us(q.BucketUs)
					seen = true
				}
			}
			row = append(row, cells...)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	if !seen {
		return nil
	}
	fmt.Fprintln(w, "Queue seen by the slowest flows: each flow's largest bottleneck queueing delay (backlog at the line rate, us) read from its start to its FIN;")
	fmt.Fprintln(w, "its median and max over the flows at or beyond the bucket's tail percentile, and its median over all the bucket's flows.")
	return tw.Flush()
}

// figureCell formats figure name of c: the median, and with more than one
// run its range; "-" when no run had it.
func figureCell(c CCResult, name string, format func(float64) string) string {
	s, ok := c.Figures[name]
	if !ok {
		return "-"
	}
	if s.N < 2 {
		return format(s.Median)
	}
	return fmt.Sprintf("%s (%s-%s)", format(s.Median), format(s.Min), format(s.Max))
}

// scaled formats v·k with format.
func scaled(k float64, format string) func(float64) string {
	return func(v float64) string { return fmt.Sprintf(format, v*k) }
}

func kbf(b float64) string { return fmt.Sprintf("%.0f", b/1e3) }

// fctColumns are the FCT buckets worth a column in this scenario.
func (r *Report) fctColumns() []string {
	switch r.Results.Scenario {
	case ScenarioWebsearch:
		return []string{stats.BucketSmall, stats.BucketMedium, stats.BucketLarge}
	case ScenarioIncast:
		return []string{stats.BucketAll}
	}
	return nil
}

// incastColumns are the drain columns of an incast row.
func incastColumns(d *IncastDrain) []string {
	if d == nil {
		return []string{"-", "-", "-", "-"}
	}
	opt := func(v *float64, format string, scale float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf(format, *v*scale)
	}
	return []string{fmt.Sprintf("%d/%d", d.Drained, d.Incasts), opt(d.DrainRTTsP50, "%.1f", 1), opt(d.DrainRTTsP90, "%.1f", 1),
		opt(d.UtilAfterDrainP50, "%.0f%%", 100)}
}

// WriteReport writes a report to dir with write, a report's Write, and
// names on progress (nil: nowhere) each file it wrote. A plot with
// nothing to draw (NothingToPlot) is named there too and is not an
// error: results.json and the table are still the run's.
func WriteReport(progress io.Writer, write func(dir string) ([]string, error), dir string) error {
	if progress == nil {
		progress = io.Discard
	}
	files, err := write(dir)
	for _, f := range files {
		fmt.Fprintf(progress, "wrote %s\n", f)
	}
	if err != nil && !NothingToPlot(err) {
		return err
	}
	if err != nil {
		fmt.Fprintf(progress, "not plotted, nothing to draw: %v\n", err)
	}
	return nil
}

// NothingToPlot reports whether err, from a report's Write, says only
// that some of its plots had nothing to draw (plot.ErrNoData): too few
// flows in a size bucket, say. results.json and the other plots were
// written then, and the run itself is not in error.
func NothingToPlot(err error) bool {
	if err == nil {
		return false
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !NothingToPlot(e) {
				return false
			}
		}
		return true
	}
	return errors.Is(err, plot.ErrNoData)
}

func formatRate(bps float64) string {
	if bps >= 1e9 {
		return fmt.Sprintf("%g Gbit/s", bps/1e9)
	}
	return fmt.Sprintf("%g Mbit/s", bps/1e6)
}

func workloadText(w Workload) string {
	switch {
	case w.Load > 0:
		return fmt.Sprintf("web-search flows at load %.2f", w.Load)
	case w.Fanout > 0:
		return fmt.Sprintf("long flow + %d x %d KiB incast every %v", w.Fanout, w.IncastBytes>>10, incastPeriod)
	case w.Flows > 0:
		return fmt.Sprintf("%d flows joining and leaving", w.Flows)
	}
	return "one long flow"
}

func us(u float64) string { return fmt.Sprintf("%.0f", u) }
func convText(ms []float64) string {
	worst := 0.0
	for _, m := range ms {
		if m < 0 {
			return "never"
		}
		worst = max(worst, m)
	}
	return fmt.Sprintf("%.0fms", worst)
}

// Write writes results.json and the plots into dir, creating it. It
// returns the files written.
func (r *Report) Write(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create output directory: %w", err)
	}
	var files []string
	js, err := json.MarshalIndent(r.Results, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode results: %w", err)
	}
	path := filepath.Join(dir, "results.json")
	if err := os.WriteFile(path, append(js, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("write results: %w", err)
	}
	files = append(files, path)

	name := func(kind string) string { return filepath.Join(dir, r.Results.Scenario+"-"+kind+".png") }
	title := func(what string) string {
		return fmt.Sprintf("%s: %s, %s bottleneck", r.Results.Scenario, what, formatRate(float64(r.Results.Topology.RateBps)))
	}
	var errs []error
	var tput []plot.Series
	var panels []plot.Panel
	var cdf []plot.CDFSeries
	for _, runs := range r.series {
		p := plot.Panel{Label: runs[0].cc}
		c := plot.CDFSeries{Label: runs[0].cc}
		for _, s := range runs {
			p.Runs = append(p.Runs, toPlot(s.queue))
			for _, q := range s.queue {
				c.Values = append(c.Values, q.V)
			}
		}
		panels, cdf = append(panels, p), append(cdf, c)
		tput = append(tput, plot.Series{Label: runs[0].cc, Points: toPlot(runs[0].throughput)})
	}
	add := func(file string, err error) {
		if err != nil {
			errs = append(errs, err)
		} else {
			files = append(files, file)
		}
	}
	add(name("queue"), plot.QueuePanels(name("queue"), title("bottleneck queue, each CC's runs"), 0, 0, panels))
	add(name("queue-cdf"), plot.QueueCDF(name("queue-cdf"), title("CDF of the queue, all runs"), cdf))
	if r.Results.Scenario == ScenarioIncast {
		if starts := incastStarts(r.Config); len(starts) > 0 {
			at := starts[len(starts)/2]
			add(name("queue-incast-zoom"), plot.QueuePanels(name("queue-incast-zoom"),
				title(fmt.Sprintf("queue around the incast at %v", at)), at-5*time.Millisecond, at+45*time.Millisecond, panels))
		}
	}
	add(name("throughput"), plot.Throughput(name("throughput"), title("bottleneck throughput, first run"), tput))
	if cols := r.fctColumns(); len(cols) > 0 {
		bars := plot.Bars{Groups: cols}
		for _, c := range r.Results.CCs {
			bs := plot.BarSeries{Label: c.CC, Values: make([]float64, len(cols)),
				Lo: make([]float64, len(cols)), Hi: make([]float64, len(cols))}
			for i, b := range cols {
				bs.Values[i], bs.Lo[i], bs.Hi[i] = math.NaN(), math.NaN(), math.NaN()
				for _, f := range c.FCT {
					if f.Bucket == b {
						bs.Values[i] = tailUs(f) / 1e3
					}
				}
				if sp, ok := c.Figures["fct_p99_us_"+bucketKey(b)]; ok && sp.N > 1 {
					bs.Lo[i], bs.Hi[i] = sp.Min/1e3, sp.Max/1e3
				}
			}
			bars.Series = append(bars.Series, bs)
		}
		add(name("fct-p99"), plot.FCT(name("fct-p99"),
			title("FCT tail of all runs' flows; whiskers: each run's p99"), bars, "p99 FCT, or the highest supported (ms)"))
	}
	if r.Results.Scenario == ScenarioFairness {
		for _, runs := range r.series {
			s := runs[0]
			var flows []plot.Series
			for i, f := range s.perFlow {
				flows = append(flows, plot.Series{Label: fmt.Sprintf("flow %d", i+1), Points: toPlot(f)})
			}
			p := name("flows-" + s.cc)
			add(p, plot.Throughput(p, title(s.cc+" per-flow throughput, first run"), flows))
		}
	}
	return files, errors.Join(errs...)
}

// tailUs is a pooled bucket's p99, or the highest percentile it supports
// when it is too small for p99.
func tailUs(f PooledFCT) float64 {
	if f.P99Us != nil {
		return *f.P99Us
	}
	return f.TailUs
}

func toPlot(pts []stats.Point) []plot.Point {
	out := make([]plot.Point, len(pts))
	for i, p := range pts {
		out[i] = plot.Point{T: p.T, V: p.V}
	}
	return out
}
