package workload

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// fixedSize is a distribution where every flow is 1250 bytes (10000 bits).
func fixedSize(t *testing.T) CDF {
	t.Helper()
	return mustCDF(t, CDFPoint{1250, 1})
}

func TestRate(t *testing.T) {
	tests := []struct {
		name string
		cfg  func(t *testing.T) ArrivalConfig
		want float64
	}{
		// 0.5 · 1e6 bit/s / (8 · 1250 B) = 5e5 / 1e4 = 50 flows/s.
		{"fixed size", func(t *testing.T) ArrivalConfig {
			return ArrivalConfig{Load: 0.5, LinkBps: 1e6, Sizes: fixedSize(t)}
		}, 50},
		// Full load: 1 · 1e6 / 1e4 = 100 flows/s.
		{"full load", func(t *testing.T) ArrivalConfig {
			return ArrivalConfig{Load: 1, LinkBps: 1e6, Sizes: fixedSize(t)}
		}, 100},
		// 0.5 · 1e10 / (8 · 1665830.8) ≈ 375.2 flows/s.
		{"web search 10G", func(*testing.T) ArrivalConfig {
			return ArrivalConfig{Load: 0.5, LinkBps: 10e9, Sizes: WebSearch()}
		}, 0.5 * 10e9 / (8 * 1665830.8)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.cfg(t).Rate()
			if err != nil {
				t.Fatal(err)
			}
			if !closeTo(got, tc.want, 1e-9) {
				t.Fatalf("Rate() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestArrivalsErrors(t *testing.T) {
	good := func(t *testing.T) ArrivalConfig {
		return ArrivalConfig{Load: 0.5, LinkBps: 1e6, Sizes: fixedSize(t), Senders: 2, Duration: time.Second, MaxFlows: 10}
	}
	tests := []struct {
		name   string
		change func(*ArrivalConfig)
		want   string
	}{
		{"zero load", func(c *ArrivalConfig) { c.Load = 0 }, "load 0 out of range"},
		{"load above 1", func(c *ArrivalConfig) { c.Load = 1.5 }, "load 1.5 out of range"},
		{"NaN load", func(c *ArrivalConfig) { c.Load = math.NaN() }, "out of range"},
		{"zero link rate", func(c *ArrivalConfig) { c.LinkBps = 0 }, "link rate 0"},
		{"infinite link rate", func(c *ArrivalConfig) { c.LinkBps = math.Inf(1) }, "positive, finite rate"},
		{"empty sizes", func(c *ArrivalConfig) { c.Sizes = CDF{} }, "build it with NewCDF or WebSearch"},
		{"no senders", func(c *ArrivalConfig) { c.Senders = 0 }, "give at least 1"},
		{"zero duration", func(c *ArrivalConfig) { c.Duration = 0 }, "give a positive duration"},
		{"zero cap", func(c *ArrivalConfig) { c.MaxFlows = 0 }, "cap of at least 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good(t)
			tc.change(&cfg)
			_, err := Arrivals(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Arrivals error = %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := Arrivals(good(t)); err != nil {
		t.Fatalf("valid config rejected: %v", err)
	}
}

func TestArrivalsPoissonRate(t *testing.T) {
	// λ = 50 flows/s (see TestRate) over 2000 s: λ·T = 100000 flows
	// expected; the Poisson standard deviation is √100000 ≈ 316 (0.3%).
	cfg := ArrivalConfig{
		Load: 0.5, LinkBps: 1e6, Sizes: fixedSize(t),
		Senders: 4, Duration: 2000 * time.Second, MaxFlows: 1_000_000, Seed: 9,
	}
	got, err := Arrivals(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := float64(len(got)); !closeTo(n, 100000, 0.02) {
		t.Fatalf("%d arrivals, want 100000 ± 2%%", len(got))
	}
	perSender := make([]int, cfg.Senders)
	for i, a := range got {
		if a.At < 0 || a.At >= cfg.Duration {
			t.Fatalf("arrival %d at %v, outside [0, %v)", i, a.At, cfg.Duration)
		}
		if i > 0 && a.At < got[i-1].At {
			t.Fatalf("arrival %d at %v before arrival %d at %v", i, a.At, i-1, got[i-1].At)
		}
		if a.Bytes != 1250 {
			t.Fatalf("arrival %d has %d bytes, want 1250", i, a.Bytes)
		}
		perSender[a.Sender]++ // panics, failing the test, if out of range
	}
	// Uniform senders: each gets a quarter, 25000 ± 2%.
	for s, n := range perSender {
		if !closeTo(float64(n), 25000, 0.02) {
			t.Fatalf("sender %d got %d flows, want 25000 ± 2%%", s, n)
		}
	}
}

func TestArrivalsOfferedLoad(t *testing.T) {
	// Web search at 40% of 10 Gbit/s for 1000 s: the flows must carry
	// 0.4 · 1e10 bit/s · 1000 s / 8 = 5e11 bytes, within 3%.
	cfg := ArrivalConfig{
		Load: 0.4, LinkBps: 10e9, Sizes: WebSearch(),
		Senders: 16, Duration: 1000 * time.Second, MaxFlows: 1_000_000, Seed: 5,
	}
	got, err := Arrivals(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, a := range got {
		total += float64(a.Bytes)
	}
	if !closeTo(total, 5e11, 0.03) {
		t.Fatalf("offered %.3g bytes, want 5e11 ± 3%%", total)
	}
}

func TestArrivalsBounded(t *testing.T) {
	// λ = 100 flows/s over an hour would be 360000 flows; the cap is 10.
	cfg := ArrivalConfig{
		Load: 1, LinkBps: 1e6, Sizes: fixedSize(t),
		Senders: 1, Duration: time.Hour, MaxFlows: 10,
	}
	got, err := Arrivals(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 10 {
		t.Fatalf("%d arrivals, want the cap of 10", len(got))
	}
}

func TestArrivalsDeterministic(t *testing.T) {
	cfg := ArrivalConfig{
		Load: 0.3, LinkBps: 25e9, Sizes: WebSearch(),
		Senders: 8, Duration: 2 * time.Second, MaxFlows: 100_000, Seed: 77,
	}
	a, err := Arrivals(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Arrivals(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) == 0 || !slices.Equal(a, b) {
		t.Fatalf("same config gave different (or no) arrivals: %d vs %d", len(a), len(b))
	}
	cfg.Seed++
	c, err := Arrivals(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(a, c) {
		t.Fatal("different seeds gave identical arrivals")
	}
}

func TestIncast(t *testing.T) {
	tests := []struct {
		name   string
		fanout int
		bytes  int64
		want   []Arrival
	}{
		{"three senders", 3, 2000, []Arrival{{0, 2000, 0}, {0, 2000, 1}, {0, 2000, 2}}},
		{"one sender", 1, 500_000, []Arrival{{0, 500_000, 0}}},
		{"zero fanout", 0, 2000, nil},
		{"negative fanout", -4, 2000, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Incast(tc.fanout, tc.bytes); !slices.Equal(got, tc.want) {
				t.Fatalf("Incast(%d, %d) = %v, want %v", tc.fanout, tc.bytes, got, tc.want)
			}
		})
	}
}
