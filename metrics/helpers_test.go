package metrics

import (
	"bytes"
	"os/exec"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/ccload/ccload/internal/testutil"
)

// promtool is the checker of Debian's prometheus package.
const promtool = "/usr/bin/promtool"

// replay is a prometheus.Collector of metrics collected earlier (in
// another network namespace, say), described as c describes them.
type replay struct {
	c       *Collector
	metrics []prometheus.Metric
}

func (r replay) Describe(ch chan<- *prometheus.Desc) { r.c.Describe(ch) }

func (r replay) Collect(ch chan<- prometheus.Metric) {
	for _, m := range r.metrics {
		ch <- m
	}
}

// collectAll runs c.Collect on the calling goroutine (and so in its
// thread's network namespace) and returns what it sent.
func collectAll(c prometheus.Collector) []prometheus.Metric {
	ch := make(chan prometheus.Metric)
	done := make(chan []prometheus.Metric)
	go func() {
		var ms []prometheus.Metric
		for m := range ch {
			ms = append(ms, m)
		}
		done <- ms
	}()
	c.Collect(ch)
	close(ch)
	return <-done
}

// gather registers cs in a pedantic registry, which checks every metric
// against its description, and gathers it.
func gather(t testing.TB, cs ...prometheus.Collector) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			t.Fatalf("register: %v", err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	return mfs
}

// exposition writes mfs in the text format, as a scrape would get it.
func exposition(t testing.TB, mfs []*dto.MetricFamily) []byte {
	t.Helper()
	var buf bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
			t.Fatalf("write %s: %v", mf.GetName(), err)
		}
	}
	return buf.Bytes()
}

// promtoolCheck pipes text to `promtool check metrics` and fails t on
// anything it reports.
func promtoolCheck(t testing.TB, text []byte) {
	t.Helper()
	testutil.RequireFile(t, promtool, "promtool (Debian package prometheus)")
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(text)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s\non:\n%s", err, out, text)
	}
}

// series returns the series of family name whose labels include want.
func series(mfs []*dto.MetricFamily, name string, want map[string]string) []*dto.Metric {
	var out []*dto.Metric
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue metrics
				}
			}
			out = append(out, m)
		}
	}
	return out
}

// valueOf is a series' value, whatever its type.
func valueOf(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	}
	return m.GetUntyped().GetValue()
}

// value is the value of the one series of name with labels want; it fails
// t unless there is exactly one.
func value(t testing.TB, mfs []*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	s := series(mfs, name, want)
	if len(s) != 1 {
		t.Fatalf("%s%v: %d series, want 1", name, want, len(s))
	}
	return valueOf(s[0])
}

// labelsOf is a series' labels.
func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}
