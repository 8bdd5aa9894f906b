package bench

import (
	_ "embed"
	"time"

	"github.com/ccload/ccload/bench/stats"
)

// OnRampSchemaID names the layout of the onramp scenario's results.json.
const OnRampSchemaID = "https://ccload.dev/schema/bench-onramp/v1"

//go:embed onramp.schema.json
var onrampSchemaJSON []byte

// OnRampSchema returns the JSON Schema (draft 2020-12) of the onramp
// scenario's results.json.
func OnRampSchema() []byte { return append([]byte(nil), onrampSchemaJSON...) }

// OnRampResults is what the onramp scenario writes to results.json.
type OnRampResults struct {
	// Schema is OnRampSchemaID.
	Schema   string    `json:"schema"`
	Scenario string    `json:"scenario"`
	Command  string    `json:"command,omitempty"`
	Started  time.Time `json:"started"`
	Machine  Machine   `json:"machine"`
	// Topology, Workload and OnRamp are the run's settings.
	Topology OnRampTopology `json:"topology"`
	Workload OnRampWorkload `json:"workload"`
	OnRamp   OnRampSettings `json:"onramp"`
	// Repeat is how many times every variant ran; Order the variants'
	// order per repeat.
	Repeat int        `json:"repeat"`
	Order  [][]string `json:"order"`
	// Variants holds each CC without On-Ramp, then with it, in the order
	// of the CC list.
	Variants []OnRampVariant `json:"variants"`
	// Comparisons holds one entry per CC: without On-Ramp against with.
	Comparisons []OnRampComparison `json:"comparisons"`
	// Targets are what the On-Ramp issue asks, and Verdict whether the
	// run met them.
	Targets OnRampTargets `json:"targets"`
	Verdict OnRampVerdict `json:"verdict"`
}

// OnRampTopology is the emulated network.
type OnRampTopology struct {
	// Kind is "dumbbell": servers and background senders -> router ->
	// client.
	Kind              string `json:"kind"`
	Servers           int    `json:"servers"`
	BackgroundSenders int    `json:"background_senders"`
	RateBps           uint64 `json:"bottleneck_bps"`
	BufferBytes       uint32 `json:"buffer_bytes"`
	// GSOBytes is the GSO size of every sender's uplink, all of which
	// have an fq root qdisc (SenderQdisc) in every run.
	GSOBytes    uint32 `json:"gso_bytes"`
	SenderQdisc string `json:"sender_qdisc"`
	// SenderRateBps is fq's cap on each flow of every sender (its
	// maxrate), standing in for the senders' NICs; 0: none, a flow could
	// send as fast as its veth went. Absent in results from before the
	// cap, which had none.
	SenderRateBps uint64 `json:"sender_flow_max_bps"`
	// ECNThresholdBytes is where CE marking starts (0: none), by
	// ECNMarker: "hop" or "fq_codel".
	ECNThresholdBytes uint32 `json:"ecn_threshold_bytes"`
	ECNMarker         string `json:"ecn_marker"`
	// BaseRTTMicros is the path's RTT with an empty queue, measured.
	BaseRTTMicros float64 `json:"base_rtt_us"`
}

// OnRampWorkload is the traffic.
type OnRampWorkload struct {
	DurationSeconds float64 `json:"duration_s"`
	Quick           bool    `json:"quick"`
	// Fanout servers answer each request with ResponseBytes each;
	// requests arrive as a Poisson process at RequestRate per second,
	// which is IncastLoad of the bottleneck, from RequestsFromSeconds on,
	// at most MaxRequests a run.
	Fanout              int     `json:"fanout"`
	ResponseBytes       int64   `json:"response_bytes"`
	IncastLoad          float64 `json:"incast_load"`
	RequestRate         float64 `json:"request_rate"`
	RequestsFromSeconds float64 `json:"requests_from_s"`
	MaxRequests         int     `json:"max_requests"`
	// BackgroundLoad is the web-search flows' load; BackgroundMaxBytes
	// their size cap (0: the distribution's own, 30 MB).
	BackgroundLoad     float64 `json:"background_load"`
	BackgroundMaxBytes int64   `json:"background_max_bytes"`
	// LongFlows is 1, one time-bounded flow from the first background
	// sender for the whole run, or 0 (--onramp-long-flow=false).
	LongFlows    int     `json:"long_flows"`
	SampleMicros float64 `json:"queue_sample_interval_us"`
	Seed         uint64  `json:"seed"`
	// ResponseConns is how the servers send their responses: "persistent",
	// each on one connection kept open for the run, or "new", each on a
	// connection of its own (OnRampConfig.NewConnPerResponse). Results
	// written before the field existed lack it, and meant "new".
	ResponseConns string `json:"response_conns,omitempty"`
}

// OnRampSettings are On-Ramp's parameters in the runs with it.
type OnRampSettings struct {
	ThresholdNs uint64   `json:"threshold_ns"`
	MaxPauseNs  uint64   `json:"max_pause_ns"`
	Gain        float64  `json:"gain"`
	Peers       []string `json:"peers"`
	// Interfaces is where it was enabled: every sender's uplink and the
	// client's interface.
	Interfaces int `json:"interfaces"`
	// ClockErrorNs is the error the fixed clock offsets were published
	// with (the hosts share one clock: every offset is 0).
	ClockErrorNs uint32 `json:"clock_error_ns"`
	// BPFStats says the runs timed every BPF program with the kernel's
	// BPF statistics (OnRampConfig.BPFCosts).
	BPFStats bool `json:"bpf_stats,omitempty"`
	// CCHolds says the CCs that can ran with onramp_holds=1
	// (OnRampConfig.CCHolds).
	CCHolds bool `json:"cc_holds,omitempty"`
	// Strawman says On-Ramp ran its strawman, without lag compensation
	// (OnRampConfig.Strawman).
	Strawman bool `json:"strawman,omitempty"`
	// Observe says On-Ramp only observed: it paused nothing
	// (OnRampConfig.Observe).
	Observe bool `json:"observe,omitempty"`
	// SparseStamps says that On-Ramp stamped quiet flows sparsely, its
	// default (onramp.Config.StampEveryPacket unset). Results from before
	// sparse stamps lack it: they stamped every data segment.
	SparseStamps bool `json:"sparse_stamps,omitempty"`
}

// OnRampVariant is one CC without or with On-Ramp, over every repeat.
type OnRampVariant struct {
	// Name is CC, or CC+onramp.
	Name   string `json:"name"`
	CC     string `json:"cc"`
	OnRamp bool   `json:"onramp"`
	// KernelCCs are the CCs TCP_INFO reported, over all runs.
	KernelCCs []string `json:"kernel_ccs"`
	// Params are a ccload CC's parameters as it ran.
	Params map[string]string `json:"params,omitempty"`
	// ECN: the CC asks for ECN (the client's listener then runs it too);
	// INT: INT tagging was on.
	ECN bool `json:"ecn"`
	INT bool `json:"int"`
	// RCT is the request completion times of every run's requests,
	// pooled: from the request's arrival to the kernel's timestamp of the
	// ACK of the last byte of its last response.
	RCT RCTSummary `json:"rct"`
	// NetRCT is, over the same requests, the completion time of each
	// one's slowest response, from its own start (its first write on a
	// persistent connection, its connect on a connection of its own): the
	// RCT without the time it took to start the responses
	// (StartLagP99Us), as if all had started on time.
	NetRCT RCTSummary `json:"net_rct"`
	// RCTTail is what the slowest requests had in common; absent without
	// a supported percentile.
	RCTTail *RCTTail `json:"rct_tail,omitempty"`
	// FCT is the background flows' completion times by size bucket,
	// pooled over the runs.
	FCT []PooledFCT `json:"fct"`
	// Figures holds each per-run figure's median and spread over the
	// runs, by name (OnRampFigures).
	Figures map[string]Spread `json:"figures"`
	// Runs holds each repeat's run.
	Runs []OnRampRun `json:"runs"`
}

// RCTTail describes the requests at or beyond the highest percentile
// the pooled requests support (RCTSummary.TailP): how many had a response
// whose sender took a retransmission timeout, how many one that
// retransmitted at all, and the median of how late the emulation started
// their last response. A timeout costs at least the kernel's minimum RTO
// (200 ms), so it tells a tail made of losses from one made of queueing,
// pauses or the emulation.
type RCTTail struct {
	Requests int `json:"requests"`
	// WithRTO is absent on kernels whose TCP_INFO does not count
	// timeouts (before Linux 6.7).
	WithRTO        *int    `json:"with_rto,omitempty"`
	WithRetransmit int     `json:"with_retransmit"`
	StartLagP50Us  float64 `json:"start_lag_p50_us"`
}

// RCTSummary is a distribution of request completion times. P99Us is the
// nearest-rank 99th percentile whatever the count; P99Supported says
// whether Count supports it (1,000 requests: ten at or beyond it), and
// TailP is the highest of 50, 90, 95, 98, 99 and 99.9 that Count supports
// (0: none), TailUs that percentile.
type RCTSummary struct {
	Count        int     `json:"count"`
	MeanUs       float64 `json:"mean_us"`
	P50Us        float64 `json:"p50_us"`
	P90Us        float64 `json:"p90_us"`
	P99Us        float64 `json:"p99_us"`
	MaxUs        float64 `json:"max_us"`
	P99Supported bool    `json:"p99_supported"`
	TailP        float64 `json:"tail_p"`
	TailUs       float64 `json:"tail_us"`
}

// OnRampRun is one run of a variant.
type OnRampRun struct {
	Repeat int    `json:"repeat"`
	Seed   uint64 `json:"seed"`
	// KernelCCs are the CCs TCP_INFO reported back.
	KernelCCs []string `json:"kernel_ccs"`
	// Requests were started; RequestsCompleted had every response
	// arrive intact, and only they have an RCT.
	Requests          int `json:"requests"`
	RequestsCompleted int `json:"requests_completed"`
	// RCT over this run's completed requests.
	RCTP50Us float64 `json:"rct_p50_us"`
	RCTP99Us float64 `json:"rct_p99_us"`
	RCTMaxUs float64 `json:"rct_max_us"`
	// NetRCT over the same requests (OnRampVariant.NetRCT).
	NetRCTP50Us float64 `json:"net_rct_p50_us"`
	NetRCTP99Us float64 `json:"net_rct_p99_us"`
	// StartLagP99Us is the 99th percentile over the requests of how late
	// their last response started after the request's arrival: the
	// emulation's scheduling delay, and on a persistent connection the
	// wait for the server's response before it, which RCT includes.
	StartLagP99Us float64 `json:"start_lag_p99_us"`
	// Responses, BackgroundFlows: flows started; ResponsesFailed,
	// BackgroundFailed: those the sender saw fail.
	Responses        int `json:"responses"`
	ResponsesFailed  int `json:"responses_failed"`
	BackgroundFlows  int `json:"background_flows"`
	BackgroundFailed int `json:"background_failed"`
	// ResponseConns is how many persistent connections the servers
	// opened, or tried to, for their responses
	// (OnRampWorkload.ResponseConns), and ResponseConnsFailed how many of
	// them failed to open or to close cleanly; both 0 with a connection
	// per response.
	ResponseConns       int `json:"response_conns,omitempty"`
	ResponseConnsFailed int `json:"response_conns_failed,omitempty"`
	// LongFlowBps is the long flow's throughput after the first tenth of
	// the run, from its TCP_INFO bytes acked; LongFlowFailed says the
	// flow failed (then it is 0).
	LongFlowBps    float64 `json:"long_flow_bps"`
	LongFlowFailed bool    `json:"long_flow_failed"`
	// LongFlow is what the long flow's TCP_INFO said; absent when it
	// failed.
	LongFlow *LongFlowState `json:"long_flow,omitempty"`
	// SinkResults is what the client received: connections, and those
	// whose bytes were short, corrupt or cut (SinkBad). Every started
	// flow that succeeded has an intact sink result.
	SinkResults int `json:"sink_results"`
	SinkBad     int `json:"sink_bad"`
	// FCT is the background flows' FCT by size bucket, this run alone.
	FCT []FCTBucket `json:"fct"`
	// FCTsByAppClock counts the flows (responses and background) timed
	// to the client's FIN, for want of the kernel's ACK timestamp.
	FCTsByAppClock int `json:"fcts_by_app_clock"`
	// The bottleneck: its rate over the run, its queue (qdisc backlog
	// samples), drops; Retransmits over every flow.
	ThroughputBps float64 `json:"throughput_bps"`
	Utilization   float64 `json:"utilization"`
	QueueP50Bytes float64 `json:"queue_p50_bytes"`
	QueueP99Bytes float64 `json:"queue_p99_bytes"`
	QueueMaxBytes float64 `json:"queue_max_bytes"`
	QueueSamples  int     `json:"queue_samples"`
	Drops         uint64  `json:"drops"`
	Retransmits   uint64  `json:"retransmits"`
	// RTOs is how many retransmission timeouts the flows' senders took,
	// and DSACKDups how many of their retransmissions the receiver
	// reported as duplicates (spurious), both from TCP_INFO
	// (tcpi_total_rto needs Linux 6.7: 0 before it).
	RTOs      uint64 `json:"rtos"`
	DSACKDups uint64 `json:"dsack_dups"`
	// BacklogDrops is what CPUs' full input backlogs dropped over the run,
	// over the whole machine (readBacklogDrops): losses besides the
	// bottleneck's.
	BacklogDrops uint64 `json:"backlog_drops"`
	// TCPExt is how much each of the senders' TcpExt counters of loss
	// detection and repair (tcpExtNames: tail loss probes, recoveries,
	// undos, reordering, DSACKs) grew over the run, summed over the
	// servers' and background senders' namespaces; a counter the kernel
	// lacks is absent.
	TCPExt map[string]uint64 `json:"tcp_ext,omitempty"`
	// Runtime is what the bench process's own Go runtime did over the
	// run: how long runnable goroutines, the flows' starts among them,
	// waited, and its garbage collections. Absent in runs from before it
	// was recorded.
	Runtime        *RuntimeFigures `json:"runtime,omitempty"`
	CPUBusy        float64         `json:"cpu_busy"`
	DurationMillis float64         `json:"duration_ms"`
	// BPF is what ccload's kinds of BPF program (struct_ops CCs, sockops,
	// tc) that ran during the run cost, from the kernel's BPF statistics,
	// busiest first: the CC, the INT hop, and with On-Ramp its programs,
	// each summed over the interfaces it runs on. Absent without
	// OnRampConfig.BPFCosts (--onramp-bpf-costs).
	BPF []ProgramCost `json:"bpf,omitempty"`
	// OnRamp is On-Ramp's counters over the run; absent without it.
	OnRamp *OnRampCounters `json:"onramp,omitempty"`
	// CCCounters are ccload's CC's own counters over the run (loader.Stats:
	// acks, rtt_samples, rtt_held, ...); absent for a kernel CC.
	CCCounters map[string]uint64 `json:"cc_counters,omitempty"`
}

// LongFlowState is the long flow's sending socket as TCP_INFO showed it:
// its window and smoothed RTT, sampled every 20 ms after the run's first
// tenth (their medians), and, over the whole flow, how long it had data
// outstanding and how much of that time the receiver's window or its own
// send buffer limited it (tcpi_busy_time, tcpi_rwnd_limited,
// tcpi_sndbuf_limited). Throughput is about cwnd x MSS / srtt while
// neither limits it.
type LongFlowState struct {
	CwndP50         float64 `json:"cwnd_p50"`
	SRTTP50Us       float64 `json:"srtt_p50_us"`
	MSS             uint32  `json:"mss"`
	BusyMs          float64 `json:"busy_ms"`
	RwndLimitedMs   float64 `json:"rwnd_limited_ms"`
	SndbufLimitedMs float64 `json:"sndbuf_limited_ms"`
}

// OnRampCounters are On-Ramp's counters over one run (onramp.Status):
// pauses and pause time over the senders, β, and the raw counters, the
// tc programs' summed over every interface and the shared sockops
// program's once.
type OnRampCounters struct {
	Pauses       uint64  `json:"pauses"`
	PauseSeconds float64 `json:"pause_seconds"`
	// BetaP50 is the median over the senders of their flows' median β;
	// absent when no flow measured β.
	BetaP50 *float64 `json:"beta_p50,omitempty"`
	// OWDP99MaxNs is the largest per-peer one-way delay p99 a sender saw.
	OWDP99MaxNs int64             `json:"owd_p99_max_ns"`
	Interfaces  int               `json:"interfaces"`
	Counters    map[string]uint64 `json:"counters"`
	// BPFBusy is the time On-Ramp's BPF programs ran over the run, every
	// interface's summed, as a share of all the CPUs' time, comparable
	// with OnRampRun.CPUBusy; each run includes the statistics' own two
	// clock reads. Absent without OnRampConfig.BPFCosts.
	BPFBusy *float64 `json:"bpf_busy,omitempty"`
	// TCFloorNsPerRun is the mean ns per run of a tc program that does
	// nothing, run before On-Ramp's tc programs at each of their hooks
	// (tcFloorName in BPF): what a run costs there before a program does
	// anything, the statistics' clock reads included. On-Ramp's tc
	// programs' ns per run less it is their own work. Absent without
	// OnRampConfig.BPFCosts, and in runs from before it was measured.
	TCFloorNsPerRun *float64 `json:"tc_floor_ns_per_run,omitempty"`
	// SockopsFloorNsPerRun is the same for a sockops program that does
	// nothing, attached to the cgroup On-Ramp's sockops program is
	// (sockopsFloorName in BPF), which runs for the same callbacks.
	SockopsFloorNsPerRun *float64 `json:"sockops_floor_ns_per_run,omitempty"`
	// AboveThresholdShare is the share of the time the senders'
	// per-peer histograms sampled whose one-way delay was above T
	// (onramp.PeerStatus.ShareAboveThreshold, weighted by the time each
	// peer's histogram covers; before sparse stamps, a share of echoes
	// weighted by the peers' echoes); with OnRampConfig.Observe, how
	// often On-Ramp would have paused. Absent when no echo was sampled.
	AboveThresholdShare *float64 `json:"above_threshold_share,omitempty"`
}

// OnRampComparison is one CC without On-Ramp against with it. A ratio is
// without/with: above 1, On-Ramp made the figure smaller (better for
// times); NaN-free: a ratio whose denominator is 0 is left out.
type OnRampComparison struct {
	CC string `json:"cc"`
	// RCT p99 and p50 of the pooled requests, and their ratios.
	RCTP99WithoutUs float64  `json:"rct_p99_without_us"`
	RCTP99WithUs    float64  `json:"rct_p99_with_us"`
	RCTP99Ratio     *float64 `json:"rct_p99_ratio,omitempty"`
	RCTP50Ratio     *float64 `json:"rct_p50_ratio,omitempty"`
	// RCTTailP is the highest percentile both pooled samples support,
	// and RCTTailRatio the ratio there.
	RCTTailP     float64  `json:"rct_tail_p"`
	RCTTailRatio *float64 `json:"rct_tail_ratio,omitempty"`
	// RCTTailRatioInterval is the middle 95 % of the ratio, at the
	// percentile WorseRCT judges (RCTTailP, at most 99), over resamples
	// of the repeats (stats.PairedTailRatioInterval): how far the ratio
	// moves with which runs the bench happened to make. Absent with
	// fewer than five repeats.
	RCTTailRatioInterval *stats.Interval `json:"rct_tail_ratio_interval,omitempty"`
	// NetRCTP99Ratio is the same ratio of the network RCTs' p99
	// (OnRampVariant.NetRCT).
	NetRCTP99Ratio *float64 `json:"net_rct_p99_ratio,omitempty"`
	// LongFlow*Bps are the medians over the runs; LongFlowLoss is
	// 1 − with/without (negative: On-Ramp's long flow was faster).
	LongFlowWithoutBps float64  `json:"long_flow_without_bps"`
	LongFlowWithBps    float64  `json:"long_flow_with_bps"`
	LongFlowLoss       *float64 `json:"long_flow_loss,omitempty"`
	// LongFlowPairedLoss is the same loss taken per repeat, between the
	// two runs that share its workload seed: its median and range over
	// the repeats. The runs' throughput moves between seeds by more than
	// On-Ramp moves it, and pairing takes that movement out.
	LongFlowPairedLoss *Spread `json:"long_flow_paired_loss,omitempty"`
	// CPUAdded is, per repeat, how much busier the machine's CPUs were
	// in the run with On-Ramp than in the one without (OnRampRun.CPUBusy,
	// with less without, as a share of all CPUs; negative: less busy):
	// its median and range over the repeats. CPUBusier counts the
	// repeats whose run with On-Ramp was the busier. On-Ramp's programs
	// run on every packet, so a CC that sends more packets per byte pays
	// more; on a machine that also runs the emulated network, that CPU is
	// taken from the flows' processes, and how much it is moves between
	// runs of one command.
	CPUAdded  *Spread `json:"cpu_added,omitempty"`
	CPUBusier int     `json:"cpu_busier"`
	// FCT compares the background flows' pooled p99 per size bucket.
	FCT []FCTComparison `json:"fct"`
	// WorseRCT: the RCT tail more than WorseMargin above without
	// On-Ramp; WorseFCT: the buckets whose FCT tail is. A tail is the
	// p99, or the highest percentile below it that both pooled samples
	// support (RCTTailP, FCTComparison.TailP) when they are too few for
	// the p99; with too few for any, no verdict.
	WorseRCT bool     `json:"worse_rct"`
	WorseFCT []string `json:"worse_fct"`
}

// FCTComparison is one size bucket's pooled background FCT p99 (nearest
// rank, whatever the count) without and with On-Ramp.
type FCTComparison struct {
	Bucket       string   `json:"bucket"`
	CountWithout int      `json:"count_without"`
	CountWith    int      `json:"count_with"`
	P99WithoutUs float64  `json:"p99_without_us"`
	P99WithUs    float64  `json:"p99_with_us"`
	Ratio        *float64 `json:"ratio,omitempty"`
	// TailP is the p99, or the highest percentile below it that both
	// pooled samples support (0: none), and the rest the FCTs there.
	TailP         float64  `json:"tail_p"`
	TailWithoutUs float64  `json:"tail_without_us,omitempty"`
	TailWithUs    float64  `json:"tail_with_us,omitempty"`
	TailRatio     *float64 `json:"tail_ratio,omitempty"`
	// TailRatioInterval is the middle 95 % of TailRatio over resamples
	// of the repeats, as OnRampComparison.RCTTailRatioInterval.
	TailRatioInterval *stats.Interval `json:"tail_ratio_interval,omitempty"`
	// PairedMeanRatio is, per repeat, the bucket's mean FCT without
	// On-Ramp over the one with it, between the two runs that share the
	// repeat's workload seed: its median and range over the repeats
	// (above 1: On-Ramp is faster). PairedSlower counts the repeats whose
	// run with On-Ramp was slower. A pooled tail of a few hundred flows
	// moves between runs by more than On-Ramp moves it; the pairs show a
	// steady change that the tail hides.
	PairedMeanRatio *Spread `json:"paired_mean_ratio,omitempty"`
	PairedSlower    int     `json:"paired_slower"`
}

// OnRampTargets are the On-Ramp issue's targets.
type OnRampTargets struct {
	// RCTRatio is the least RCT p99 ratio asked of RCTCC.
	RCTRatio float64 `json:"rct_p99_ratio"`
	RCTCC    string  `json:"rct_cc"`
	// LongFlowLoss is the largest long-flow throughput loss asked of
	// every CC.
	LongFlowLoss float64 `json:"long_flow_loss"`
	// WorseMargin is how far above the baseline a tail must be for the
	// comparison to call it worse.
	WorseMargin float64 `json:"worse_margin"`
}

// OnRampVerdict is whether the run met the targets: RCTMet is absent when
// RCTCC did not run; LongFlowMet is over the CCs that have a loss (true
// when none has, as in a run without a long flow);
// Worse lists "CC: what" for every figure a CC made worse.
// WorseBeyondNoise lists those of Worse whose ratio's interval over
// resamples of the repeats lies wholly below 1: worse in nearly every
// resample. The rest of Worse may be the runs' scatter; with fewer than
// five repeats it is empty.
type OnRampVerdict struct {
	RCTMet           *bool    `json:"rct_met,omitempty"`
	LongFlowMet      bool     `json:"long_flow_met"`
	Worse            []string `json:"worse"`
	WorseBeyondNoise []string `json:"worse_beyond_noise"`
}

// fct is the run's background flows of bucket b, if it has that bucket.
func (r OnRampRun) fct(b string) (FCTBucket, bool) {
	for _, f := range r.FCT {
		if f.Bucket == b {
			return f, true
		}
	}
	return FCTBucket{}, false
}

// ranLongFlow reports whether the run had a long flow: one that failed,
// or one with samples or a rate. A run without (--onramp-long-flow=false)
// has none of these.
func (r OnRampRun) ranLongFlow() bool {
	return r.LongFlowFailed || r.LongFlow != nil || r.LongFlowBps > 0
}
