package clocksync

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"slices"
)

// Probe is one probe packet's timestamps in ns. Send is read on the
// sender's clock and Recv on the receiver's, so Recv-Send is the one-way
// delay plus the receiver's clock minus the sender's.
type Probe struct{ Send, Recv int64 }

// Pair is a coded probe pair: two probes sent back to back, First before
// Second, by the same sender to the same receiver.
type Pair struct{ First, Second Probe }

// Pure reports whether the pair crossed the network untouched: both the send
// gap and the receive gap are positive, and they differ by at most eps ns.
// A pair whose second packet waited in a queue the first one did not (or
// the other way round) arrives with a stretched or squeezed gap and is not
// pure. A negative eps rejects every pair.
func (p Pair) Pure(eps int64) bool {
	sendGap := p.Second.Send - p.First.Send
	recvGap := p.Second.Recv - p.First.Recv
	if sendGap <= 0 || recvGap <= 0 {
		return false
	}
	d := recvGap - sendGap
	return d <= eps && -d <= eps
}

// Observations holds one window's pure probes between this node (local)
// and one peer. Forward probes go local to peer (Send on the local clock,
// Recv on the peer's); Reverse probes go peer to local (Send on the peer's
// clock, Recv on the local one).
type Observations struct{ Forward, Reverse []Probe }

// Fit is the peer's clock relative to the local one over a window, as a line
// in local time: offset(t) = Offset + Drift*(t-Ref), where offset is the
// peer's clock minus the local clock.
//
// Margin is half the vertical gap between the two lines that bound the
// forward points from below and the reverse points from above at the fitted
// slope. It is an error bound only when the minimum one-way delays are the
// same both ways. Then the true line clears every point by that minimum
// delay d, so Margin >= d, and at any time where the gap between the points
// is at most 2*Margin + d wide (at the points that fix the fit, and nearly
// so across a window probed densely both ways) the true offset is within
// Margin of the fitted one. A constant difference between the two
// directions' minimum delays shifts the fit by half of it, and no probe
// geometry can reveal it.
type Fit struct {
	// Ref is the local-clock time in ns at which Offset holds, as the
	// caller asked.
	Ref int64
	// Offset is the peer's clock minus the local clock at Ref, in ns.
	Offset float64
	// Drift is the rate at which the offset grows, dimensionless: 1e-6 is
	// 1 ppm, the peer's clock gaining 1 µs per local second.
	Drift float64
	// Margin is half the gap between the bounding lines at the fitted
	// slope, in ns. It is negative when no line separates the forward
	// points from the reverse ones.
	Margin float64
	// Forward and Reverse count the probes the fit was given in each
	// direction.
	Forward, Reverse int
}

// FitLine fits the line of maximum margin between the forward and the
// reverse probes of obs, and returns it with Offset taken at the local time
// ref.
//
// The geometry: a forward probe sent at local time t has
// u = Recv-Send = offset(t) + delay, the receiver's clock having moved on
// by the delay (times 1+drift) while the sender's stood at Send; every
// delay is positive, so the point (t, u) lies above the true offset line. A
// reverse probe received at local time t has l = Send-Recv =
// offset(t) - delay, its Send read that much earlier, so (t, l) lies below
// it. FitLine finds the slope a and intercept b that maximise the margin m
// with u >= a*t + b + m for every forward point and l <= a*t + b - m for
// every reverse point, and returns the centre line of that band.
//
// For a fixed slope the best margin is half the gap between the lowest
// forward line and the highest reverse line of that slope, a concave
// piecewise linear function of the slope. It bends only at the slopes of the
// edges of the forward points' lower convex hull and of the reverse points'
// upper convex hull, so FitLine walks those slopes in order and stops where
// the function turns down. Hull and slope comparisons are done in exact
// integer arithmetic. Where several slopes tie for the best margin, the one
// closest to zero wins: with all points at one instant the slope is 0.
//
// If the forward probes all come before the reverse probes in time, or all
// after, the margin grows without bound as the slope tilts, so the drift
// cannot be told from the data; FitLine then fits a slope of 0. Times are
// taken relative to the window's earliest probe so that float64 keeps ns
// precision; differences between timestamps must fit in an int64.
//
// It is an error for either direction to have no probes.
func FitLine(obs Observations, ref int64) (Fit, error) {
	if len(obs.Forward) == 0 {
		return Fit{}, fmt.Errorf("fit offset line: no forward probes (local to peer), need at least one in each direction")
	}
	if len(obs.Reverse) == 0 {
		return Fit{}, fmt.Errorf("fit offset line: no reverse probes (peer to local), need at least one in each direction")
	}
	origin := earliestLocalTime(obs)
	yBase := obs.Forward[0].Recv - obs.Forward[0].Send
	fwd := make([]hullPoint, len(obs.Forward))
	for i, p := range obs.Forward {
		fwd[i] = hullPoint{t: p.Send - origin, y: p.Recv - p.Send - yBase}
	}
	rev := make([]hullPoint, len(obs.Reverse))
	for i, p := range obs.Reverse {
		rev[i] = hullPoint{t: p.Recv - origin, y: p.Send - p.Recv - yBase}
	}
	lower := lowerHull(fwd)
	upper := upperHull(rev)
	a := bestSlope(lower, upper)

	floor := math.Inf(1) // min over forward points of u - a*t
	for _, p := range lower {
		floor = min(floor, float64(p.y)-a*float64(p.t))
	}
	ceil := math.Inf(-1) // max over reverse points of l - a*t
	for _, p := range upper {
		ceil = max(ceil, float64(p.y)-a*float64(p.t))
	}
	b := (floor + ceil) / 2
	return Fit{
		Ref:     ref,
		Offset:  float64(yBase) + b + a*float64(ref-origin),
		Drift:   a,
		Margin:  (floor - ceil) / 2,
		Forward: len(obs.Forward),
		Reverse: len(obs.Reverse),
	}, nil
}

// FitAtSlope is FitLine with the slope given: the drift, when something
// knows it better than one window's line (the agent takes it from
// EnvelopeDrift over several windows). With the slope fixed, the margin's maximum is exact and
// cheap: half the gap between the lowest forward point and the highest
// reverse point, each measured along that slope.
func FitAtSlope(obs Observations, slope float64, ref int64) (Fit, error) {
	if len(obs.Forward) == 0 || len(obs.Reverse) == 0 {
		return Fit{}, fmt.Errorf("fit offset at a given slope: %d forward and %d reverse probes, need at least one each way", len(obs.Forward), len(obs.Reverse))
	}
	origin := earliestLocalTime(obs)
	yBase := obs.Forward[0].Recv - obs.Forward[0].Send
	floor, ceil := math.Inf(1), math.Inf(-1)
	for _, p := range obs.Forward {
		floor = min(floor, float64(p.Recv-p.Send-yBase)-slope*float64(p.Send-origin))
	}
	for _, p := range obs.Reverse {
		ceil = max(ceil, float64(p.Send-p.Recv-yBase)-slope*float64(p.Recv-origin))
	}
	return Fit{
		Ref:     ref,
		Offset:  float64(yBase) + (floor+ceil)/2 + slope*float64(ref-origin),
		Drift:   slope,
		Margin:  (floor - ceil) / 2,
		Forward: len(obs.Forward),
		Reverse: len(obs.Reverse),
	}, nil
}

// EnvelopeDrift estimates the drift from one direction alone: the slope of
// the line that bounds that direction's points on their near side (below
// the forward points, above the reverse ones) and lies closest to them on
// average. That line is the hull edge over the points' mean time (the
// linear program of Zhang, Liu and Xia, INFOCOM 2002). Each direction's
// queueing only lifts its own points off the line, so the direction whose
// points lie closer to their line on average, the less queued one, gives
// the drift; a queue that one direction holds for seconds, which tilts
// FitLine's slope (and any slope fitted to the offsets it biases), does
// not move it. It needs two probes at different times in a direction to use
// it, and reports ok false when neither has them.
func EnvelopeDrift(obs Observations) (drift float64, ok bool) {
	fwd := make([]hullPoint, len(obs.Forward))
	for i, p := range obs.Forward {
		fwd[i] = hullPoint{t: p.Send, y: p.Recv - p.Send}
	}
	rev := make([]hullPoint, len(obs.Reverse))
	for i, p := range obs.Reverse {
		// Negated, so that the reverse points' upper bound is a lower
		// one, whose slope is the drift negated.
		rev[i] = hullPoint{t: p.Recv, y: p.Recv - p.Send}
	}
	best := math.Inf(1)
	for _, dir := range []struct {
		pts  []hullPoint
		sign float64
	}{{fwd, 1}, {rev, -1}} {
		slope, excess, found := lowerEnvelope(dir.pts)
		if found && excess < best {
			best, drift, ok = excess, dir.sign*slope, true
		}
	}
	return drift, ok
}

// lowerEnvelope returns the slope of the line below every point of pts
// that is highest at their mean time, and the mean height of the points
// above it. found is false without two distinct times.
func lowerEnvelope(pts []hullPoint) (slope, excess float64, found bool) {
	if len(pts) < 2 {
		return 0, 0, false
	}
	// Relative to the first point, so that the sums stay exact enough.
	t0, y0 := pts[0].t, pts[0].y
	var st, sy float64
	for _, p := range pts {
		st += float64(p.t - t0)
		sy += float64(p.y - y0)
	}
	n := float64(len(pts))
	mean := st / n
	hull := lowerHull(pts)
	if len(hull) < 2 {
		return 0, 0, false
	}
	// The edge over the mean time; the hull spans every point's time.
	i := 1
	for i < len(hull)-1 && float64(hull[i].t-t0) < mean {
		i++
	}
	a, b := hull[i-1], hull[i]
	slope = edgeSlope(a, b).float()
	at := float64(a.y-y0) + slope*(mean-float64(a.t-t0)) // the line at the mean time
	return slope, sy/n - at, true
}

// earliestLocalTime returns the earliest local-clock time among the probes:
// the Send of a forward probe or the Recv of a reverse one.
func earliestLocalTime(obs Observations) int64 {
	t := obs.Forward[0].Send
	for _, p := range obs.Forward {
		t = min(t, p.Send)
	}
	for _, p := range obs.Reverse {
		t = min(t, p.Recv)
	}
	return t
}

// hullPoint is a probe as a point of the fit: t is local time and y is
// u or l, both in ns relative to the window's origins.
type hullPoint struct{ t, y int64 }

// lowerHull returns the lower convex hull of pts by the monotone chain, in
// increasing t, keeping only the lowest point of each t and dropping
// collinear points, so that its edge slopes strictly increase.
func lowerHull(pts []hullPoint) []hullPoint {
	sorted := sortedByTime(pts)
	hull := make([]hullPoint, 0, len(sorted))
	for i, p := range sorted {
		if i > 0 && sorted[i-1].t == p.t {
			continue // a higher point at the same instant
		}
		for len(hull) >= 2 && hullTurn(hull[len(hull)-2], hull[len(hull)-1], p) <= 0 {
			hull = hull[:len(hull)-1]
		}
		hull = append(hull, p)
	}
	return hull
}

// upperHull returns the upper convex hull of pts by the monotone chain, in
// increasing t, keeping only the highest point of each t and dropping
// collinear points, so that its edge slopes strictly decrease.
func upperHull(pts []hullPoint) []hullPoint {
	sorted := sortedByTime(pts)
	hull := make([]hullPoint, 0, len(sorted))
	for i, p := range sorted {
		if i+1 < len(sorted) && sorted[i+1].t == p.t {
			continue // a lower point at the same instant
		}
		for len(hull) >= 2 && hullTurn(hull[len(hull)-2], hull[len(hull)-1], p) >= 0 {
			hull = hull[:len(hull)-1]
		}
		hull = append(hull, p)
	}
	return hull
}

// sortedByTime returns a copy of pts sorted by t, then by y.
func sortedByTime(pts []hullPoint) []hullPoint {
	s := slices.Clone(pts)
	slices.SortFunc(s, func(a, b hullPoint) int {
		if c := cmp.Compare(a.t, b.t); c != 0 {
			return c
		}
		return cmp.Compare(a.y, b.y)
	})
	return s
}

// hullTurn returns the sign of the cross product of o->a and o->b: positive
// when o, a, b turn counter-clockwise, 0 when they are collinear.
func hullTurn(o, a, b hullPoint) int {
	return compareProducts(a.t-o.t, b.y-o.y, a.y-o.y, b.t-o.t)
}

// hullSlope is the slope dy/dt of a hull edge as an exact fraction; dt > 0.
type hullSlope struct{ dy, dt int64 }

// edgeSlope returns the slope of the edge from p to q, which has q.t > p.t.
func edgeSlope(p, q hullPoint) hullSlope {
	return hullSlope{dy: q.y - p.y, dt: q.t - p.t}
}

// compareSlopes returns -1, 0 or +1 as a is less than, equal to or greater
// than b.
func compareSlopes(a, b hullSlope) int {
	return compareProducts(a.dy, b.dt, b.dy, a.dt)
}

// float returns the slope as a float64.
func (s hullSlope) float() float64 {
	return float64(s.dy) / float64(s.dt)
}

// bestSlope returns the slope that maximises the margin between the lower
// hull of the forward points and the upper hull of the reverse points.
//
// For slope a the margin is m(a) = (min over lower of y - a*t - max over
// upper of y - a*t)/2. Between two breakpoints one vertex of each hull is
// active and m'(a) = (t of the upper vertex - t of the lower vertex)/2, so
// walking the breakpoints in increasing order, advancing along the lower
// hull from its first vertex and back along the upper hull from its last,
// finds where m' turns from positive to negative. The derivative's sign is
// kept as an integer, so the walk is exact.
func bestSlope(lower, upper []hullPoint) float64 {
	p := 0              // active vertex of the lower hull
	q := len(upper) - 1 // active vertex of the upper hull
	deriv := upper[q].t - lower[p].t
	if deriv < 0 {
		return 0 // m grows without bound as the slope goes to -inf
	}
	// The optimal slopes form the interval [lo, hi]; loFinite and hiFinite
	// say whether its ends are breakpoints or infinite.
	var lo, hi hullSlope
	loFound, loFinite, hiFinite := deriv == 0, false, false
	for p < len(lower)-1 || q > 0 {
		var c hullSlope
		switch {
		case p == len(lower)-1:
			c = edgeSlope(upper[q-1], upper[q])
		case q == 0:
			c = edgeSlope(lower[p], lower[p+1])
		default:
			c = edgeSlope(lower[p], lower[p+1])
			if r := edgeSlope(upper[q-1], upper[q]); compareSlopes(r, c) < 0 {
				c = r
			}
		}
		for p < len(lower)-1 && compareSlopes(edgeSlope(lower[p], lower[p+1]), c) == 0 {
			p++
		}
		for q > 0 && compareSlopes(edgeSlope(upper[q-1], upper[q]), c) == 0 {
			q--
		}
		deriv = upper[q].t - lower[p].t
		if !loFound && deriv <= 0 {
			lo, loFound, loFinite = c, true, true
		}
		if deriv < 0 {
			hi, hiFinite = c, true
			break
		}
	}
	switch {
	case !loFound:
		return 0 // m grows without bound as the slope goes to +inf
	case loFinite && lo.dy > 0:
		return lo.float()
	case hiFinite && hi.dy < 0:
		return hi.float()
	default:
		return 0 // zero lies in [lo, hi]
	}
}

// compareProducts returns -1, 0 or +1 as a*b is less than, equal to or
// greater than c*d, computed exactly in 128 bits.
func compareProducts(a, b, c, d int64) int {
	hi1, lo1 := mul128(a, b)
	hi2, lo2 := mul128(c, d)
	if hi1 != hi2 {
		return cmp.Compare(hi1, hi2)
	}
	return cmp.Compare(lo1, lo2)
}

// mul128 returns the signed 128-bit product of a and b as its high word
// (signed) and low word.
func mul128(a, b int64) (hi int64, lo uint64) {
	h, l := bits.Mul64(uint64(a), uint64(b))
	hi = int64(h)
	// The unsigned product counts a negative factor as factor + 2^64;
	// take the excess back out of the high word.
	if a < 0 {
		hi -= b
	}
	if b < 0 {
		hi -= a
	}
	return hi, l
}

// Exchange is one round trip: a probe local to peer and the peer's answer
// peer to local.
type Exchange struct{ Forward, Reverse Probe }

// Midpoint is the naive NTP-style estimate of the peer's clock minus the
// local one. Of the exchanges it takes the one with the least round-trip
// time, (Reverse.Recv-Forward.Send) - (Reverse.Send-Forward.Recv), the
// first of them on a tie, and returns its midpoint offset
// ((Forward.Recv-Forward.Send) + (Reverse.Send-Reverse.Recv))/2. That
// assumes the two one-way delays of the exchange are equal, so any
// difference between them biases the result by half of it; and it holds at
// the exchange's own time, with no drift: at, the local clock halfway
// through the round trip. ok is false when ex is empty.
func Midpoint(ex []Exchange) (offset float64, at int64, ok bool) {
	best := -1
	var bestRTT int64
	for i, e := range ex {
		rtt := (e.Reverse.Recv - e.Forward.Send) - (e.Reverse.Send - e.Forward.Recv)
		if best < 0 || rtt < bestRTT {
			best, bestRTT = i, rtt
		}
	}
	if best < 0 {
		return 0, 0, false
	}
	e := ex[best]
	sum := (e.Forward.Recv - e.Forward.Send) + (e.Reverse.Send - e.Reverse.Recv)
	return float64(sum) / 2, e.Forward.Send + (e.Reverse.Recv-e.Forward.Send)/2, true
}
