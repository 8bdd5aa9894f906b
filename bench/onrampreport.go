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

// Table prints the onramp scenario: one row per variant (each CC without
// and with On-Ramp), then one row per CC comparing the two, then the
// targets. Per-run figures are medians with their range over the runs
// (min-max); RCTs and background FCTs are percentiles of every run's
// requests and flows pooled.
func (r *OnRampReport) Table(w io.Writer) error {
	res := r.Results
	t, wl, o := res.Topology, res.Workload, res.OnRamp
	marking := "no CE marking"
	if t.ECNThresholdBytes > 0 {
		marking = fmt.Sprintf("CE above %d KB by %s", t.ECNThresholdBytes/1000, t.ECNMarker)
	}
	repeats := "1 run"
	if res.Repeat > 1 {
		repeats = fmt.Sprintf("%d repeats", res.Repeat)
	}
	bgCap := ""
	if wl.BackgroundMaxBytes > 0 {
		bgCap = fmt.Sprintf(" (capped at %d KB)", wl.BackgroundMaxBytes/1000)
	}
	fmt.Fprintf(w, "onramp: %s bottleneck, %d KiB buffer, %s, base RTT %.0fus, queue sampled every %v; fq (%s) and GSO %d KiB on all %d senders; kernel %s\n",
		formatRate(float64(t.RateBps)), t.BufferBytes>>10, marking, t.BaseRTTMicros, time.Duration(wl.SampleMicros*float64(time.Microsecond)),
		senderRateText(t.SenderRateBps), t.GSOBytes>>10, t.Servers+t.BackgroundSenders, res.Machine.Kernel)
	fmt.Fprintf(w, "  requests: %d x %d KiB responses %s, Poisson at %.2f/s (incast load %.2f) from %.1fs; web-search at load %.2f%s from %d senders; %s; %v per run, %s\n",
		wl.Fanout, wl.ResponseBytes>>10, responseConnsText(wl.ResponseConns), wl.RequestRate, wl.IncastLoad, wl.RequestsFromSeconds, wl.BackgroundLoad, bgCap,
		t.BackgroundSenders, longFlowsText(wl.LongFlows), time.Duration(wl.DurationSeconds*float64(time.Second)), repeats)
	holds := ""
	if o.CCHolds {
		holds = "; the CCs that can take its holds out of their RTT samples (onramp_holds=1)"
	}
	if o.Strawman {
		holds += "; the strawman: pauses of O - T, without lag compensation"
	}
	if o.Observe {
		holds += "; observe only: it paused nothing, so the runs with it differ by its presence alone"
	}
	if o.SparseStamps {
		holds += "; quiet flows stamped sparsely"
	} else {
		holds += "; every data segment stamped"
	}
	fmt.Fprintf(w, "  On-Ramp: T %v, max pause %v, gain %g, on %d interfaces (every sender and the client)%s\n",
		time.Duration(o.ThresholdNs), time.Duration(o.MaxPauseNs), o.Gain, o.Interfaces, holds)

	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	buckets := []string{stats.BucketSmall, stats.BucketMedium, stats.BucketLarge}
	head := []string{"variant", "ran as", "requests", "RCT p50 ms", "p99 ms", "net p99 ms", "start lag p99 ms"}
	for _, b := range buckets {
		head = append(head, "bg FCT p99 ms "+b)
	}
	head = append(head, "long flow Mbit/s", "util %", "queue p99 KB", "drops", "retrans", "RTOs", "tail RTO", "pauses", "paused s", "echoes > T %", "RTT held %", "cpu %")
	costs := o.BPFStats
	if costs {
		head = append(head, "On-Ramp BPF %", "floor ns tc", "sockops")
	}
	head = append(head, "failed")
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, v := range res.Variants {
		f := func(name string, format func(float64) string) string { return spreadCell(v.Figures, name, format) }
		row := []string{v.Name, strings.Join(v.KernelCCs, ","), fmt.Sprint(v.RCT.Count), ms(v.RCT.P50Us), ms(v.RCT.P99Us),
			ms(v.NetRCT.P99Us), f("start_lag_p99_us", scaled(1e-3, "%.1f"))}
		for _, b := range buckets {
			row = append(row, r.bgP99Cell(v, b))
		}
		failed := 0
		for _, run := range v.Runs {
			failed += run.ResponsesFailed + run.BackgroundFailed + run.SinkBad + run.ResponseConnsFailed
			if run.LongFlowFailed {
				failed++
			}
		}
		pauses, paused, above, held, orBPF, tcFloor, sockopsFloor := "-", "-", "-", "-", "-", "-", "-"
		if v.OnRamp {
			pauses, paused = f("pauses", scaled(1, "%.0f")), f("pause_seconds", scaled(1, "%.2f"))
			above = f("above_threshold_share", scaled(100, "%.1f"))
			held = f("rtt_held_share", scaled(100, "%.1f"))
			orBPF = f("onramp_bpf_busy", scaled(100, "%.2f"))
			tcFloor = f("tc_floor_ns_per_run", scaled(1, "%.0f"))
			sockopsFloor = f("sockops_floor_ns_per_run", scaled(1, "%.0f"))
		}
		row = append(row, f("long_flow_bps", scaled(1e-6, "%.1f")), f("utilization", scaled(100, "%.0f")),
			f("queue_p99_bytes", kbf), f("drops", scaled(1, "%.0f")), f("retransmits", scaled(1, "%.0f")),
			f("rtos", scaled(1, "%.0f")), tailRTOCell(v.RCTTail), pauses, paused, above, held, f("cpu_busy", scaled(100, "%.0f")))
		if costs {
			row = append(row, orBPF, tcFloor, sockopsFloor)
		}
		row = append(row, fmt.Sprint(failed))
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "RCT: from a request's arrival to the kernel's timestamp of the ACK of its last response byte, over every run's requests pooled;")
	fmt.Fprintln(w, "net: each request's slowest response alone, from its own start (its first write, or its connect with a connection per response): the RCT without the start lag, how late the last response started.")
	fmt.Fprintln(w, "bg FCT: the web-search flows', pooled, nearest-rank p99 (with n flows); other figures: median over the runs (min-max).")
	if costs {
		fmt.Fprintln(w, "cpu: the machine's CPUs busy over the run; On-Ramp BPF: the share of them On-Ramp's programs ran (the kernel's BPF statistics, on for every program in every run: each run also reads the clock twice).")
		fmt.Fprintln(w, "floor: ns per run of a tc and a sockops program that do nothing, run where On-Ramp's run in the runs with On-Ramp (whose cpu includes them): what a run costs there before any work.")
	} else {
		fmt.Fprintln(w, "cpu: the machine's CPUs busy over the run.")
	}
	fmt.Fprintln(w, "RTOs: retransmission timeouts over every flow; tail RTO: of the requests at or beyond the highest percentile the pooled requests support, those with a response that took one.")
	sampled := "the share of the echoes the senders sampled (at most one per 100 us per peer)"
	if o.SparseStamps {
		sampled = "the share of the time, as the senders' echoes sampled it (at most one per 100 us per peer, each weighing the time since the one before, up to 1.6 ms),"
	}
	fmt.Fprintf(w, "echoes > T: %s whose one-way delay was above T; with On-Ramp observing only, how often it would have paused.\n", sampled)
	fmt.Fprintln(w, "RTT held: the share of the CC's RTT samples it took without the time On-Ramp held their segment (θ-PowerTCP; - for a CC that keeps no count).")
	if res.Repeat > 1 {
		fmt.Fprintf(w, "The variants' runs interleave; repeat i uses workload seed %d+i for every variant.\n", wl.Seed)
	}

	if err := res.writeLossRepair(w); err != nil {
		return err
	}

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	head = []string{"cc", "RCT p99 ms without", "with", "ratio", "p50 ratio", "tail ratio", "net p99 ratio", "long flow Mbit/s without", "with", "loss %", "paired loss %"}
	for _, b := range buckets {
		head = append(head, "bg FCT tail ratio "+b)
	}
	head = append(head, "worse with On-Ramp")
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, c := range res.Comparisons {
		tail := "-"
		if c.RCTTailRatio != nil {
			tail = fmt.Sprintf("p%g: %.2fx", c.RCTTailP, *c.RCTTailRatio)
			if c.RCTTailP <= 99 {
				tail += intervalText(c.RCTTailRatioInterval)
			}
		}
		row := []string{c.CC, ms(c.RCTP99WithoutUs), ms(c.RCTP99WithUs), ratioCell(c.RCTP99Ratio), ratioCell(c.RCTP50Ratio), tail, ratioCell(c.NetRCTP99Ratio),
			mbits(c.LongFlowWithoutBps, wl.LongFlows), mbits(c.LongFlowWithBps, wl.LongFlows), lossCell(c.LongFlowLoss), pairedLossCell(c.LongFlowPairedLoss)}
		for _, b := range buckets {
			cell := "-"
			for _, x := range c.FCT {
				if x.Bucket == b && x.TailRatio != nil {
					cell = fmt.Sprintf("p%g: %.2fx", x.TailP, *x.TailRatio) + intervalText(x.TailRatioInterval)
				}
			}
			row = append(row, cell)
		}
		var worse []string
		if c.WorseRCT {
			worse = append(worse, fmt.Sprintf("RCT p%g", min(c.RCTTailP, 99)))
		}
		for _, b := range c.WorseFCT {
			for _, x := range c.FCT {
				if x.Bucket == b {
					worse = append(worse, fmt.Sprintf("FCT p%g %s", x.TailP, b))
				}
			}
		}
		if len(worse) == 0 {
			worse = []string{"no"}
		}
		row = append(row, strings.Join(worse, ", "))
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "ratio: without/with On-Ramp (above 1: On-Ramp is faster); tail ratio: at the highest percentile both pooled samples support")
	fmt.Fprintln(w, "(ten requests at or beyond it; p99 needs 1,000 requests, and below that p99 is close to the slowest request); loss: 1 - with/without of the medians;\npaired loss: 1 - with/without of each repeat's two runs, which share a workload seed: median (min-max) over the repeats.")
	fmt.Fprintln(w, "bg FCT tail ratio: the same for the background flows of each size, at their p99, or the highest percentile below it that both pooled samples support.")
	fmt.Fprintf(w, "worse: a tail (the p99, or below it the highest percentile both pooled samples support) more than %.0f%% above the one without On-Ramp.\n", 100*res.Targets.WorseMargin)
	if res.Repeat >= stats.MinBootstrapRepeats {
		fmt.Fprintf(w, "(lo-hi) after a tail ratio: the middle %.0f%% of that ratio over %d resamples of the repeats, each repeat's two runs kept together: how far it moves with\n", 100*onrampIntervalLevel, onrampIntervalDraws)
		fmt.Fprintln(w, "which runs the bench happened to make. A worse tail whose interval lies wholly below 1 is worse beyond the repeats' noise.")
	}

	if err := res.writePairedFCT(w, buckets); err != nil {
		return err
	}

	tg, vd := res.Targets, res.Verdict
	if o.Observe {
		fmt.Fprintln(w, "targets: not judged: On-Ramp only observed (--onramp-observe) and paused nothing")
		if len(vd.Worse) > 0 {
			fmt.Fprintf(w, "worse with On-Ramp observing: %s\n", strings.Join(vd.Worse, "; "))
			res.writeBeyondNoise(w, "observing")
		}
		return nil
	}
	rct := fmt.Sprintf("target: %s RCT p99 without/with >= %gx: ", tg.RCTCC, tg.RCTRatio)
	switch {
	case vd.RCTMet == nil:
		rct += fmt.Sprintf("not measured (%s did not run)", tg.RCTCC)
	default:
		for _, c := range res.Comparisons {
			if c.CC == tg.RCTCC {
				rct += ratioCell(c.RCTP99Ratio)
			}
		}
		rct += " - " + metText(*vd.RCTMet)
	}
	fmt.Fprintln(w, rct)
	if wl.LongFlows == 0 {
		fmt.Fprintf(w, "target: long-flow throughput loss with On-Ramp <= %.0f%%: not measured (no long flow)\n", 100*tg.LongFlowLoss)
	} else {
		var losses []string
		for _, c := range res.Comparisons {
			losses = append(losses, c.CC+" "+lossCell(c.LongFlowLoss)+"%")
		}
		fmt.Fprintf(w, "target: long-flow throughput loss with On-Ramp <= %.0f%%: %s - %s\n", 100*tg.LongFlowLoss, strings.Join(losses, ", "), metText(vd.LongFlowMet))
	}
	if len(vd.Worse) == 0 {
		fmt.Fprintln(w, "worse with On-Ramp: none")
	} else {
		fmt.Fprintf(w, "worse with On-Ramp: %s\n", strings.Join(vd.Worse, "; "))
		res.writeBeyondNoise(w, "")
	}
	return nil
}

// writeBeyondNoise prints which of the verdict's worse figures are worse
// beyond the repeats' noise, when there are enough repeats to tell; mode
// ("observing", or empty) follows "with On-Ramp" as in the worse line.
func (res *OnRampResults) writeBeyondNoise(w io.Writer, mode string) {
	if res.Repeat < stats.MinBootstrapRepeats {
		return
	}
	list := "none"
	if len(res.Verdict.WorseBeyondNoise) > 0 {
		list = strings.Join(res.Verdict.WorseBeyondNoise, "; ")
	}
	with := "with On-Ramp"
	if mode != "" {
		with += " " + mode
	}
	fmt.Fprintf(w, "worse %s beyond the repeats' noise (interval below 1): %s\n", with, list)
}

// intervalText is " (lo-hi)" for a ratio's interval over resamples of the
// repeats, or "" without one.
func intervalText(iv *stats.Interval) string {
	if iv == nil {
		return ""
	}
	return fmt.Sprintf(" (%.2f-%.2f)", iv.Lo, iv.Hi)
}

// writeLossRepair prints how the senders' TCP found and repaired losses,
// per variant, from their TcpExt counters, and what the long flow's
// TCP_INFO said; nothing for results from before they were recorded.
func (res *OnRampResults) writeLossRepair(w io.Writer) error {
	recorded := false
	for _, v := range res.Variants {
		_, probes := v.Figures["loss_probes"]
		_, long := v.Figures["long_flow_cwnd_p50"]
		recorded = recorded || probes || long
	}
	if !recorded {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	cols := []struct{ head, fig string }{
		{"retrans", "retransmits"}, {"DSACKed", "dsack_dups"}, {"loss probes", "loss_probes"},
		{"recoveries", "recoveries"}, {"undone", "undos"}, {"reordering seen", "reorder_seen"},
		{"timeouts", "timeouts"}, {"DSACKs", "dsacks"}, {"rtx skipped: in host queue", "rtx_in_host_queue"},
		{"long flow cwnd p50", "long_flow_cwnd_p50"}, {"srtt p50 ms", "long_flow_srtt_p50_us"},
		{"sndbuf-limited %", "long_flow_sndbuf_limited_share"}, {"rwnd-limited %", "long_flow_rwnd_limited_share"},
	}
	head := []string{"variant"}
	for _, c := range cols {
		head = append(head, c.head)
	}
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, v := range res.Variants {
		row := []string{v.Name}
		for _, c := range cols {
			format := scaled(1, "%.0f")
			switch c.fig {
			case "long_flow_srtt_p50_us":
				format = scaled(1e-3, "%.2f")
			case "long_flow_sndbuf_limited_share", "long_flow_rwnd_limited_share":
				format = scaled(100, "%.0f")
			}
			row = append(row, spreadCell(v.Figures, c.fig, format))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "Loss detection and repair at the senders, and the long flow, per run (the TcpExt counters of the servers' and background senders' namespaces, /proc/net/netstat):")
	fmt.Fprintln(w, "loss probes: TCPLossProbes; recoveries: TCPSackRecovery + TCPRenoRecovery; undone: TCPFullUndo + TCPPartialUndo + TCPDSACKUndo + TCPLossUndo;")
	fmt.Fprintln(w, "reordering seen: TCPSACKReorder + TCPTSReorder + TCPRenoReorder; timeouts: TCPTimeouts; DSACKs: TCPDSACKRecv + TCPDSACKOfoRecv; in host queue: TCPSpuriousRtxHostQueues.")
	fmt.Fprintln(w, "long flow: its TCP_INFO, the medians of its window (segments) and smoothed RTT sampled every 20 ms after the first tenth of the run,")
	fmt.Fprintln(w, "and the share of the time it had data outstanding that its send buffer or the receiver's window limited it (tcpi_sndbuf_limited, tcpi_rwnd_limited over tcpi_busy_time).")
	return nil
}

// bgP99Cell is variant v's pooled background FCT p99 of bucket b, in ms,
// with its count, from the comparisons.
func (r *OnRampReport) bgP99Cell(v OnRampVariant, b string) string {
	for _, c := range r.Results.Comparisons {
		if c.CC != v.CC {
			continue
		}
		for _, x := range c.FCT {
			if x.Bucket != b {
				continue
			}
			if v.OnRamp {
				return fmt.Sprintf("%s (n %d)", ms(x.P99WithUs), x.CountWith)
			}
			return fmt.Sprintf("%s (n %d)", ms(x.P99WithoutUs), x.CountWithout)
		}
	}
	return "-"
}

// spreadCell formats figure name: the median, and its range with more
// than one run; "-" when no run had it.
func spreadCell(figs map[string]Spread, name string, format func(float64) string) string {
	s, ok := figs[name]
	if !ok {
		return "-"
	}
	if s.N < 2 {
		return format(s.Median)
	}
	return spreadText(s, format)
}

// spreadText is a spread as median (min-max), each number in format; as
// median (min to max) when the range reaches below zero, where a dash
// would read as a minus.
func spreadText(s Spread, format func(float64) string) string {
	sep := "-"
	if s.Min < 0 {
		sep = " to "
	}
	return fmt.Sprintf("%s (%s%s%s)", format(s.Median), format(s.Min), sep, format(s.Max))
}

// writePairedFCT prints, per CC and size bucket, the background flows'
// mean FCT without over with On-Ramp per repeat (FCTComparison's
// PairedMeanRatio), and in how many repeats On-Ramp was slower; then per
// CC the CPU On-Ramp added per repeat (OnRampComparison.CPUAdded).
func (res *OnRampResults) writePairedFCT(w io.Writer, buckets []string) error {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	head := []string{"cc"}
	for _, b := range buckets {
		head = append(head, "bg mean FCT ratio "+b, "slower")
	}
	head = append(head, "cpu points added", "busier")
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, c := range res.Comparisons {
		row := []string{c.CC}
		for _, b := range buckets {
			ratio, slower := "-", "-"
			for _, x := range c.FCT {
				if x.Bucket == b && x.PairedMeanRatio != nil {
					ratio = spreadText(*x.PairedMeanRatio, scaled(1, "%.2f"))
					slower = fmt.Sprintf("%d/%d", x.PairedSlower, x.PairedMeanRatio.N)
				}
			}
			row = append(row, ratio, slower)
		}
		added, busier := "-", "-"
		if c.CPUAdded != nil {
			added = spreadText(*c.CPUAdded, scaled(100, "%.1f"))
			busier = fmt.Sprintf("%d/%d", c.CPUBusier, c.CPUAdded.N)
		}
		row = append(row, added, busier)
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "bg mean FCT ratio: each repeat's mean background FCT of the size without over with On-Ramp, the two runs sharing the repeat's workload seed: median (min-max)")
	fmt.Fprintln(w, "over the repeats (above 1: On-Ramp is faster); slower: the repeats whose run with On-Ramp had the longer mean. Not a target: it shows a steady change that a pooled tail hides.")
	fmt.Fprintln(w, "cpu points added: each repeat's cpu % with On-Ramp less without, median (min-max); busier: the repeats busier with On-Ramp. On-Ramp's programs run on every packet,")
	fmt.Fprintln(w, "on the CPUs that also run the flows' processes: a CC that sends small packets (a short queue, a small window) pays the most.")
	return nil
}

// tailRTOCell is "k/n": k of the n slowest requests had a response that
// took a retransmission timeout; "-" when unknown.
func tailRTOCell(t *RCTTail) string {
	if t == nil || t.WithRTO == nil {
		return "-"
	}
	return fmt.Sprintf("%d/%d", *t.WithRTO, t.Requests)
}

func ms(us float64) string { return fmt.Sprintf("%.1f", us/1e3) }

func ratioCell(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.2fx", *r)
}

func lossCell(l *float64) string {
	if l == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f", 100**l)
}

// pairedLossCell is a paired loss's median (min-max) in per cent.
func pairedLossCell(s *Spread) string {
	if s == nil {
		return "-"
	}
	return spreadText(*s, scaled(100, "%.1f"))
}

func metText(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// Write writes results.json and the plots to dir: onramp-rct-cdf.png (the
// pooled RCTs' distribution per variant), onramp-rct-p99.png (RCT p99
// per CC without and with On-Ramp, whiskers over the runs) and
// onramp-fct-p99.png (the background flows' p99 by size). It returns the
// files written.
func (r *OnRampReport) Write(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	js, err := json.MarshalIndent(r.Results, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode results: %w", err)
	}
	resPath := filepath.Join(dir, "results.json")
	if err := os.WriteFile(resPath, append(js, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("write %s: %w", resPath, err)
	}
	files := []string{resPath}
	var errs []error
	add := func(file string, err error) {
		if err != nil {
			errs = append(errs, err)
		} else {
			files = append(files, file)
		}
	}
	rate := formatRate(float64(r.Results.Topology.RateBps))

	var cdf []plot.CDFSeries
	for i, v := range r.Results.Variants {
		s := plot.CDFSeries{Label: v.Name}
		if i < len(r.rcts) {
			s.Values = r.rcts[i]
		}
		cdf = append(cdf, s)
	}
	p := filepath.Join(dir, "onramp-rct-cdf.png")
	add(p, plot.CDF(p, plot.CDFOptions{Title: fmt.Sprintf("onramp: request completion times, all runs, %s bottleneck", rate),
		XLabel: "RCT (ms)", XScale: 1e-3}, cdf))

	bars := plot.Bars{}
	without := plot.BarSeries{Label: "without On-Ramp"}
	with := plot.BarSeries{Label: "with On-Ramp"}
	for _, c := range r.Results.CCs() {
		bars.Groups = append(bars.Groups, c)
		for _, s := range []*plot.BarSeries{&without, &with} {
			v, ok := r.Results.variant(c, s == &with)
			val, lo, hi := math.NaN(), math.NaN(), math.NaN()
			if ok && v.RCT.Count > 0 {
				val = v.RCT.P99Us / 1e3
				if sp, ok := v.Figures["rct_p99_us"]; ok && sp.N > 1 {
					lo, hi = sp.Min/1e3, sp.Max/1e3
				}
			}
			s.Values, s.Lo, s.Hi = append(s.Values, val), append(s.Lo, lo), append(s.Hi, hi)
		}
	}
	bars.Series = []plot.BarSeries{without, with}
	p = filepath.Join(dir, "onramp-rct-p99.png")
	add(p, plot.Bar(p, plot.BarOptions{Title: fmt.Sprintf("onramp: RCT p99 of all runs' requests; whiskers: each run's p99, %s", rate),
		XLabel: "congestion control", YLabel: "RCT p99 (ms)", Scale: plot.ScaleLinear}, bars))

	groups := []string{stats.BucketSmall, stats.BucketMedium, stats.BucketLarge}
	fb := plot.Bars{Groups: groups}
	for _, v := range r.Results.Variants {
		s := plot.BarSeries{Label: v.Name}
		for _, b := range groups {
			val := math.NaN()
			for _, c := range r.Results.Comparisons {
				if c.CC != v.CC {
					continue
				}
				for _, x := range c.FCT {
					if x.Bucket == b {
						val = x.P99WithoutUs / 1e3
						if v.OnRamp {
							val = x.P99WithUs / 1e3
						}
					}
				}
			}
			s.Values = append(s.Values, val)
		}
		fb.Series = append(fb.Series, s)
	}
	p = filepath.Join(dir, "onramp-fct-p99.png")
	add(p, plot.FCT(p, fmt.Sprintf("onramp: background FCT p99, all runs' flows, %s", rate), fb, "p99 FCT (ms)"))
	return files, errors.Join(errs...)
}

// CCs lists the CCs of the results, in run-list order.
func (r OnRampResults) CCs() []string {
	var out []string
	for _, v := range r.Variants {
		if len(out) == 0 || out[len(out)-1] != v.CC {
			out = append(out, v.CC)
		}
	}
	return out
}

// variant finds cc's variant with or without On-Ramp.
func (r OnRampResults) variant(cc string, on bool) (OnRampVariant, bool) {
	for _, v := range r.Variants {
		if v.CC == cc && v.OnRamp == on {
			return v, true
		}
	}
	return OnRampVariant{}, false
}

// mbits is a long-flow rate in Mbit/s, or "-" for a run without one.
func mbits(bps float64, longFlows int) string {
	if longFlows == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", bps/1e6)
}

// responseConnsText says how the servers sent their responses, for the
// table's header.
func responseConnsText(conns string) string {
	if conns == "persistent" {
		return "on one persistent connection per server"
	}
	return "on a connection each"
}

// longFlowsText names the run's long flows for the table's header.
func longFlowsText(n int) string {
	if n == 0 {
		return "no long flow"
	}
	return fmt.Sprintf("%d long flow", n)
}
