package bench

import (
	_ "embed"
	"time"
)

// SchemaID names the version of results.json's layout; it changes when a
// field changes meaning or goes away.
const SchemaID = "https://ccload.dev/schema/bench-results/v1"

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
	// CCs holds one entry per congestion control, in run order.
	CCs []CCResult `json:"ccs"`
}

// Machine is the host a run measured.
type Machine struct {
	Kernel string `json:"kernel"`
	CPUs   int    `json:"cpus"`
	CPU    string `json:"cpu_model,omitempty"`
}

// Topology is the emulated network of a run.
type Topology struct {
	// Kind is "dumbbell": senders -> router -> receiver.
	Kind              string `json:"kind"`
	Senders           int    `json:"senders"`
	RateBps           uint64 `json:"bottleneck_bps"`
	BufferBytes       uint32 `json:"buffer_bytes"`
	ECNThresholdBytes uint32 `json:"ecn_threshold_bytes"`
	ACKPadding        bool   `json:"ack_padding"`
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

// CCResult is one congestion control's measurements.
type CCResult struct {
	// CC is the name the flows asked for; KernelCCs the names TCP_INFO's
	// owner reported back (DCTCP hands a socket without ECN to reno).
	CC        string   `json:"cc"`
	KernelCCs []string `json:"kernel_ccs"`
	// Params are the parameters of a ccload CC as it ran (ccload attach
	// --param); absent for the kernel's CCs.
	Params map[string]string `json:"params,omitempty"`
	// INT tells whether INT tagging was on for this CC's run.
	INT bool `json:"int"`
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
	// FCT has one entry per size bucket (<10KB, 10KB-1MB, >1MB, all) with
	// at least one completed flow.
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
	// CPUBusy is the fraction of all CPUs busy over the run, from
	// /proc/stat. Senders, router and receiver share this host, so it
	// covers the whole emulated network.
	CPUBusy float64 `json:"cpu_busy"`
	// Incast is how the incasts' queues drained (incast scenario only).
	Incast *IncastDrain `json:"incast,omitempty"`
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

// ProgramCost is one BPF program's run count and mean run time over a
// run, from the kernel's BPF statistics (kernel.bpf_stats_enabled).
type ProgramCost struct {
	Program  string  `json:"program"`
	Runs     uint64  `json:"runs"`
	NsPerRun float64 `json:"ns_per_run"`
}
