package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ccload/ccload/bench/plot"
	"github.com/ccload/ccload/bench/stats"
)

// Table writes one row per CC with the scenario's main metrics.
func (r *Report) Table(w io.Writer) error {
	res := r.Results
	fmt.Fprintf(w, "%s: %s bottleneck, %d KiB buffer, base RTT %.0fus, %v per CC, %s, kernel %s\n",
		res.Scenario, formatRate(float64(res.Topology.RateBps)), res.Topology.BufferBytes>>10, res.Topology.BaseRTTMicros,
		time.Duration(res.Workload.DurationSeconds*float64(time.Second)), workloadText(res.Workload), res.Machine.Kernel)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	head := []string{"cc", "ran as", "Mbit/s", "util", "queue p50", "p99", "max", "INT q p99", "drops", "retrans"}
	fctBuckets := r.fctColumns()
	for _, b := range fctBuckets {
		head = append(head, "FCT p99 "+b, "p99.9")
	}
	if res.Scenario == ScenarioFairness {
		head = append(head, "jain", "conv max")
	}
	if res.Scenario == ScenarioIncast {
		head = append(head, "drained", "drain RTTs p50", "p90", "util after p50")
	}
	head = append(head, "CC ns/run", "flows", "failed", "cpu")
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, c := range res.CCs {
		row := []string{c.CC, strings.Join(c.KernelCCs, ","), fmt.Sprintf("%.0f", c.ThroughputBps/1e6),
			fmt.Sprintf("%.0f%%", c.Utilization*100), kb(c.QueueP50Bytes), kb(c.QueueP99Bytes), kb(c.QueueMaxBytes),
			kb(c.INTQueueP99Bytes), fmt.Sprint(c.Drops), fmt.Sprint(c.Retransmits)}
		for _, b := range fctBuckets {
			p99, p999 := "-", "-"
			for _, f := range c.FCT {
				if f.Bucket == b {
					p99, p999 = us(f.P99Us), us(f.P999Us)
				}
			}
			row = append(row, p99, p999)
		}
		if res.Scenario == ScenarioFairness {
			jain, conv := "-", "-"
			if c.Jain != nil {
				jain = fmt.Sprintf("%.3f", *c.Jain)
			}
			if len(c.ConvergenceMillis) > 0 {
				conv = convText(c.ConvergenceMillis)
			}
			row = append(row, jain, conv)
		}
		if res.Scenario == ScenarioIncast {
			row = append(row, incastColumns(c.Incast)...)
		}
		row = append(row, ccCost(c), fmt.Sprint(c.Flows), fmt.Sprint(c.FlowsFailed), fmt.Sprintf("%.0f%%", c.CPUBusy*100))
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "queue: the bottleneck qdisc's backlog; INT q: the INT hop's model of it. FCT in us, by flow size.")
	if res.Scenario == ScenarioIncast {
		fmt.Fprintln(w, "drained: incasts whose queue fell to one GSO packet (64 KiB) for 1.5 ms before the next; drain RTTs: from the peak, in RTTs at the peak; util after: the 100 ms after the drain.")
	}
	fmt.Fprintln(w, "CC ns/run: mean run time of the CC's busiest BPF program (one run per ACK). cpu: all CPUs, whole emulation.")
	return nil
}

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

func kb(b float64) string { return fmt.Sprintf("%.0fKB", b/1e3) }
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

// ccCost is the mean run time of the CC's busiest struct_ops program.
func ccCost(c CCResult) string {
	for _, p := range c.BPF {
		if strings.HasPrefix(p.Program, "int_") {
			continue
		}
		return fmt.Sprintf("%.0f", p.NsPerRun)
	}
	return "-"
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
	var queue, tput []plot.Series
	for _, s := range r.series {
		queue = append(queue, plot.Series{Label: s.cc, Points: toPlot(s.queue)})
		tput = append(tput, plot.Series{Label: s.cc, Points: toPlot(s.throughput)})
	}
	if err := plot.Queue(name("queue"), title("bottleneck queue"), queue); err != nil {
		errs = append(errs, err)
	} else {
		files = append(files, name("queue"))
	}
	if err := plot.Throughput(name("throughput"), title("bottleneck throughput"), tput); err != nil {
		errs = append(errs, err)
	} else {
		files = append(files, name("throughput"))
	}
	if cols := r.fctColumns(); len(cols) > 0 {
		bars := plot.Bars{Groups: cols}
		for _, c := range r.Results.CCs {
			bs := plot.BarSeries{Label: c.CC, Values: make([]float64, len(cols))}
			for i, b := range cols {
				for _, f := range c.FCT {
					if f.Bucket == b {
						bs.Values[i] = f.P99Us / 1e3
					}
				}
			}
			bars.Series = append(bars.Series, bs)
		}
		if err := plot.FCT(name("fct-p99"), title("99th-percentile FCT"), bars, "p99 FCT (ms)"); err != nil {
			errs = append(errs, err)
		} else {
			files = append(files, name("fct-p99"))
		}
	}
	if r.Results.Scenario == ScenarioFairness {
		for _, s := range r.series {
			var flows []plot.Series
			for i, f := range s.perFlow {
				flows = append(flows, plot.Series{Label: fmt.Sprintf("flow %d", i+1), Points: toPlot(f)})
			}
			p := name("flows-" + s.cc)
			if err := plot.Throughput(p, title(s.cc+" per-flow throughput"), flows); err != nil {
				errs = append(errs, err)
			} else {
				files = append(files, p)
			}
		}
	}
	return files, errors.Join(errs...)
}

func toPlot(pts []stats.Point) []plot.Point {
	out := make([]plot.Point, len(pts))
	for i, p := range pts {
		out[i] = plot.Point{T: p.T, V: p.V}
	}
	return out
}
