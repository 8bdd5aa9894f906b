package bench

import (
	_ "embed"
	"time"
)

// SchemaID names the version of results.json's layout; it changes when a
// field changes meaning or goes away.
const SchemaID = "https://ccload.dev/schema/bench-results/v2"

// Schema is the JSON Schema (draft 2020-12) that results.json follows.
//
//go:embed results.schema.json
var schemaJSON []byte

// Schema returns a copy of the JSON Schema of results.json.
func Schema() []byte { return append([]byte(nil), schemaJSON...) }

// Results is what one `ccload bench` run writes to OUT/results.json.
type Results struct {
	// Schema is SchemaID.
	Schema string `json:"schema"`
	// Scenario is the scenario's name.
	Scenario string `json:"scenario"`
	// Command is the command line that produced the file.
	Command string `json:"command,omitempty"`
	// Started is when the run began, in UTC.
	Started time.Time `json:"started"`
	// Machine describes the host the run measured.
	Machine Machine `json:"machine"`
	// Topology describes the emulated network.
	Topology Topology `json:"topology"`
	// Workload describes the traffic.
	Workload Workload `json:"workload"`
	// Repeat is how many times every CC ran the scenario.
	Repeat int `json:"repeat"`
	// Order is the order the CCs ran in, per repeat: repeat i starts i
	// places further down the list, so that no CC always runs first or
	// right after the same neighbour.
	Order [][]string `json:"order"`
	// CCs holds one entry per congestion control, in the order of --cc.
	CCs []CCResult `json:"ccs"`
	// ControlPlane is how long ccload's attach, set and detach of
	// theta_powertcp took as whole processes, when the run measured it.
	ControlPlane []ControlPlane `json:"control_plane,omitempty"`
}

// Machine is the host a run measured.
type Machine struct {
	Kernel string `json:"kernel"`
	CPUs   int    `json:"cpus"`
	CPU    string `json:"cpu_model,omitempty"`
	// Clocksource is the kernel's current clocksource (tsc, kvm-clock,
	// hpet, ...). Every timestamp the kernel and the BPF programs take
	// reads it, so where it is slow to read (hpet under emulation) every
	// packet costs more.
	Clocksource string `json:"clocksource,omitempty"`
	// CPUsKeptAwake says the CCs ran with a SCHED_IDLE spinner on every
	// CPU (--keep-cpus-awake): no CPU halted, and cpu_busy counts the
	// spinners.
	CPUsKeptAwake bool `json:"cpus_kept_awake,omitempty"`
}

// Topology is the emulated network of a run.
type Topology struct {
	// Kind is "dumbbell": senders -> router -> receiver.
	Kind              string `json:"kind"`
	Senders           int    `json:"senders"`
	RateBps           uint64 `json:"bottleneck_bps"`
	BufferBytes       uint32 `json:"buffer_bytes"`
	ECNThresholdBytes uint32 `json:"ecn_threshold_bytes"`
	// ECNMarker is what marked CE: "hop" (the INT hop) or "fq_codel" (the
	// bottleneck's AQM). Results from before it existed have none: "hop".
	ECNMarker  string `json:"ecn_marker,omitempty"`
	ACKPadding bool   `json:"ack_padding"`
	// INTTag is which data skbs INT tagged for the CCs that use it:
	// "every", "nth=N" or "tso-head". Results from before it existed have
	// none: "every".
	INTTag string `json:"int_tag,omitempty"`
	// BaseRTTMicros is the path's RTT with an empty queue, measured.
	BaseRTTMicros float64 `json:"base_rtt_us"`
}

// Workload is the traffic of a run.
type Workload struct {
	DurationSeconds float64 `json:"duration_s"`
	Quick           bool    `json:"quick"`
	Load            float64 `json:"load,omitempty"`
	Fanout          int     `json:"fanout,omitempty"`
	IncastBytes     int64   `json:"incast_bytes,omitempty"`
	Flows           int     `json:"flows,omitempty"`
	SampleMicros    float64 `json:"queue_sample_interval_us"`
	Seed            uint64  `json:"seed"`
}

// CCResult is one congestion control's measurements over every repeat.
type CCResult struct {
	// CC is the name the flows asked for; KernelCCs the names TCP_INFO's
	// owner reported back, over all runs (DCTCP hands a socket without
	// ECN to reno).
	CC        string   `json:"cc"`
	KernelCCs []string `json:"kernel_ccs"`
	// Params are the parameters of a ccload CC as it ran (ccload attach
	// --param); absent for the kernel's CCs.
	Params map[string]string `json:"params,omitempty"`
	// INT tells whether INT tagging was on for this CC's runs.
	INT bool `json:"int"`
	// ECN tells whether the CC asks for ECN by itself (TCP_CONG_NEEDS_ECN),
	// as a probe connection found; the receiver then runs it too.
	ECN bool `json:"ecn"`
	// Figures holds, for every per-run figure (see Figures()), its median
	// and spread over the runs, by name.
	Figures map[string]Spread `json:"figures"`
	// FCT has one entry per size bucket with at least one completed flow,
	// over the flows of all runs pooled.
	FCT []PooledFCT `json:"fct"`
	// Runs holds each repeat's measurements, in repeat order.
	Runs []RunResult `json:"runs"`
}

// Spread is one figure over the runs of a CC: its median, its extremes
// and how many runs had it.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

// PooledFCT is the flow completion times of one size bucket over the
// flows of every run. A percentile p is reported only when the pooled
// sample has at least 10/(1 − p/100) flows, so that at least ten flows lie
// beyond it: 1,000 for p99 and 10,000 for p99.9 (SupportedPercentile).
// Tail is the highest percentile the sample supports, for buckets too
// small for p99.
type PooledFCT struct {
	Bucket string  `json:"bucket"`
	Count  int     `json:"count"`
	MeanUs float64 `json:"mean_us"`
	P50Us  float64 `json:"p50_us"`
	// P99Us and P999Us are absent when the sample is too small for them.
	P99Us  *float64 `json:"p99_us,omitempty"`
	P999Us *float64 `json:"p999_us,omitempty"`
	// TailP is the highest of 50, 90, 95, 98, 99 and 99.9 that Count
	// supports, and TailUs and TailSlowdown that percentile; TailP is 0
	// when not even the median is supported.
	TailP        float64 `json:"tail_p"`
	TailUs       float64 `json:"tail_us"`
	TailSlowdown float64 `json:"tail_slowdown"`
	SlowdownP50  float64 `json:"slowdown_p50"`
	// TailQueue is how much of the slowest flows' time the bottleneck
	// queue can explain: over the flows at or beyond TailP, the largest
	// queueing delay (backlog at the line rate) read while each ran.
	// Absent when no queue reading covered those flows.
	TailQueue *TailQueue `json:"tail_queue,omitempty"`
}

// TailQueue is the bottleneck queueing delay that the slowest flows of a
// bucket saw: for each flow, the largest backlog the queue sampler read
// from its start until the sender read the receiver's FIN (and the
// reading just before it started), as time at the line rate; then the
// median and the largest of that over the flows.
type TailQueue struct {
	Flows    int     `json:"flows"`
	P50Us    float64 `json:"p50_us"`
	MaxUs    float64 `json:"max_us"`
	BucketUs float64 `json:"bucket_p50_us"` // the same median over every flow of the bucket
}

// RunResult is one congestion control's measurements in one repeat.
type RunResult struct {
	// Repeat is the repeat's index, from 0, and Seed the workload seed it
	// used (the same for every CC in that repeat).
	Repeat int    `json:"repeat"`
	Seed   uint64 `json:"seed"`
	// KernelCCs are the names TCP_INFO's owner reported back.
	KernelCCs []string `json:"kernel_ccs"`
	// ThroughputBps is the rate the bottleneck sent at over the run,
	// headers included, from the qdisc's byte counter.
	ThroughputBps float64 `json:"throughput_bps"`
	// GoodputBps is the payload bytes of completed flows over the run.
	GoodputBps float64 `json:"goodput_bps"`
	// Utilization is ThroughputBps over the bottleneck rate.
	Utilization float64 `json:"utilization"`
	// Queue percentiles over the run, from qdisc backlog samples.
	QueueP50Bytes  float64 `json:"queue_p50_bytes"`
	QueueP99Bytes  float64 `json:"queue_p99_bytes"`
	QueueMaxBytes  float64 `json:"queue_max_bytes"`
	QueueMeanBytes float64 `json:"queue_mean_bytes"`
	// QueueSamples is how many samples the percentiles rest on, and
	// QueueSampleGapP50Micros the median time between two.
	QueueSamples            int     `json:"queue_samples"`
	QueueSampleGapP50Micros float64 `json:"queue_sample_gap_p50_us"`
	// INTQueueP50Bytes and INTQueueP99Bytes are the INT hop's own view of
	// the queue (its model), sampled alongside the qdisc for comparison.
	INTQueueP50Bytes float64 `json:"int_queue_p50_bytes"`
	INTQueueP99Bytes float64 `json:"int_queue_p99_bytes"`
	// Drops is the packets the bottleneck dropped; Retransmits the
	// segments the senders retransmitted.
	Drops       uint64 `json:"drops"`
	Retransmits uint64 `json:"retransmits"`
	// Flows and FlowsFailed count the flows started and those that did not
	// complete intact.
	Flows       int `json:"flows"`
	FlowsFailed int `json:"flows_failed"`
	// FCTsByAppClock counts the flows whose FCT had to be timed in user
	// space, to the receiver's FIN, because the kernel gave no timestamp
	// of the ACK of their last byte (testbed.FlowResult.AckedIn); every
	// other FCT runs to that ACK.
	FCTsByAppClock int `json:"fcts_by_app_clock,omitempty"`
	// FCT has one entry per size bucket (<10KB, 10KB-1MB, >1MB, all) with
	// at least one completed flow of this run. Its percentiles rest on
	// this run's flows alone; CCResult.FCT pools the runs.
	FCT []FCTBucket `json:"fct"`
	// Jain is Jain's fairness index of the flows' throughput while all
	// of them were active (fairness scenario); null elsewhere.
	Jain *float64 `json:"jain,omitempty"`
	// ConvergenceMillis is, per join or leave event of the fairness
	// scenario, how long until Jain's index over the active flows stayed
	// at or above 0.9 for 100 ms; -1 where it never did.
	ConvergenceMillis []float64 `json:"convergence_ms,omitempty"`
	// BPF is the run-time cost of each BPF program that ran.
	BPF []ProgramCost `json:"bpf,omitempty"`
	// Cost is the per-ACK cost of the CC and of INT's sockops program,
	// against the floor measured in the same repeat; absent without BPF
	// statistics or for a kernel CC.
	Cost *ACKCost `json:"cost,omitempty"`
	// CPUBusy is the fraction of all CPUs busy over the run, from
	// /proc/stat. Senders, router and receiver share this host, so it
	// covers the whole emulated network.
	CPUBusy float64 `json:"cpu_busy"`
	// CCCounters are ccload's CC's own counters over the run (loader.Stats:
	// loss_events, fallbacks, repairs, ...); none for kernel CCs.
	CCCounters map[string]uint64 `json:"cc_counters,omitempty"`
	// Incast is how the incasts' queues drained (incast scenario only).
	Incast *IncastDrain `json:"incast,omitempty"`

	// durationMs is the run's traffic time, for figures that count a
	// never as the whole run.
	durationMs float64
}

// IncastDrain summarises, over the incasts of a run, how each one's queue
// peaked and drained (bench/stats.Drain, with incastDrain's settings).
// Figures over drained incasts are absent when none drained.
type IncastDrain struct {
	// Incasts is how many incasts were analysed; Drained how many of
	// them drained to one GSO packet before the next one started.
	Incasts int `json:"incasts"`
	Drained int `json:"drained"`
	// PeakP50Bytes is the median of the incasts' peak queues.
	PeakP50Bytes *float64 `json:"peak_p50_bytes,omitempty"`
	// DrainRTTs are the drain times, from the peak (or the incast's
	// start, if later), in RTTs at the peak.
	DrainRTTsP50 *float64 `json:"drain_rtts_p50,omitempty"`
	DrainRTTsP90 *float64 `json:"drain_rtts_p90,omitempty"`
	DrainRTTsMax *float64 `json:"drain_rtts_max,omitempty"`
	// UtilAfterDrain is the bottleneck's utilisation over the 100 ms
	// after each drain.
	UtilAfterDrainP50 *float64 `json:"util_after_drain_p50,omitempty"`
	UtilAfterDrainMin *float64 `json:"util_after_drain_min,omitempty"`
}

// FCTBucket is the flow completion times of one size bucket.
type FCTBucket struct {
	Bucket string  `json:"bucket"`
	Count  int     `json:"count"`
	MeanUs float64 `json:"mean_us"`
	P50Us  float64 `json:"p50_us"`
	P99Us  float64 `json:"p99_us"`
	P999Us float64 `json:"p999_us"`
	// Slowdown is FCT over the ideal FCT of the same size on an empty
	// path (stats.IdealFCT).
	SlowdownP50  float64 `json:"slowdown_p50"`
	SlowdownP99  float64 `json:"slowdown_p99"`
	SlowdownP999 float64 `json:"slowdown_p999"`
}

// ACKCost is what each ACK cost a CC's run in BPF programs, from the
// kernel's BPF statistics. Those statistics add a cost of their own to
// every run of a program (two clock reads); the floor is that cost plus a
// struct_ops call, measured in the same repeat on a null CC whose
// callbacks return at once (bench/perack).
type ACKCost struct {
	// Program is the CC's busiest program, which runs once per ACK;
	// ACKs is its run count and NsPerRun its mean run time.
	Program  string  `json:"program"`
	ACKs     uint64  `json:"acks"`
	NsPerRun float64 `json:"ns_per_run"`
	// FloorNsPerRun is the null CC's mean run time in this repeat, and
	// NsAboveFloor NsPerRun less it; both absent when the floor could
	// not be measured.
	FloorNsPerRun *float64 `json:"floor_ns_per_run,omitempty"`
	NsAboveFloor  *float64 `json:"ns_above_floor,omitempty"`
	// SockopsRunsPerACK and SockopsNsPerACK are INT's sockops program's
	// runs and run time per ACK of the CC, and SockopsNsPerACKAboveFloor
	// the run time less the floor for each of its runs; absent when INT
	// was off.
	SockopsRunsPerACK         *float64 `json:"sockops_runs_per_ack,omitempty"`
	SockopsNsPerACK           *float64 `json:"sockops_ns_per_ack,omitempty"`
	SockopsNsPerACKAboveFloor *float64 `json:"sockops_ns_per_ack_above_floor,omitempty"`
	// ArithNsPerCall is the CC's per-ACK arithmetic alone, timed in the
	// same repeat under BPF_PROG_TEST_RUN (bench/perack.MeasureArithmetic),
	// and ArithNsAboveFloor that less the test loop's own cost; absent for
	// CCs without an arithmetic program, or when it could not be timed.
	ArithNsPerCall    *float64 `json:"arith_ns_per_call,omitempty"`
	ArithNsAboveFloor *float64 `json:"arith_ns_above_floor,omitempty"`
}

// ProgramCost is one BPF program's run count and mean run time over a
// run, from the kernel's BPF statistics (kernel.bpf_stats_enabled).
type ProgramCost struct {
	Program string `json:"program"`
	// Type is the program's type: struct_ops (a CC), sockops (INT
	// tagging) or tc (the INT hop).
	Type     string  `json:"type"`
	Runs     uint64  `json:"runs"`
	NsPerRun float64 `json:"ns_per_run"`
}
