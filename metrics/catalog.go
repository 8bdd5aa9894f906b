package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ccload/ccload/telemetry/hop"
)

// family is one metric family: its name, help, type and label names.
type family struct {
	name   string
	help   string
	kind   prometheus.ValueType
	labels []string
	desc   *prometheus.Desc
}

// The parts of a scrape, the values of ccload_scrape_errors_total's part
// label.
const (
	partCC       = "cc"
	partINT      = "int"
	partHop      = "hop"
	partOnRamp   = "onramp"
	partClock    = "clock"
	partPrograms = "programs"
)

// parts lists every part, so that each has a series from the first scrape.
var parts = [...]string{partCC, partINT, partHop, partOnRamp, partClock, partPrograms}

// counterDef names the family that exports one counter of a BPF object's
// stats array: key is the counter's name on the Go side (loader.Stats,
// sockops.Status.Stats), suffix the family's name after its prefix.
type counterDef struct {
	key, suffix, help string
}

// ccCounters are the counters of bpf/include/ccload.h's enum ccload_stat,
// by their names in loader.Stats.
var ccCounters = [...]counterDef{
	{"sock_init", "sockets_initialized_total", "Sockets that picked the CC (init calls)."},
	{"sock_release", "sockets_released_total", "Sockets that left the CC (release calls)."},
	{"acks", "acks_total", "ACKs the CC processed."},
	{"rtt_samples", "rtt_samples_total", "ACKs that carried a usable RTT sample."},
	{"cwnd_updates", "window_updates_total", "Congestion window recomputations."},
	{"loss_events", "loss_events_total", "Entries into loss recovery or RTO."},
	{"ecn_ce_rounds", "ecn_ce_rounds_total", "ACK rounds that reported CE marks (DCTCP)."},
	{"fallbacks", "fallbacks_total", "Sockets handed to the fallback CC (DCTCP)."},
	{"int_samples", "int_samples_total", "ACKs that brought new INT records (PowerTCP, HPCC)."},
	{"no_int_acks", "no_int_acks_total", "ACKs handled without INT: theta mode (PowerTCP)."},
	{"hist_starts", "history_starts_total", "Flows that started from a recent flow's rate (PowerTCP)."},
	{"repairs", "window_repairs_total", "Windows repaired after a callback the kernel skipped (DCTCP)."},
	{"build_inits", "build_sockets_initialized_total", "Sockets started by a build with a non-zero ccload_build constant (upgrade tests)."},
	{"rtt_held", "rtt_samples_without_hold_total", "RTT samples taken without the time On-Ramp held their segment back (theta-PowerTCP)."},
	{"ref_updates", "reference_window_updates_total", "Rounds that moved HPCC's reference window W^c, each on an INT measurement newer than the last."},
}

// intCounters are the counters of bpf/int_sockops.c's enum int_stat, by
// their names in sockops.Status.Stats.
var intCounters = [...]counterDef{
	{"scoped_connections", "scoped_connections_total", "Connections to peers in INT's prefixes."},
	{"tagged", "tagged_segments_total", "Forward INT options written on data segments."},
	{"tag_no_space", "tag_no_space_total", "Data segments with no room for the forward INT option."},
	{"echoed", "echoed_acks_total", "INT echo options written on ACKs."},
	{"echo_no_space", "echo_no_space_total", "ACKs with no room for the INT echo option."},
	{"forward_parsed", "forward_parsed_total", "Forward INT options received."},
	{"echo_parsed", "echo_parsed_total", "INT echo options received."},
	{"malformed", "malformed_options_total", "ccload's INT options that failed validation."},
}

// hopCounter exports one counter of an INT hop.
type hopCounter struct {
	suffix, help string
	get          func(hop.Stats) uint64
}

var hopCounters = [...]hopCounter{
	{"packets_total", "Packets the INT hop saw.", func(s hop.Stats) uint64 { return s.Packets }},
	{"records_total", "INT hop records written.", func(s hop.Stats) uint64 { return s.Records }},
	{"options_full_total", "Forward INT options with no empty slot left.", func(s hop.Stats) uint64 { return s.Full }},
	{"options_malformed_total", "Forward INT options not written: bad length or slots.", func(s hop.Stats) uint64 { return s.Malformed }},
	{"ce_marked_packets_total", "Packets the INT hop marked CE.", func(s hop.Stats) uint64 { return s.CEMarked }},
	{"acks_padded_total", "Echo slots refreshed on ACKs (ACK padding).", func(s hop.Stats) uint64 { return s.ACKsPadded }},
	{"model_enqueued_bytes_total", "Bytes the hop's queue model accepted.", func(s hop.Stats) uint64 { return s.EnqueuedBytes }},
	{"model_dropped_packets_total", "Packets the hop's queue model could not buffer.", func(s hop.Stats) uint64 { return s.DroppedPackets }},
}

// families holds every family a Collector exports, but for
// ccload_scrape_errors_total, which is a CounterVec of the Collector's.
type families struct {
	all []*family

	ccAttached, ccDefault, ccSockets *family
	ccGeneration, ccGenSockets       *family
	ccCounters                       map[string]*family // by loader.Stats key

	intEnabled  *family
	intCounters map[string]*family // by sockops.Status.Stats key

	hopAttached, hopBacklog *family
	hopCounters             []*family // as hopCounters

	onrampAttached, onrampFlows, onrampFlowsPaused          *family
	onrampPauses, onrampPauseSeconds, onrampClamped         *family
	onrampDelayed, onrampStampsNoClock, onrampEchoesNoClock *family
	onrampNoSpace, onrampPeersAboveThreshold                *family
	onrampObserve                                           *family

	clockOffset, clockDrift, clockError, clockResidual *family
	clockAge, clockValid                               *family

	statsEnabled, progRuns, progRunSeconds *family
}

// Label names.
const (
	labelCC      = "cc"
	labelIface   = "iface"
	labelIfindex = "ifindex"
	labelPeer    = "peer"
	labelProg    = "prog"
	labelID      = "id"
	labelPart    = "part"
	labelOwner   = "owner"
	labelOption  = "option"
	labelGen     = "generation"
)

const prefix = "ccload_"

func newFamilies() *families {
	fs := &families{ccCounters: map[string]*family{}, intCounters: map[string]*family{}}
	add := func(name, help string, kind prometheus.ValueType, labels ...string) *family {
		f := &family{name: prefix + name, help: help, kind: kind, labels: labels}
		f.desc = prometheus.NewDesc(f.name, help, labels, nil)
		fs.all = append(fs.all, f)
		return f
	}
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue

	fs.ccAttached = add("cc_attached", "Whether ccload's CC is attached (1) or not (0).", gauge, labelCC)
	fs.ccDefault = add("cc_default", "Whether the CC is the default of the network namespace (net.ipv4.tcp_congestion_control).", gauge, labelCC)
	fs.ccSockets = add("cc_sockets", "Sockets that use the CC now.", gauge, labelCC)
	fs.ccGeneration = add("cc_generation", "The generation of the CC that new sockets get: 1 at attach, one more at each in-place upgrade.", gauge, labelCC)
	fs.ccGenSockets = add("cc_generation_sockets", "Sockets that use each generation of the CC now; older generations stay until their sockets close.", gauge, labelCC, labelGen)
	for _, d := range ccCounters {
		fs.ccCounters[d.key] = add("cc_"+d.suffix, d.help, counter, labelCC)
	}

	fs.intEnabled = add("int_enabled", "Whether INT tagging (the sockops program) is enabled (1) or not (0).", gauge)
	for _, d := range intCounters {
		fs.intCounters[d.key] = add("int_"+d.suffix, d.help, counter)
	}

	fs.hopAttached = add("int_hop_attached", "Whether the pinned INT hop's programs still run on the interface (1) or only its pins are left (0).", gauge, labelIface, labelIfindex)
	fs.hopBacklog = add("int_hop_model_backlog_bytes", "Bytes in the INT hop's queue model now.", gauge, labelIface, labelIfindex)
	for _, d := range hopCounters {
		fs.hopCounters = append(fs.hopCounters, add("int_hop_"+d.suffix, d.help, counter, labelIface, labelIfindex))
	}

	fs.onrampAttached = add("onramp_attached", "Whether both of On-Ramp's tc programs run on the interface (1) or not (0).", gauge, labelIface, labelIfindex)
	fs.onrampFlows = add("onramp_flows", "Connections On-Ramp has state for on the interface.", gauge, labelIface, labelIfindex)
	fs.onrampFlowsPaused = add("onramp_flows_paused", "Connections On-Ramp holds back now.", gauge, labelIface, labelIfindex)
	fs.onrampPauses = add("onramp_pauses_total", "Pauses On-Ramp asserted.", counter, labelIface, labelIfindex)
	fs.onrampPauseSeconds = add("onramp_pause_seconds_total", "Total length of the pauses On-Ramp asserted.", counter, labelIface, labelIfindex)
	fs.onrampClamped = add("onramp_pauses_clamped_total", "Pauses cut to the longest pause allowed.", counter, labelIface, labelIfindex)
	fs.onrampDelayed = add("onramp_delayed_packets_total", "Packets given a later departure time.", counter, labelIface, labelIfindex)
	fs.onrampStampsNoClock = add("onramp_stamps_no_clock_total", "Stamps received from a sender the clock map has no offset for.", counter, labelIface, labelIfindex)
	fs.onrampEchoesNoClock = add("onramp_echoes_no_clock_total", "Echoes not acted on for want of a clock: the receiver had no clock offset for this host, or this host's clock error for the receiver is over half the threshold.", counter, labelIface, labelIfindex)
	fs.onrampNoSpace = add("onramp_no_space_total", "Segments that went out without an On-Ramp option for lack of room, by option (stamp and echo are counted by the host's sockops program, so every interface shows the same).", counter, labelIface, labelIfindex, labelOption)
	fs.onrampObserve = add("onramp_observe", "Whether On-Ramp only observes on the interface (1: it measures one-way delays and pauses nothing) or pauses (0).", gauge, labelIface, labelIfindex)
	fs.onrampPeersAboveThreshold = add("onramp_peers_above_threshold", "Peers whose median one-way delay, over the echoes sampled since On-Ramp first saw them (at least 100), is above On-Ramp's fixed threshold: most of their echoes ask for a pause (ccload onramp status names them). 0 with an automatic threshold.", gauge, labelIface, labelIfindex)

	fs.clockOffset = add("clock_offset_seconds", "The peer's clock minus this host's, now, as the clock agent published it.", gauge, labelPeer)
	fs.clockDrift = add("clock_drift_ratio", "The rate at which the peer's clock offset changes, in seconds per second.", gauge, labelPeer)
	fs.clockError = add("clock_error_seconds", "The standard error of the peer's clock offset.", gauge, labelPeer)
	fs.clockResidual = add("clock_residual_seconds", "The RMS loop residual of the peer's clock measurements.", gauge, labelPeer)
	fs.clockAge = add("clock_offset_age_seconds", "Time since the clock agent last updated the peer's offset.", gauge, labelPeer)
	fs.clockValid = add("clock_offset_valid", "Whether the data path still uses the peer's offset (1) or it has expired (0).", gauge, labelPeer)

	fs.statsEnabled = add("bpf_stats_enabled", "Whether kernel.bpf_stats_enabled is on (1), without which no per-program series are exported.", gauge)
	progLabels := []string{labelProg, labelID, labelPart, labelOwner}
	fs.progRuns = add("bpf_program_runs_total", "Runs of ccload's BPF program, counted while kernel.bpf_stats_enabled is on.", counter, progLabels...)
	fs.progRunSeconds = add("bpf_program_run_seconds_total", "Time ccload's BPF program ran, counted while kernel.bpf_stats_enabled is on.", counter, progLabels...)
	return fs
}

// scrapeErrorsName is the Collector's own counter.
const scrapeErrorsName = prefix + "scrape_errors_total"

func newScrapeErrors() *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: scrapeErrorsName,
		Help: "Scrapes in which a part of ccload's state was enabled but could not be read, by part.",
	}, []string{labelPart})
	for _, p := range parts {
		v.WithLabelValues(p)
	}
	return v
}
