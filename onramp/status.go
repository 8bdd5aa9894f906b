package onramp

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/cilium/ebpf"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
	"github.com/ccload/ccload/internal/tracebuf"
	"github.com/ccload/ccload/qdisc"
	"github.com/ccload/ccload/telemetry/sockops"
)

// statNames names enum onramp_stat of bpf/include/onramp.h, in order.
var statNames = [...]string{
	"scoped_connections", "stamp_no_space", "echo_no_space", "stamped", "stamp_failed",
	"echoed", "echo_empty", "rx_stamps", "rx_no_clock", "echoes", "no_clock", "stale",
	"unknown_flow", "pauses", "pause_ns", "clamped", "delayed", "malformed", "beta_samples",
	"start_paused", "spared",
}

// Status is On-Ramp on one interface of the calling thread's network
// namespace.
type Status struct {
	// Iface is the interface's name now; Ifindex its index; NetnsInode
	// its network namespace's inode; PinDir where its pins are.
	Iface      string `json:"iface"`
	Ifindex    int    `json:"ifindex"`
	NetnsInode uint64 `json:"netns_inode"`
	PinDir     string `json:"pin_dir"`
	// Method is how the tc programs are attached: tcx or clsact.
	Method qdisc.Method `json:"method"`
	// Attached reports whether both programs still run.
	Attached bool `json:"attached"`
	// Qdisc is the fq root that enforces the pauses; empty when there is
	// none (somebody removed it: pauses are then not enforced).
	Qdisc *qdisc.FQRoot `json:"qdisc,omitempty"`
	// Settings are the parameters.
	Settings Settings `json:"settings"`
	// Peers are the prefixes the host's sockops program stamps for (all
	// interfaces' together).
	Peers []string `json:"peers"`
	// Flows counts the connections the interface has state for;
	// FlowsPaused those held back now.
	Flows       int `json:"flows"`
	FlowsPaused int `json:"flows_paused"`
	// BetaP50 is the median β over the flows that have measured it;
	// BetaFlows counts them.
	BetaP50   float64 `json:"beta_p50"`
	BetaFlows int     `json:"beta_flows"`
	// Pauses and PauseSeconds are the pauses asserted and their total.
	Pauses       uint64  `json:"pauses"`
	PauseSeconds float64 `json:"pause_seconds"`
	// NoSpace counts segments on which an option could not be written,
	// On-Ramp's and INT's (when INT is enabled on this host).
	NoSpace NoSpace `json:"no_space"`
	// PeerStats are the one-way delays per peer this host sends to.
	PeerStats []PeerStatus `json:"peer_stats"`
	// PeersAboveThreshold counts the peers of PeerStats that are
	// AboveThreshold; a note names each.
	PeersAboveThreshold int `json:"peers_above_threshold"`
	// Stats are the raw counters, the interface's and the host's sockops
	// program's together.
	Stats map[string]uint64 `json:"stats"`
	// UpgradeAvailable says that the programs running (the interface's,
	// or the host's sockops program) were built from another object than
	// this ccload embeds: Enable swaps them in place.
	UpgradeAvailable bool `json:"upgrade_available"`
	// Notes are remarks for the operator.
	Notes []string `json:"notes,omitempty"`
}

// NoSpace counts segments that went out without an option for lack of
// room (see the budget in docs/onramp-option.md).
type NoSpace struct {
	Stamp uint64 `json:"onramp_stamp"`
	Echo  uint64 `json:"onramp_echo"`
	// Unfilled counts room reserved for On-Ramp that its tc program could
	// not fill (an option at an odd offset, a full flow table).
	Unfilled uint64 `json:"onramp_unfilled"`
	INTTag   uint64 `json:"int_tag"`
	INTEcho  uint64 `json:"int_echo"`
	Combined uint64 `json:"total"`
}

// PeerStatus is what the echoes said about one peer. Samples, NoClock and
// Negative count the echoes the peer's histogram took: at most one per
// 100 µs (ONRAMP_PEER_SAMPLE_NS in bpf/include/onramp.h), so that the CPUs
// receiving the peer's echoes do not all write its entry on every echo.
// The percentiles and the share above T are of time, not of echoes: the
// histogram weighs each echo by the time since the one before it, from
// 100 µs to 1.6 ms (ONRAMP_PEER_WEIGHT_MAX), so that a quiet flow's sparse
// echoes (docs/onramp.md, "Sparse stamps") count for the time they stand
// for, and a busy flow's dense ones no more.
type PeerStatus struct {
	Peer     netip.Addr `json:"peer"`
	Samples  uint64     `json:"samples"`
	NoClock  uint64     `json:"no_clock"`
	Negative uint64     `json:"negative"`
	// OWDP50Ns and OWDP99Ns are one-way delay percentiles, to the
	// histogram's resolution (1/8 of the value).
	OWDP50Ns int64 `json:"owd_p50_ns"`
	OWDP99Ns int64 `json:"owd_p99_ns"`
	// SampledSeconds is the time the histogram stands for: the weights of
	// its echoes, summed.
	SampledSeconds float64 `json:"sampled_seconds"`
	// MinOWDNs is the least one-way delay of the last one to two
	// windows, the base of the automatic threshold; -1 when unknown.
	MinOWDNs     int64   `json:"min_owd_ns"`
	Pauses       uint64  `json:"pauses"`
	PauseSeconds float64 `json:"pause_seconds"`
	// AboveThreshold reports that the median one-way delay of the
	// histogram, once it took at least 100 echoes, is above a fixed
	// threshold: most of the time, the peer's echoes ask for a pause (see
	// markAboveThreshold). The histogram keeps every echo it took since
	// On-Ramp first saw the peer, so the mark follows a change slowly.
	// Never set with --threshold auto.
	AboveThreshold bool `json:"above_threshold"`
	// ShareAboveThreshold is the share of the histogram's time whose
	// one-way delay was above a fixed threshold. In observe mode each
	// echo above it would have asked for a pause: it is how much of the
	// time On-Ramp would pause this peer's flows (though pauses, once on,
	// lower the delays that follow them, and lag compensation lets some
	// echoes above T pass). To the histogram's resolution, a bucket
	// counting as above T when its middle is, as the percentiles are its
	// middles. -1 with --threshold auto, or before any echo.
	ShareAboveThreshold float64 `json:"share_above_threshold"`
}

// Status reports On-Ramp on every interface of the calling thread's
// network namespace.
func (o *OnRamp) Status() ([]Status, error) {
	st, err := pin.ListIfaceDirs(o.root(), o.read)
	if err != nil {
		return nil, fmt.Errorf("list On-Ramp's interfaces: %w", err)
	}
	return st, nil
}

// monoNow is CLOCK_MONOTONIC in ns, the clock of t_next (0 if it cannot
// be read).
func monoNow() uint64 {
	d, _ := tracebuf.MonotonicNow()
	return uint64(d)
}

// read reads instance k. What it cannot read becomes a note.
func (o *OnRamp) read(k pin.IfaceKey) Status {
	dir := o.dir(k)
	st := Status{Iface: pin.IfaceNow(k), Ifindex: k.Index, NetnsInode: k.Netns, PinDir: dir,
		Peers: []string{}, PeerStats: []PeerStatus{}, Stats: map[string]uint64{}}
	note := func(format string, args ...any) { st.Notes = append(st.Notes, fmt.Sprintf(format, args...)) }

	sides := qdisc.InspectPinnedSides(st.Iface, dir)
	st.Method, st.Attached = sides.Method, sides.Attached
	for _, p := range sides.Problems {
		note("%s", p)
	}
	if !st.Attached {
		note("On-Ramp is no longer attached to %s (the interface was deleted, or its filters removed); remove its pins with: ccload onramp disable --iface %s", st.Iface, st.Iface)
	}
	st.UpgradeAvailable = o.upgradeAvailable(k)
	if root, ok, err := qdisc.InspectFQRoot(st.Iface); err == nil && ok {
		st.Qdisc = &root
	}

	if m, err := ebpf.LoadPinnedMap(filepath.Join(dir, onrampMapOnrampParams), nil); err != nil {
		note("cannot read the parameters: %v", err)
	} else {
		var p onrampOnrampConfig
		if err := m.Lookup(uint32(0), &p); err != nil {
			note("cannot read the parameters: %v", err)
		}
		st.Settings = settingsOf(p)
		m.Close()
	}
	if st.Qdisc == nil && st.Attached && !st.Settings.Observe {
		note("the root qdisc of %s is not fq: pauses are not enforced; run `ccload onramp enable` again", st.Iface)
	}

	if m, err := ebpf.LoadPinnedMap(filepath.Join(dir, onrampMapOnrampStats), nil); err != nil {
		note("cannot read the counters: %v", err)
	} else {
		if sums, err := sumStats(m); err == nil {
			for i, v := range sums {
				st.Stats[statNames[i]] += v
			}
		}
		m.Close()
	}
	if peers, sums, err := o.sockopsStatus(); err != nil {
		note("%v", err)
	} else {
		st.Peers = append(st.Peers, peers...)
		for i, v := range sums {
			st.Stats[statNames[i]] += v
		}
	}
	st.Pauses = st.Stats["pauses"]
	st.PauseSeconds = float64(st.Stats["pause_ns"]) / 1e9
	st.NoSpace.Stamp, st.NoSpace.Echo = st.Stats["stamp_no_space"], st.Stats["echo_no_space"]
	if in, err := sockops.New(o.host).Status(); err == nil && in.Enabled {
		st.NoSpace.INTTag, st.NoSpace.INTEcho = in.Stats["tag_no_space"], in.Stats["echo_no_space"]
	}
	st.NoSpace.Unfilled = st.Stats["stamp_failed"]
	st.NoSpace.Combined = st.NoSpace.Stamp + st.NoSpace.Echo + st.NoSpace.Unfilled + st.NoSpace.INTTag + st.NoSpace.INTEcho

	if err := o.readFlows(dir, &st); err != nil {
		note("cannot read the flows: %v", err)
	}
	if err := o.readPeers(dir, &st); err != nil {
		note("cannot read the peers: %v", err)
	}
	above := markAboveThreshold(st.Settings, st.PeerStats)
	st.Notes = append(st.Notes, above...)
	st.PeersAboveThreshold = len(above)
	return st
}

// steadyMinSamples is how many echoes a peer's histogram must hold before
// status judges its median one-way delay against the threshold.
const steadyMinSamples = 100

// markAboveThreshold marks the peers whose median one-way delay is above a
// fixed threshold (AboveThreshold), and returns one note for each, in
// their order: most of
// their echoes ask for a pause, not only those of transients, because the
// CCs of the flows to them keep a queue above T, or because a wrong clock
// offset reads one. On-Ramp then acts as a delay controller on those
// flows all the time, which is not what the threshold was chosen for
// (docs/onramp.md, "Choosing T"). An automatic threshold sits a little
// above each peer's least delay by design, so it is not judged.
func markAboveThreshold(s Settings, peers []PeerStatus) []string {
	t, ok := s.fixedThreshold()
	if !ok {
		return nil
	}
	var notes []string
	for i := range peers {
		p := &peers[i]
		if p.Samples < steadyMinSamples || p.OWDP50Ns <= int64(t) {
			continue
		}
		p.AboveThreshold = true
		notes = append(notes, fmt.Sprintf("peer %s: the median one-way delay of its echoes, %v, is above the threshold %v: "+
			"most of them ask for a pause, not only those of transients: the CCs of flows to it keep a queue above T, "+
			"or its clock offset is wrong (ccload clock status); see docs/onramp.md, \"Choosing T\"",
			p.Peer, time.Duration(p.OWDP50Ns), t))
	}
	return notes
}

// readFlows counts flows, paused ones, and β's median.
func (o *OnRamp) readFlows(dir string, st *Status) error {
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, onrampMapOnrampFlows), nil)
	if err != nil {
		return err
	}
	defer m.Close()
	now := monoNow()
	var k onrampOnrampFlowKey
	var f onrampOnrampFlow
	var betas []float64
	it := m.Iterate()
	for it.Next(&k, &f) {
		st.Flows++
		if f.T_next > now {
			st.FlowsPaused++
		}
		if f.Samples > 0 && f.Pauses > 0 {
			betas = append(betas, float64(f.Beta)/fpOne)
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	st.BetaFlows = len(betas)
	if len(betas) > 0 {
		sort.Float64s(betas)
		st.BetaP50 = betas[len(betas)/2]
	}
	return nil
}

// readPeers reads the per-peer histograms.
func (o *OnRamp) readPeers(dir string, st *Status) error {
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, onrampMapOnrampPeers), nil)
	if err != nil {
		return err
	}
	defer m.Close()
	var k onrampClockPeer
	var p onrampOnrampPeer
	it := m.Iterate()
	for it.Next(&k, &p) {
		ps := PeerStatus{Peer: netip.AddrFrom16(k.Addr).Unmap(), Samples: p.Samples, NoClock: p.NoClock,
			Negative: p.Negative, Pauses: p.Pauses, PauseSeconds: float64(p.PauseNs) / 1e9, MinOWDNs: -1}
		ps.OWDP50Ns = histQuantile(p.Hist[:], 0.50)
		ps.OWDP99Ns = histQuantile(p.Hist[:], 0.99)
		ps.SampledSeconds = float64(histTotal(p.Hist[:])) * peerSampleNs / 1e9
		ps.ShareAboveThreshold = -1
		if t, ok := st.Settings.fixedThreshold(); ok {
			ps.ShareAboveThreshold = histShareAbove(p.Hist[:], int64(t))
		}
		if least := min(p.MinOwd, p.MinOwdPrev); least >= 0 && least < 0x7fffffff {
			ps.MinOWDNs = least
		}
		st.PeerStats = append(st.PeerStats, ps)
	}
	sort.Slice(st.PeerStats, func(i, j int) bool { return st.PeerStats[i].Peer.Less(st.PeerStats[j].Peer) })
	return it.Err()
}

// peerSampleNs is ONRAMP_PEER_SAMPLE_NS of bpf/include/onramp.h: the time
// one count of a peer's histogram stands for.
const peerSampleNs = 100_000

// histSubBits is ONRAMP_HIST_SUB_BITS of bpf/include/onramp.h.
const histSubBits = 3

// bucketRange is the one-way delays [lo, hi) in ns of bucket i of the
// histogram (bpf/include/onramp.h): bucket 0 is [0, 16); bucket i >= 8,
// with b = i/8 + 4, holds the values of bit length b whose 3 bits after
// the leading one are i%8.
func bucketRange(i int) (lo, hi int64) {
	const sub = 1 << histSubBits
	if i < sub {
		return 0, 2 * sub
	}
	shift := i / sub
	lo = int64(sub+i%sub) << shift
	return lo, lo + 1<<shift
}

// bucketMiddle is the middle of bucket i's range: the value status gives
// for the delays the bucket holds.
func bucketMiddle(i int) int64 {
	lo, hi := bucketRange(i)
	return (lo + hi) / 2
}

// histTotal is the sum of the histogram's counts.
func histTotal(hist []uint32) (n uint64) {
	for _, c := range hist {
		n += uint64(c)
	}
	return n
}

// histShareAbove is the share of the histogram's samples above t ns,
// a bucket counting as above when its middle is; -1 when it is empty.
func histShareAbove(hist []uint32, t int64) float64 {
	total := histTotal(hist)
	if total == 0 {
		return -1
	}
	var above uint64
	for i, c := range hist {
		if bucketMiddle(i) > t {
			above += uint64(c)
		}
	}
	return float64(above) / float64(total)
}

// histQuantile is the q quantile of the histogram, as its bucket's
// middle; -1 when it is empty.
func histQuantile(hist []uint32, q float64) int64 {
	total := histTotal(hist)
	if total == 0 {
		return -1
	}
	rank := uint64(q*float64(total-1)) + 1
	var seen uint64
	for i, c := range hist {
		seen += uint64(c)
		if seen >= rank {
			return bucketMiddle(i)
		}
	}
	return -1
}

// instanceFor finds the instance of iface in the calling thread's network
// namespace, or, with iface "", the only one.
func (o *OnRamp) instanceFor(iface string) (pin.IfaceKey, error) {
	ns, err := pin.CurrentNetns()
	if err != nil {
		return pin.IfaceKey{}, err
	}
	keys, err := o.instances("", -1, ns)
	if err != nil {
		return pin.IfaceKey{}, err
	}
	var match []pin.IfaceKey
	for _, k := range keys {
		if iface == "" || k.Name == iface || pin.IfaceNow(k) == iface {
			match = append(match, k)
		}
	}
	switch {
	case len(match) == 0 && iface == "":
		return pin.IfaceKey{}, kernel.NewError(kernel.KindNotAttached, "enable it: ccload onramp enable --iface IF --peers CIDR", nil,
			"On-Ramp is not enabled in this network namespace")
	case len(match) == 0:
		return pin.IfaceKey{}, kernel.NewError(kernel.KindNotAttached, "enable it: ccload onramp enable --iface "+iface+" --peers CIDR", nil,
			"On-Ramp is not enabled on %s", iface)
	case len(match) > 1:
		return pin.IfaceKey{}, kernel.NewError(kernel.KindBadParam, "name one with --iface", nil,
			"On-Ramp is enabled on %d interfaces in this network namespace", len(match))
	}
	if _, err := os.Stat(o.dir(match[0])); err != nil {
		return pin.IfaceKey{}, err
	}
	return match[0], nil
}
