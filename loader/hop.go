package loader

import (
	"encoding/binary"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/ccload/ccload/qdisc"
	"github.com/ccload/ccload/telemetry"
)

// HopConfig configures a software INT hop (bpf/int_hop.c).
type HopConfig struct {
	// Iface is the forwarding interface whose egress the hop watches.
	Iface string
	// RateBps is the rate of the shaper on Iface (htb, tbf, or the link
	// itself); it must be one of the INT rate codes (telemetry.RateCode).
	RateBps uint64
	// BufferBytes is the shaper's queue limit; packets beyond it count as
	// drops in the hop's queue model.
	BufferBytes uint32
	// BurstBytes is the shaper's bucket (htb's burst, tbf's burst): what
	// it sends at once after an idle spell. 0 means one 1514-byte frame.
	BurstBytes uint32
	// ECNThreshold marks CE on ECT packets that find more bytes than this
	// queued; 0 turns marking off.
	ECNThreshold uint32
	// Method is how the program is attached (TCX where the kernel has it).
	Method qdisc.Method
}

// Hop is a software INT hop attached to an interface. It lives as long as
// the Hop: Close detaches it.
type Hop struct {
	coll *ebpf.Collection
	att  *qdisc.Attachment
}

// HopStats are the hop's counters and its queue model.
type HopStats struct {
	Packets        uint64 `json:"packets"`
	Records        uint64 `json:"records_written"`
	Full           uint64 `json:"options_full"`
	Malformed      uint64 `json:"options_malformed"`
	CEMarked       uint64 `json:"ce_marked"`
	BacklogBytes   uint64 `json:"model_backlog_bytes"`
	EnqueuedBytes  uint64 `json:"model_enqueued_bytes"`
	DroppedPackets uint64 `json:"model_dropped_packets"`
}

// NewHop loads the INT hop and attaches it to cfg.Iface in the calling
// thread's network namespace.
func NewHop(cfg HopConfig) (_ *Hop, err error) {
	code, err := telemetry.RateCode(cfg.RateBps)
	if err != nil {
		return nil, newError(KindBadParam, "set the shaper to one of the INT rates", err, "rate %s", FormatBandwidth(cfg.RateBps))
	}
	if cfg.BufferBytes == 0 {
		return nil, newError(KindBadParam, "give the shaper's buffer, e.g. 1MiB", nil, "no buffer size")
	}
	if err := checkCaps(); err != nil {
		return nil, err
	}
	spec, err := loadIntHop()
	if err != nil {
		return nil, fmt.Errorf("read embedded INT hop: %w", err)
	}
	conf := make([]byte, 24)
	binary.NativeEndian.PutUint64(conf[0:], cfg.RateBps)
	binary.NativeEndian.PutUint32(conf[8:], uint32(code))
	binary.NativeEndian.PutUint32(conf[12:], cfg.BufferBytes)
	binary.NativeEndian.PutUint32(conf[16:], cfg.ECNThreshold)
	burst := cfg.BurstBytes
	if burst == 0 {
		burst = 1514
	}
	binary.NativeEndian.PutUint32(conf[20:], burst)
	spec.Maps["hop_config"].Contents = []ebpf.MapKV{{Key: uint32(0), Value: conf}}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, loadError("the INT hop", err)
	}
	att, err := qdisc.Attach(cfg.Iface, coll.Programs["int_hop"], qdisc.AttachOptions{Direction: qdisc.Egress, Method: cfg.Method})
	if err != nil {
		coll.Close()
		return nil, fmt.Errorf("attach INT hop to %s: %w", cfg.Iface, err)
	}
	return &Hop{coll: coll, att: att}, nil
}

// Method says how the hop was attached.
func (h *Hop) Method() qdisc.Method { return h.att.Method() }

// Stats reads the hop's counters and queue model.
func (h *Hop) Stats() (HopStats, error) {
	var s HopStats
	counters := []*uint64{&s.Packets, &s.Records, &s.Full, &s.Malformed, &s.CEMarked}
	for i, c := range counters {
		var perCPU []uint64
		if err := h.coll.Maps["hop_stats"].Lookup(uint32(i), &perCPU); err != nil {
			return s, fmt.Errorf("read hop counters: %w", err)
		}
		for _, v := range perCPU {
			*c += v
		}
	}
	q := make([]byte, h.coll.Maps["hop_queue"].ValueSize())
	if err := h.coll.Maps["hop_queue"].Lookup(uint32(0), &q); err != nil {
		return s, fmt.Errorf("read hop queue: %w", err)
	}
	// struct hop_queue: lock(4) pad(4) backlog enqueued last_ns drops
	s.BacklogBytes = binary.NativeEndian.Uint64(q[8:])
	s.EnqueuedBytes = binary.NativeEndian.Uint64(q[16:])
	s.DroppedPackets = binary.NativeEndian.Uint64(q[32:])
	return s, nil
}

// Close detaches the hop.
func (h *Hop) Close() error {
	err := h.att.Close()
	h.coll.Close()
	return err
}
