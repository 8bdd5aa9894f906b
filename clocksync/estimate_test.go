package clocksync

import (
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestPure(t *testing.T) {
	// A pair sent 10 µs apart from t0 that took 30 µs to cross.
	const t0, gap, delay = 1_000_000, 10_000, 30_000
	pair := func(sendGap, recvGap int64) Pair {
		return Pair{
			First:  Probe{Send: t0, Recv: t0 + delay},
			Second: Probe{Send: t0 + sendGap, Recv: t0 + delay + recvGap},
		}
	}
	tests := []struct {
		name string
		pair Pair
		eps  int64
		want bool
	}{
		{"clean", pair(gap, gap), 0, true},
		{"clean with slack", pair(gap, gap), 100, true},
		{"second queued", pair(gap, gap+40_000), 100, false},
		{"first queued, gap squeezed", pair(gap, gap-4_000), 100, false},
		{"stretched by exactly eps", pair(gap, gap+100), 100, true},
		{"squeezed by exactly eps", pair(gap, gap-100), 100, true},
		{"stretched by eps+1", pair(gap, gap+101), 100, false},
		{"squeezed by eps+1", pair(gap, gap-101), 100, false},
		{"negative eps rejects even a clean pair", pair(gap, gap), -1, false},
		{"zero send gap", pair(0, 0), 100, false},
		{"negative send gap", pair(-gap, -gap), 100, false},
		{"reordered on the wire", pair(50, -50), 1000, false},
		{"zero receive gap", pair(50, 0), 1000, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.pair.Pure(tt.eps); got != tt.want {
				t.Errorf("%+v.Pure(%d) = %v, want %v", tt.pair, tt.eps, got, tt.want)
			}
		})
	}
}

// Units of the simulations: times are in ns, drifts dimensionless.
const (
	simUs     = 1e3
	simMs     = 1e6
	simSecond = 1e9
	simPPM    = 1e-6
)

// probeSim describes a synthetic window of probes between a local node,
// whose clock is true time, and a peer whose clock reads
// t + offset + drift*(t-ref) at true time t.
type probeSim struct {
	offset, drift float64 // the truth at ref
	minDelay      float64 // ns, both directions
	// fwdQueue and revQueue draw each probe's queueing delay in ns.
	fwdQueue, revQueue func(*rand.Rand) float64
}

// Simulated windows: 2 s from a Unix-epoch-sized start, 200 pairs a second
// each way, the two probes of a pair 10 µs apart.
const (
	simStart    = int64(1_700_000_000) * simSecond
	simWindow   = 2 * simSecond
	simPairs    = 400
	simPairGap  = 10 * simUs
	simRef      = simStart + simWindow/2
	simMinDelay = 20 * simUs
)

// peerClock returns the peer's clock reading minus simStart at local (true)
// time simStart+t. Times are kept relative to simStart, where float64 still
// resolves fractions of a ns.
func (s probeSim) peerClock(t float64) float64 {
	return t + s.offset + s.drift*(t-float64(simRef-simStart))
}

// simStamp returns the timestamp that reads t ns after simStart.
func simStamp(t float64) int64 {
	return simStart + int64(math.Round(t))
}

// observe draws one window of probes in both directions.
func (s probeSim) observe(rng *rand.Rand) Observations { return s.observeWindow(rng, 0) }

// observeWindow draws the probes of window w, the one that starts w
// windows after simStart.
func (s probeSim) observeWindow(rng *rand.Rand, w int) Observations {
	var obs Observations
	slot := float64(simWindow) / simPairs
	for k := range simPairs {
		for _, forward := range []bool{true, false} {
			base := float64(w)*simWindow + float64(k)*slot + rng.Float64()*(slot-simPairGap)
			for i := range 2 {
				send := base + float64(i)*simPairGap
				if forward {
					arrive := send + s.minDelay + s.fwdQueue(rng)
					obs.Forward = append(obs.Forward, Probe{Send: simStamp(send), Recv: simStamp(s.peerClock(arrive))})
				} else {
					arrive := send + s.minDelay + s.revQueue(rng)
					obs.Reverse = append(obs.Reverse, Probe{Send: simStamp(s.peerClock(send)), Recv: simStamp(arrive)})
				}
			}
		}
	}
	return obs
}

// expQueue returns a queueing delay drawn from an exponential distribution
// with the given mean in ns.
func expQueue(mean float64) func(*rand.Rand) float64 {
	return func(rng *rand.Rand) float64 { return rng.ExpFloat64() * mean }
}

// heavyQueue delays 80% of probes by 0 to 500 µs, uniformly, and the rest
// by an exponential 5 µs on average.
func heavyQueue(rng *rand.Rand) float64 {
	if rng.Float64() < 0.8 {
		return rng.Float64() * 500 * simUs
	}
	return rng.ExpFloat64() * 5 * simUs
}

func TestFitLineRecoversOffsetAndDrift(t *testing.T) {
	// With seeds raised to 20000, this test logged worst errors of 464 ns
	// and 0.92 ppm with exponential queueing (medians 35 ns and 0.064 ppm),
	// and 354 ns and 0.34 ppm with heavy forward queueing over light
	// reverse (medians 12 ns and 0.012 ppm); the bounds are over 3x those.
	exp50 := expQueue(50 * simUs)
	tests := []struct {
		name      string
		sim       probeSim
		maxOffset float64 // ns
		maxDrift  float64 // ppm
	}{
		{"+5 ms +20 ppm, exp 50 µs", probeSim{5 * simMs, 20 * simPPM, simMinDelay, exp50, exp50}, 1500, 3},
		{"-3 ms -15 ppm, exp 50 µs", probeSim{-3 * simMs, -15 * simPPM, simMinDelay, exp50, exp50}, 1500, 3},
		{"0 ms 0 ppm, exp 50 µs", probeSim{0, 0, simMinDelay, exp50, exp50}, 1500, 3},
		{"+5 ms +20 ppm, heavy forward", probeSim{5 * simMs, 20 * simPPM, simMinDelay, heavyQueue, expQueue(5 * simUs)}, 1200, 1.2},
		{"-3 ms -15 ppm, heavy forward", probeSim{-3 * simMs, -15 * simPPM, simMinDelay, heavyQueue, expQueue(5 * simUs)}, 1200, 1.2},
	}
	const seeds = 300
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var worstOffset, worstDrift float64
			for seed := range uint64(seeds) {
				rng := rand.New(rand.NewPCG(seed, 0xc10c))
				fit, err := FitLine(tt.sim.observe(rng), simRef)
				if err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				offErr := math.Abs(fit.Offset - tt.sim.offset)
				driftErr := math.Abs(fit.Drift - tt.sim.drift)
				worstOffset, worstDrift = max(worstOffset, offErr), max(worstDrift, driftErr)
				if offErr > tt.maxOffset {
					t.Errorf("seed %d: offset %.1f ns, want %.1f ± %.0f", seed, fit.Offset, tt.sim.offset, tt.maxOffset)
				}
				if driftErr > tt.maxDrift*simPPM {
					t.Errorf("seed %d: drift %.3f ppm, want %.3f ± %.2f", seed, fit.Drift/simPPM, tt.sim.drift/simPPM, tt.maxDrift)
				}
				// The true line clears every point by the minimum delay,
				// so the best margin is at least that, less a ns for
				// rounding, and with equal minimum delays both ways the
				// truth lies inside the band.
				if fit.Margin < simMinDelay-1 {
					t.Errorf("seed %d: margin %.1f ns, below the minimum delay %.0f", seed, fit.Margin, simMinDelay)
				}
				if offErr > fit.Margin+1 {
					t.Errorf("seed %d: offset error %.1f ns outside the margin %.1f", seed, offErr, fit.Margin)
				}
				if fit.Forward != 2*simPairs || fit.Reverse != 2*simPairs || fit.Ref != simRef {
					t.Errorf("seed %d: fit used %d forward, %d reverse, ref %d; want %d, %d, %d", seed, fit.Forward, fit.Reverse, fit.Ref, 2*simPairs, 2*simPairs, simRef)
				}
			}
			t.Logf("worst of %d seeds: offset %.0f ns, drift %.3f ppm", seeds, worstOffset, worstDrift/simPPM)
		})
	}
}

// probesAt returns the probes whose points, relative to base, are (t, y): a
// forward probe sent at base+t with u = y, or a reverse probe received at
// base+t with l = y.
func probesAt(base int64, forward bool, pts ...[2]int64) []Probe {
	probes := make([]Probe, len(pts))
	for i, p := range pts {
		if forward {
			probes[i] = Probe{Send: base + p[0], Recv: base + p[0] + p[1]}
		} else {
			probes[i] = Probe{Send: base + p[0] + p[1], Recv: base + p[0]}
		}
	}
	return probes
}

func TestFitLineExact(t *testing.T) {
	const base = simStart
	tests := []struct {
		name               string
		fwd, rev           [][2]int64
		ref                int64 // relative to base
		offset, drift, mrg float64
	}{
		{
			name:   "parallel lines",
			fwd:    [][2]int64{{0, 100}, {1000, 110}, {2000, 120}, {500, 400}},
			rev:    [][2]int64{{0, -100}, {1000, -90}, {2000, -80}, {1500, -300}},
			ref:    1000,
			offset: 10, drift: 0.01, mrg: 100,
		},
		{
			name:   "ref before the window",
			fwd:    [][2]int64{{0, 100}, {1000, 110}, {2000, 120}},
			rev:    [][2]int64{{0, -100}, {1000, -90}, {2000, -80}},
			ref:    -1000,
			offset: -10, drift: 0.01, mrg: 100,
		},
		{
			name:   "one instant",
			fwd:    [][2]int64{{5, 12}, {5, 10}, {5, 30}},
			rev:    [][2]int64{{5, -4}, {5, -8}},
			ref:    5,
			offset: 3, drift: 0, mrg: 7,
		},
		{
			name:   "not separable",
			fwd:    [][2]int64{{0, 0}, {10, 0}},
			rev:    [][2]int64{{5, 4}},
			ref:    0,
			offset: 2, drift: 0, mrg: -2,
		},
		{
			// Forward points all before the reverse ones leave the slope
			// unbounded; the fit falls back to 0.
			name:   "no overlap in time",
			fwd:    [][2]int64{{0, 50}, {10, 70}},
			rev:    [][2]int64{{20, -50}, {30, -40}},
			ref:    0,
			offset: 5, drift: 0, mrg: 45,
		},
		{
			// Every slope in [1, 2] gives the best margin; the one
			// closest to 0 wins.
			name:   "flat optimum above zero",
			fwd:    [][2]int64{{0, 0}, {10, 10}, {20, 30}},
			rev:    [][2]int64{{10, -100}},
			ref:    10,
			offset: -45, drift: 1, mrg: 55,
		},
		{
			name:   "flat optimum below zero",
			fwd:    [][2]int64{{0, 30}, {10, 10}, {20, 0}},
			rev:    [][2]int64{{10, -100}},
			ref:    10,
			offset: -45, drift: -1, mrg: 55,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obs := Observations{Forward: probesAt(base, true, tt.fwd...), Reverse: probesAt(base, false, tt.rev...)}
			fit, err := FitLine(obs, base+tt.ref)
			if err != nil {
				t.Fatal(err)
			}
			want := Fit{Ref: base + tt.ref, Offset: tt.offset, Drift: tt.drift, Margin: tt.mrg, Forward: len(tt.fwd), Reverse: len(tt.rev)}
			if !closeFit(fit, want, 1e-9) {
				t.Errorf("FitLine = %+v, want %+v", fit, want)
			}
		})
	}
}

// closeFit reports whether two fits agree, their floats within tol.
func closeFit(a, b Fit, tol float64) bool {
	near := func(x, y float64) bool { return math.Abs(x-y) <= tol*max(1, math.Abs(y)) }
	return a.Ref == b.Ref && a.Forward == b.Forward && a.Reverse == b.Reverse &&
		near(a.Offset, b.Offset) && near(a.Drift, b.Drift) && near(a.Margin, b.Margin)
}

func TestFitLineErrors(t *testing.T) {
	one := []Probe{{Send: 1, Recv: 2}}
	tests := []struct {
		name string
		obs  Observations
		want string
	}{
		{"nothing", Observations{}, "no forward probes"},
		{"no forward", Observations{Reverse: one}, "no forward probes"},
		{"no reverse", Observations{Forward: one}, "no reverse probes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FitLine(tt.obs, 0)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("FitLine error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestFitLineSinglePoints(t *testing.T) {
	// One probe each way: whatever their times, the slope is 0 and the
	// line runs midway between u and l.
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 1000 {
		send := simStart + rng.Int64N(simSecond)
		recv := send + rng.Int64N(10*simMs) - 5*simMs
		back := send + rng.Int64N(simSecond) - simSecond/2
		if i%4 == 0 {
			back = send // both at one instant
		}
		backSend := back + rng.Int64N(10*simMs) - 5*simMs
		obs := Observations{
			Forward: []Probe{{Send: send, Recv: recv}},
			Reverse: []Probe{{Send: backSend, Recv: back}},
		}
		ref := send + rng.Int64N(simSecond) - simSecond/2
		fit, err := FitLine(obs, ref)
		if err != nil {
			t.Fatal(err)
		}
		u, l := float64(recv-send), float64(backSend-back)
		want := Fit{Ref: ref, Offset: (u + l) / 2, Drift: 0, Margin: (u - l) / 2, Forward: 1, Reverse: 1}
		if fit.Drift != 0 || !closeFit(fit, want, 1e-12) {
			t.Fatalf("FitLine(%+v, %d) = %+v, want %+v", obs, ref, fit, want)
		}
	}
}

func TestFitLineMatchesBruteForce(t *testing.T) {
	// Small random point sets, both directions spanning the same times so
	// that the best margin is finite. The best margin over every slope
	// through two points of one side, which includes every hull edge, must
	// equal FitLine's, and FitLine's line must clear every point by it.
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 2000 {
		random := func(n int) [][2]int64 {
			pts := [][2]int64{{0, rng.Int64N(200) - 100}, {1000, rng.Int64N(200) - 100}}
			for range n {
				pts = append(pts, [2]int64{rng.Int64N(1001), rng.Int64N(200) - 100})
			}
			return pts
		}
		fwd, rev := random(rng.IntN(6)), random(rng.IntN(6))
		obs := Observations{Forward: probesAt(simStart, true, fwd...), Reverse: probesAt(simStart, false, rev...)}
		fit, err := FitLine(obs, simStart)
		if err != nil {
			t.Fatal(err)
		}
		margin := func(a float64) float64 {
			floor, ceil := math.Inf(1), math.Inf(-1)
			for _, p := range fwd {
				floor = min(floor, float64(p[1])-a*float64(p[0]))
			}
			for _, p := range rev {
				ceil = max(ceil, float64(p[1])-a*float64(p[0]))
			}
			return (floor - ceil) / 2
		}
		best := margin(0)
		for _, side := range [][][2]int64{fwd, rev} {
			for _, p := range side {
				for _, q := range side {
					if q[0] > p[0] {
						best = max(best, margin(float64(q[1]-p[1])/float64(q[0]-p[0])))
					}
				}
			}
		}
		if math.Abs(fit.Margin-best) > 1e-9 {
			t.Fatalf("case %d: fwd %v rev %v: margin %v, brute force %v", i, fwd, rev, fit.Margin, best)
		}
		for _, p := range fwd {
			if gap := float64(p[1]) - (fit.Offset + fit.Drift*float64(p[0])); gap < fit.Margin-1e-9 {
				t.Fatalf("case %d: forward point %v only %v above the line, margin %v", i, p, gap, fit.Margin)
			}
		}
		for _, p := range rev {
			if gap := (fit.Offset + fit.Drift*float64(p[0])) - float64(p[1]); gap < fit.Margin-1e-9 {
				t.Fatalf("case %d: reverse point %v only %v below the line, margin %v", i, p, gap, fit.Margin)
			}
		}
	}
}

func TestFitLineCompareProducts(t *testing.T) {
	const maxI, minI = math.MaxInt64, math.MinInt64
	tests := [][4]int64{
		{0, 0, 0, 0},
		{2, 3, 3, 2},
		{-2, 3, 2, -3},
		{-2, 3, 2, 3},
		{maxI, maxI, maxI, maxI - 1},
		{minI, minI, maxI, maxI},
		{minI, maxI, maxI, minI},
		{minI, 1, -1, maxI},
		{minI, -1, maxI, 1},
		{maxI, 2, minI, -1},
		{1 << 40, 1 << 40, 1<<40 + 1, 1<<40 - 1},
		{-(1 << 40), 1 << 40, -(1<<40 + 1), 1<<40 - 1},
	}
	for _, tt := range tests {
		a, b, c, d := tt[0], tt[1], tt[2], tt[3]
		ab := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
		cd := new(big.Int).Mul(big.NewInt(c), big.NewInt(d))
		want := ab.Cmp(cd)
		if got := compareProducts(a, b, c, d); got != want {
			t.Errorf("compareProducts(%d, %d, %d, %d) = %d, want %d", a, b, c, d, got, want)
		}
		if got := compareProducts(c, d, a, b); got != -want {
			t.Errorf("compareProducts(%d, %d, %d, %d) = %d, want %d", c, d, a, b, got, -want)
		}
	}
}

func TestMidpoint(t *testing.T) {
	// ex builds an exchange sent at local time s with the given one-way
	// delays, against a peer clock offset ahead by off, answered 1 µs
	// after it arrives.
	ex := func(s, off, fwd, rev int64) Exchange {
		at := s + fwd
		back := at + 1000
		return Exchange{
			Forward: Probe{Send: s, Recv: at + off},
			Reverse: Probe{Send: back + off, Recv: back + rev},
		}
	}
	const off = 5_000_000
	tests := []struct {
		name   string
		ex     []Exchange
		want   float64
		wantOK bool
	}{
		{"empty", nil, 0, false},
		{"symmetric", []Exchange{ex(0, off, 20_000, 20_000)}, off, true},
		{"least round trip wins", []Exchange{ex(0, off, 90_000, 20_000), ex(1e6, off, 20_000, 21_000), ex(2e6, off, 20_000, 80_000)}, off - 500, true},
		{"first of a tie", []Exchange{ex(0, off, 20_000, 22_000), ex(1e6, off, 22_000, 20_000)}, off - 1000, true},
		{"forward 100 µs slower", []Exchange{ex(0, off, 120_000, 20_000), ex(1e6, off, 125_000, 20_000)}, off + 50_000, true},
		{"negative offset", []Exchange{ex(0, -off, 30_000, 30_000)}, -off, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, ok := Midpoint(tt.ex)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("Midpoint = %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// exchanges draws one window of round trips: the local node sends a probe
// every 2.5 ms and the peer answers each 2 µs after it arrives.
func (s probeSim) exchanges(rng *rand.Rand) []Exchange {
	const n, turnaround = 800, 2 * simUs
	ex := make([]Exchange, n)
	for k := range ex {
		send := (float64(k) + rng.Float64()) * float64(simWindow) / n
		arrive := send + s.minDelay + s.fwdQueue(rng)
		reply := arrive + turnaround
		back := reply + s.minDelay + s.revQueue(rng)
		ex[k] = Exchange{
			Forward: Probe{Send: simStamp(send), Recv: simStamp(s.peerClock(arrive))},
			Reverse: Probe{Send: simStamp(s.peerClock(reply)), Recv: simStamp(back)},
		}
	}
	return ex
}

func TestMidpointAndFitLineBias(t *testing.T) {
	// Both estimators see the same round trips. A constant extra delay on
	// the forward path biases both by half of it: no probe geometry can
	// see a constant asymmetry. Drift, though, only FitLine follows; the
	// midpoint holds at its exchange's time, up to a second from ref.
	exp50 := expQueue(50 * simUs)
	slowForward := func(rng *rand.Rand) float64 { return 100*simUs + exp50(rng) }
	tests := []struct {
		name string
		sim  probeSim
		// Mean absolute errors, ns, must fall in these ranges.
		midLo, midHi, fitLo, fitHi float64
	}{
		{"forward 100 µs slower", probeSim{5 * simMs, 0, simMinDelay, slowForward, exp50}, 49_000, 51_000, 49_000, 51_000},
		{"symmetric, 20 ppm drift", probeSim{5 * simMs, 20 * simPPM, simMinDelay, exp50, exp50}, 5_000, 15_000, 0, 500},
	}
	const seeds = 200
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var midErr, fitErr float64
			for seed := range uint64(seeds) {
				rng := rand.New(rand.NewPCG(seed, 0xbeef))
				ex := tt.sim.exchanges(rng)
				mid, _, ok := Midpoint(ex)
				if !ok {
					t.Fatal("Midpoint found no exchange")
				}
				var obs Observations
				for _, e := range ex {
					obs.Forward = append(obs.Forward, e.Forward)
					obs.Reverse = append(obs.Reverse, e.Reverse)
				}
				fit, err := FitLine(obs, simRef)
				if err != nil {
					t.Fatal(err)
				}
				midErr += math.Abs(mid-tt.sim.offset) / seeds
				fitErr += math.Abs(fit.Offset-tt.sim.offset) / seeds
			}
			if midErr < tt.midLo || midErr > tt.midHi {
				t.Errorf("Midpoint mean error %.0f ns, want %.0f to %.0f", midErr, tt.midLo, tt.midHi)
			}
			if fitErr < tt.fitLo || fitErr > tt.fitHi {
				t.Errorf("FitLine mean error %.0f ns, want %.0f to %.0f", fitErr, tt.fitLo, tt.fitHi)
			}
			t.Logf("mean absolute error over %d seeds: Midpoint %.0f ns, FitLine %.0f ns", seeds, midErr, fitErr)
		})
	}
}

// TestEnvelopeDrift recovers the drift from the less queued direction, in
// either direction, with queueing that tilts FitLine's slope. The bounds
// are over 3x the worst of 300 seeds, logged below.
func TestEnvelopeDrift(t *testing.T) {
	tests := []struct {
		name     string
		sim      probeSim
		maxDrift float64 // ppm
	}{
		{"+5 ms +20 ppm, heavy forward", probeSim{5 * simMs, 20 * simPPM, simMinDelay, heavyQueue, expQueue(5 * simUs)}, 0.3},
		{"-3 ms -15 ppm, heavy forward", probeSim{-3 * simMs, -15 * simPPM, simMinDelay, heavyQueue, expQueue(5 * simUs)}, 0.3},
		{"+5 ms +20 ppm, heavy reverse", probeSim{5 * simMs, 20 * simPPM, simMinDelay, expQueue(5 * simUs), heavyQueue}, 0.3},
		{"-3 ms -15 ppm, exp 50 µs both ways", probeSim{-3 * simMs, -15 * simPPM, simMinDelay, expQueue(50 * simUs), expQueue(50 * simUs)}, 3},
	}
	const seeds = 300
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var worst, worstLine float64
			for seed := range uint64(seeds) {
				rng := rand.New(rand.NewPCG(seed, 0xe17e))
				obs := tt.sim.observe(rng)
				drift, ok := EnvelopeDrift(obs)
				if !ok {
					t.Fatalf("seed %d: no drift", seed)
				}
				err := math.Abs(drift - tt.sim.drift)
				worst = max(worst, err)
				if fit, ferr := FitLine(obs, simRef); ferr == nil {
					worstLine = max(worstLine, math.Abs(fit.Drift-tt.sim.drift))
				}
				if err > tt.maxDrift*simPPM {
					t.Errorf("seed %d: drift %.3f ppm, want %.3f ± %.2f", seed, drift/simPPM, tt.sim.drift/simPPM, tt.maxDrift)
				}
			}
			t.Logf("worst of %d seeds: %.3f ppm (FitLine's slope: %.3f ppm)", seeds, worst/simPPM, worstLine/simPPM)
		})
	}
}

func TestEnvelopeDriftNeedsTwoTimes(t *testing.T) {
	one := []Probe{{Send: simStart, Recv: simStart + 1000}}
	if _, ok := EnvelopeDrift(Observations{Forward: one, Reverse: one}); ok {
		t.Error("a drift from one probe each way")
	}
	if _, ok := EnvelopeDrift(Observations{}); ok {
		t.Error("a drift from no probes")
	}
	// Forward alone is enough: 2 µs over 1 s is 2 ppm.
	fwd := []Probe{{Send: simStart, Recv: simStart + 1000}, {Send: simStart + 1e9, Recv: simStart + 1e9 + 3000}}
	if d, ok := EnvelopeDrift(Observations{Forward: fwd}); !ok || math.Abs(d-2e-6) > 1e-12 {
		t.Errorf("drift %g, %v; want 2e-6", d, ok)
	}
}
