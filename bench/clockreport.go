package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/ccload/ccload/bench/plot"
)

// Table prints the clock scenario's figures, one row per load and
// estimate: |offset error| p50, p99 and max in ns over every agent, peer
// and counted window.
func (r *ClockReport) Table(w io.Writer) error {
	res := r.Results
	fmt.Fprintf(w, "clock: %d agents, window %.0f ms, %.0f probe pairs/s per peer, bottleneck %s; injected offsets up to %s and drifts up to %.0f ppm\n",
		res.Agents, res.WindowMs, res.ProbeRate, formatRate(float64(res.RateBps)), maxInjectedOffset(res.Clocks), maxInjectedDrift(res.Clocks))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "load\tachieved\testimate\tsamples\t|error| p50 ns\tp99 ns\tmax ns\t")
	for _, l := range res.Loads {
		rows := []struct {
			name string
			s    ErrorSummary
		}{
			{"published", l.Published},
			{fmt.Sprintf("  after %s", settleLabel(l)), l.Settled},
			{"  across bottleneck", l.AcrossBottleneck},
			{"direct fit", l.Direct},
			{"midpoint (NTP)", l.Midpoint},
			{"ptp4l", l.PTP4L},
		}
		for i, row := range rows {
			load, achieved := "", ""
			if i == 0 {
				load, achieved = fmt.Sprintf("%.0f%%", l.Load*100), fmt.Sprintf("%.0f%%", l.AchievedLoad*100)
			}
			if row.s.N == 0 {
				fmt.Fprintf(tw, "%s\t%s\t%s\t0\t-\t-\t-\t\n", load, achieved, row.name)
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.0f\t%.0f\t%.0f\t\n", load, achieved, row.name, row.s.N, row.s.P50, row.s.P99, row.s.Max)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "load\twindows\tpure pairs\t|drift error| p50 ppm\tp99 ppm\tmax ppm\t")
	for _, l := range res.Loads {
		fmt.Fprintf(tw, "%.0f%%\t%d\t%.0f%%\t%.3f\t%.3f\t%.3f\t\n", l.Load*100, l.Windows, l.PureShare*100, l.DriftPPM.P50, l.DriftPPM.P99, l.DriftPPM.Max)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, l := range res.Loads {
		if l.PTP4LError != "" {
			fmt.Fprintf(w, "note: at load %.0f%%, ptp4l: %s\n", l.Load*100, l.PTP4LError)
		}
	}
	return nil
}

func maxInjectedOffset(cs []InjectedClock) time.Duration {
	var m int64
	for _, c := range cs {
		m = max(m, c.OffsetNs, -c.OffsetNs)
	}
	return time.Duration(m)
}

func maxInjectedDrift(cs []InjectedClock) float64 {
	var m float64
	for _, c := range cs {
		m = max(m, c.DriftPPM, -c.DriftPPM)
	}
	return m
}

// Write writes results.json and clock-error.png (the largest published
// |error| of each window, one line per load) to dir, and returns the
// files written.
func (r *ClockReport) Write(dir string) ([]string, error) {
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
	var series []plot.Series
	for _, l := range r.Results.Loads {
		s := plot.Series{Label: fmt.Sprintf("load %.0f%%", l.Load*100)}
		for _, p := range l.Series {
			s.Points = append(s.Points, plot.Point{T: time.Duration(p.AtMs * float64(time.Millisecond)), V: p.ErrorNs})
		}
		series = append(series, s)
	}
	png := filepath.Join(dir, "clock-error.png")
	err = plot.Lines(png, plot.LineOptions{
		Title:  "clock agents: largest published |offset error| per window",
		XLabel: "time (s)", YLabel: "|offset error| (ns)", XUnit: time.Second, YFromZero: true,
	}, series)
	if err != nil {
		return files, err
	}
	return append(files, png), nil
}

// settleLabel names when load l's settled rows start.
func settleLabel(l ClockLoad) string {
	return (time.Duration(l.SettledAfterMs) * time.Millisecond).String()
}
