package clocksync

import (
	"fmt"
	"math"
	"net/netip"
	"sort"
)

// The end of a window: fit each probed peer's line, correct the offsets
// over the loops of the probe graph this agent knows (its own edges, and
// those its peers sent), publish, and send its own edges on.
//
// The graph. Node 0 is this agent. An edge is one agent's fit of another's
// clock against its own: this agent's fits, and the fits its neighbours
// sent in edges messages. A neighbour's line is in the neighbour's time,
// so it is evaluated where the neighbour's clock reads this window's end:
// this agent's reading plus the neighbour's offset, which the first of two
// solves provides (the difference is offset times drift: 400 ns for 10 ms
// and 40 ppm, too much to ignore, and second order after one pass).

type meshEdge struct {
	from, to netip.Addr
	edge     WireEdge
}

// endWindow runs at each window's end.
func (a *Agent) endWindow() {
	a.mu.Lock()
	a.window++
	ref := a.cfg.Clock.Now()
	report := WindowReport{Window: a.window, Ref: ref}
	own := a.fitPeers(ref, &report)
	a.expire(ref)
	edges := append([]meshEdge(nil), own...)
	for k, h := range a.edges {
		edges = append(edges, meshEdge{from: k.from, to: k.to, edge: h.edge})
	}
	sol, err := a.solve(ref, edges)
	if err != nil {
		// An edge a neighbour sent makes the system unsolvable: this
		// agent's own edges still say what it measured.
		a.cfg.Logf("network effect over %d edges: %v; publishing this agent's own fits", len(edges), err)
		if sol, err = a.solve(ref, own); err != nil {
			a.cfg.Logf("network effect over this agent's own %d edges: %v", len(own), err)
		}
	}
	entries := a.entries(ref, sol, &report)
	targets := a.gossipTargets()
	a.fillPeers()
	discover := a.discoveryTargets()
	a.mu.Unlock()

	a.publish(entries)
	a.gossip(own, targets)
	a.discoverPeers(discover)
	// Interfaces that appeared since need the scrub program too.
	if err := a.scrub.syncInNetns(); err != nil {
		a.cfg.Logf("%v", err)
	}
	if a.cfg.OnWindow != nil {
		a.cfg.OnWindow(report)
	}
}

// edgeErr is an edge's standard error from its fit's margin.
func edgeErr(f Fit) float64 { return math.Max(math.Abs(f.Margin), minEdgeErr) }

// fitPeers fits each probed peer's window and starts the next. Call with
// mu held.
func (a *Agent) fitPeers(ref int64, report *WindowReport) []meshEdge {
	var own []meshEdge
	for peer, st := range a.probed {
		pr := PeerReport{Peer: peer, Probed: true, Pairs: st.pairs, PurePairs: st.pure}
		if fit, ok := st.fit(ref); ok {
			pr.Direct, pr.HasDirect = fit, true
			own = append(own, meshEdge{from: netip.Addr{}, to: peer, edge: WireEdge{
				Peer: peer, Ref: ref, Offset: fit.Offset, Drift: fit.Drift, Err: edgeErr(fit),
			}})
		}
		if mid, at, ok := Midpoint(st.ex); ok {
			pr.Midpoint, pr.MidpointAt, pr.HasMidpoint = mid, at, true
		}
		report.Peers = append(report.Peers, pr)
		if st.answers == 0 {
			st.silent++
		} else {
			st.silent, st.warned = 0, false
		}
		if st.silent >= silentWindows && !st.warned && a.explicit[peer] {
			st.warned = true
			a.cfg.Logf("no answer from %s for %d windows: is `ccload clock run` running there, on UDP port %d?", st.to, st.silent, st.to.Port())
		}
		st.obs, st.ex, st.pairs, st.pure, st.answers = Observations{}, nil, 0, 0, 0
	}
	// Replace silent peers when others wait: at once by an agent heard
	// from, after silentWindows by any candidate.
	waitingHeard := 0
	for c := range a.heard {
		if a.candidates[c] && a.probed[c] == nil {
			waitingHeard++
		}
	}
	for peer, st := range a.probed {
		if st.silent == 0 || len(a.candidates) <= len(a.probed) {
			continue
		}
		if waitingHeard > 0 || st.silent >= silentWindows {
			delete(a.probed, peer)
			if !a.explicit[peer] {
				delete(a.candidates, peer)
				delete(a.heard, peer)
			}
			if waitingHeard > 0 {
				waitingHeard--
			}
		}
	}
	return own
}

// The fit of a peer. A line through probes that all met a queue sits too
// far toward the queued direction: where one direction's queue stays
// busy for a whole window, no probe sees the path empty and the margin
// (half the gap between the directions' bounding lines) grows by the
// queueing delay. Three defences:
//   - the drift comes from the less queued direction alone
//     (EnvelopeDrift), over the last driftSpan windows, and only the
//     offset is fitted to both directions at that slope; a free slope
//     would tilt toward the queued side, and carry that tilt into the
//     offset wherever it is read;
//   - the offset's fit spans the last fitSpan windows, not one, so a
//     probe that found the queue empty in any of them anchors it;
//   - a fit whose margin is far above the peer's recent ones is not
//     believed: the last believed fit is carried forward along its drift
//     instead, for up to holdWindows windows, its error growing by
//     holdDriftErr per ns it is carried. A queue that outlasts the hold
//     is the path's new state, not a burst: the next fit is believed, with
//     its own, larger margin as the error, and becomes the new reference.
//     Refusing it would leave the peer unpublished for as long as the
//     queue lasts.
const (
	fitSpan      = 3
	driftSpan    = 8
	holdWindows  = 5
	holdFactor   = 4.0
	holdFloor    = 20_000.0 // ns: margins below this are always believed
	holdDriftErr = 1e-7     // 0.1 ppm
)

// fit fits the peer's recent probes at ref, and starts the next window.
func (st *probeState) fit(ref int64) (Fit, bool) {
	st.spans = append(st.spans, st.obs)
	if len(st.spans) > driftSpan {
		st.spans = st.spans[len(st.spans)-driftSpan:]
	}
	st.sinceGood++
	var (
		fit Fit
		err error
	)
	slope, ok := EnvelopeDrift(st.joined(driftSpan))
	if ok {
		fit, err = FitAtSlope(st.joined(fitSpan), slope, ref)
	}
	if !ok || (err == nil && fit.Margin < 0) {
		// No line at the envelope's slope separates the directions, which
		// the true line always does: the slope is wrong. A queue that
		// came or went inside the drift span tilts the envelope of both
		// directions. The fit span's own best line stands in.
		fit, err = FitLine(st.joined(fitSpan), ref)
	}
	fresh := err == nil && math.Abs(fit.Drift) <= maxDrift
	believable := math.Abs(fit.Margin) <= max(holdFloor, holdFactor*st.goodMargin)
	holdOver := st.sinceGood > holdWindows
	if fresh && (believable || !st.haveGood || holdOver) {
		st.good, st.haveGood, st.sinceGood = fit, true, 0
		if st.goodMargin == 0 || (holdOver && !believable) {
			st.goodMargin = math.Abs(fit.Margin)
		} else {
			st.goodMargin += (math.Abs(fit.Margin) - st.goodMargin) / 8
		}
		return fit, true
	}
	if !st.haveGood || st.sinceGood > holdWindows {
		return Fit{}, false
	}
	dt := float64(ref - st.good.Ref)
	held := st.good
	held.Ref = ref
	held.Offset += held.Drift * dt
	held.Margin = math.Abs(held.Margin) + holdDriftErr*math.Abs(dt)
	return held, true
}

// joined is the probes of the last n windows.
func (st *probeState) joined(n int) Observations {
	var all Observations
	for _, o := range st.spans[max(0, len(st.spans)-n):] {
		all.Forward = append(all.Forward, o.Forward...)
		all.Reverse = append(all.Reverse, o.Reverse...)
	}
	return all
}

// expire drops stale exchanges and edges. Call with mu held.
func (a *Agent) expire(now int64) {
	window := a.cfg.Window.Nanoseconds()
	for _, st := range a.probed {
		for seq, ex := range st.pending {
			if now-ex.sent > window {
				delete(st.pending, seq)
			}
		}
	}
	for k, h := range a.edges {
		if now-h.heard > validWindows*window {
			delete(a.edges, k)
		}
	}
	for p, rs := range a.probers {
		rs.replies = 0
		if now-rs.last > validWindows*window {
			delete(a.probers, p)
		}
	}
}

// meshResult is the solved graph: each node's offset and drift relative to
// this agent.
type meshResult struct {
	nodes  []netip.Addr // index 0 is this agent (the zero Addr)
	offset MeshSolution
	drift  MeshSolution
}

// solve runs the network effect. On error the result holds no peer. Call
// with mu held.
func (a *Agent) solve(ref int64, edges []meshEdge) (meshResult, error) {
	index := map[netip.Addr]int{{}: 0}
	nodes := []netip.Addr{{}}
	node := func(p netip.Addr) int {
		if a.self[p] {
			return 0
		}
		if i, ok := index[p]; ok {
			return i
		}
		index[p] = len(nodes)
		nodes = append(nodes, p)
		return len(nodes) - 1
	}
	type ends struct{ from, to int }
	at := make([]ends, len(edges))
	for i, e := range edges {
		at[i] = ends{from: node(e.from), to: node(e.to)}
	}
	res := meshResult{nodes: nodes}
	var guess []float64 // offset of each node, from the first solve
	for pass := 0; pass < 2; pass++ {
		var off, dr []Edge
		for i, e := range edges {
			if at[i].from == at[i].to {
				continue
			}
			t := float64(ref)
			if guess != nil && !math.IsNaN(guess[at[i].from]) {
				t += guess[at[i].from]
			}
			v := e.edge.Offset + e.edge.Drift*(t-float64(e.edge.Ref))
			off = append(off, Edge{From: at[i].from, To: at[i].to, Value: v, Err: e.edge.Err})
			// A drift's error scales with the offset's over the window.
			dr = append(dr, Edge{From: at[i].from, To: at[i].to, Value: e.edge.Drift, Err: e.edge.Err / float64(a.cfg.Window.Nanoseconds())})
		}
		var err error
		if res.offset, err = SolveMesh(len(nodes), off, 0); err != nil {
			return meshResult{nodes: nodes[:1]}, fmt.Errorf("offsets: %w", err)
		}
		if res.drift, err = SolveMesh(len(nodes), dr, 0); err != nil {
			return meshResult{nodes: nodes[:1]}, fmt.Errorf("drifts: %w", err)
		}
		guess = res.offset.Value
	}
	return res, nil
}

// entries turns the solution into the clock map's entries, and completes
// the report. Call with mu held.
func (a *Agent) entries(ref int64, sol meshResult, report *WindowReport) []Entry {
	byPeer := map[netip.Addr]*PeerReport{}
	for i := range report.Peers {
		byPeer[report.Peers[i].Peer] = &report.Peers[i]
	}
	now := a.cfg.Clock.Now()
	valid := uint64(now + validWindows*a.cfg.Window.Nanoseconds())
	var out []Entry
	for i := 1; i < len(sol.nodes); i++ {
		if !sol.offset.Connected[i] || math.IsNaN(sol.offset.Value[i]) {
			continue
		}
		peer := sol.nodes[i]
		e := Entry{
			Peer:         peer,
			OffsetNs:     int64(math.Round(sol.offset.Value[i])),
			RefNs:        uint64(ref),
			Drift:        clampDrift(sol.drift.Value[i]),
			ErrorNs:      clampU32(sol.offset.Err[i]),
			ResidualNs:   clampU32(sol.offset.NodeResidual[i]),
			UpdatedNs:    uint64(now),
			ValidUntilNs: valid,
		}
		pr := byPeer[peer]
		if pr == nil {
			report.Peers = append(report.Peers, PeerReport{Peer: peer})
			pr = &report.Peers[len(report.Peers)-1]
			// The slice may have moved: rebuild the index.
			for j := range report.Peers {
				byPeer[report.Peers[j].Peer] = &report.Peers[j]
			}
		}
		if st := a.probed[peer]; st != nil {
			e.Probed = true
			if pr.Pairs > 0 {
				e.PureShare = float64(pr.PurePairs) / float64(pr.Pairs)
			}
		}
		pr.Offset, pr.Drift, pr.Err, pr.Residual = sol.offset.Value[i], e.Drift, sol.offset.Err[i], sol.offset.NodeResidual[i]
		out = append(out, e)
	}
	sort.Slice(report.Peers, func(i, j int) bool { return report.Peers[i].Peer.Less(report.Peers[j].Peer) })
	return out
}

func clampDrift(d float64) float64 {
	if math.IsNaN(d) {
		return 0
	}
	return math.Max(-maxDrift, math.Min(maxDrift, d))
}

func clampU32(v float64) uint32 {
	switch {
	case math.IsNaN(v) || v < 0:
		return 0
	case v > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(math.Round(v))
}

// publish writes the entries. The entry of a peer this window did not
// estimate stays until it expires (ValidUntilNs, validWindows windows
// after it was written), as readers were told it would: one window
// without an exchange (a lost probe, the peer's agent restarting or
// stopping first) does not take a peer's offset from the data path. An
// expired one is deleted.
func (a *Agent) publish(entries []Entry) {
	if a.cfg.Offsets == nil {
		return
	}
	live := map[netip.Addr]bool{}
	for _, e := range entries {
		old, ok, err := a.cfg.Offsets.Get(e.Peer)
		if err == nil && ok {
			e.Seq = old.Seq + 1
		}
		if err := a.cfg.Offsets.Put(e); err != nil {
			a.cfg.Logf("%v", err)
			continue
		}
		live[e.Peer] = true
	}
	a.mu.Lock()
	var stale []netip.Addr
	for p := range a.published {
		if !live[p] {
			stale = append(stale, p)
		}
	}
	a.mu.Unlock()
	now := uint64(a.cfg.Clock.Now())
	for _, p := range stale {
		old, ok, err := a.cfg.Offsets.Get(p)
		if err == nil && ok && old.ValidUntilNs > now {
			live[p] = true
			continue
		}
		if err := a.cfg.Offsets.Delete(p); err != nil {
			a.cfg.Logf("%v", err)
		}
	}
	a.mu.Lock()
	a.published = live
	a.mu.Unlock()
}

// gossipTargets are the agents this one exchanges probes with. Call with
// mu held.
func (a *Agent) gossipTargets() []netip.AddrPort {
	seen := map[netip.Addr]bool{}
	var out []netip.AddrPort
	for p, st := range a.probed {
		seen[p] = true
		out = append(out, st.to)
	}
	for p := range a.probers {
		if !seen[p] {
			out = append(out, netip.AddrPortFrom(p, a.cfg.Listen.Port()))
		}
	}
	return out
}

// gossip sends this agent's own edges to its neighbours.
func (a *Agent) gossip(own []meshEdge, targets []netip.AddrPort) {
	if len(own) == 0 {
		return
	}
	var msgs [][]byte
	for start := 0; start < len(own); start += MaxEdgesPerMessage {
		m := Message{Type: TypeEdges, Seq: a.window}
		for _, e := range own[start:min(len(own), start+MaxEdgesPerMessage)] {
			m.Edges = append(m.Edges, e.edge)
		}
		b, err := m.Append(nil)
		if err != nil {
			a.cfg.Logf("encode edges: %v", err)
			return
		}
		msgs = append(msgs, b)
	}
	for _, to := range targets {
		for _, b := range msgs {
			if err := a.sock.send(to, b); err != nil {
				a.mu.Lock()
				a.stats.SendErrors++
				a.mu.Unlock()
			}
		}
	}
}

// discoveryBatch is how many unheard candidates each window sends a
// probe pair to, so that agents in a peer prefix find each other without
// waiting for a random pick to hit: a /24 is swept in eight windows.
const discoveryBatch = 32

// discoveryTargets picks this window's unheard, unprobed candidates,
// round robin. Call with mu held.
func (a *Agent) discoveryTargets() []netip.AddrPort {
	var unheard []netip.Addr
	for c := range a.candidates {
		if !a.heard[c] && a.probed[c] == nil {
			unheard = append(unheard, c)
		}
	}
	if len(unheard) == 0 {
		return nil
	}
	sort.Slice(unheard, func(i, j int) bool { return unheard[i].Less(unheard[j]) })
	var out []netip.AddrPort
	for i := 0; i < min(discoveryBatch, len(unheard)); i++ {
		a.discover = (a.discover + 1) % len(unheard)
		out = append(out, netip.AddrPortFrom(unheard[a.discover], a.cfg.Listen.Port()))
	}
	return out
}

// discoverPeers sends one probe pair to each target. An agent there
// answers, which marks it heard (onReply).
func (a *Agent) discoverPeers(targets []netip.AddrPort) {
	p0, _ := Message{Type: TypeProbe, Index: 0}.Append(nil)
	p1, _ := Message{Type: TypeProbe, Index: 1}.Append(nil)
	for _, to := range targets {
		if err := a.sock.sendPair(to, p0, p1, nil); err != nil {
			a.mu.Lock()
			a.stats.SendErrors++
			a.mu.Unlock()
		}
	}
}
