package loader

import (
	"encoding/binary"
	"errors"
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
	// ACKPadding also attaches int_hop_ack to the ingress of Iface: it
	// refreshes this hop's record in the echoes of the ACKs that come back
	// through the interface (FastTune's ACK padding), so senders see the
	// queue as of the ACK's passage rather than as of their data's.
	ACKPadding bool
	// Method is how the program is attached (TCX where the kernel has it).
	Method qdisc.Method
}

// defaultHopBurst is the bucket of a shaper whose burst is not given: one
// full Ethernet frame.
const defaultHopBurst = 1514

// Names in bpf/int_hop.c.
const (
	hopConfigMap  = "hop_config"
	hopStatsMap   = "hop_stats"
	hopQueueMap   = "hop_queue"
	hopProgram    = "int_hop"
	hopACKProgram = "int_hop_ack"
)

// Hop is a software INT hop attached to an interface. It lives as long as
// the Hop: Close detaches it. Loader.AttachHop makes one that outlives
// the process instead.
type Hop struct {
	coll *ebpf.Collection
	atts []*qdisc.Attachment
}

// HopStats are the hop's counters and its queue model.
type HopStats struct {
	Packets        uint64 `json:"packets"`
	Records        uint64 `json:"records_written"`
	Full           uint64 `json:"options_full"`
	Malformed      uint64 `json:"options_malformed"`
	CEMarked       uint64 `json:"ce_marked"`
	ACKsPadded     uint64 `json:"acks_padded"`
	BacklogBytes   uint64 `json:"model_backlog_bytes"`
	EnqueuedBytes  uint64 `json:"model_enqueued_bytes"`
	DroppedPackets uint64 `json:"model_dropped_packets"`
}

// burst returns the shaper's bucket the hop models.
func (cfg HopConfig) burst() uint32 {
	if cfg.BurstBytes == 0 {
		return defaultHopBurst
	}
	return cfg.BurstBytes
}

// check validates cfg and returns the INT code of its rate.
func (cfg HopConfig) check() (uint8, error) {
	code, err := telemetry.RateCode(cfg.RateBps)
	if err != nil {
		return 0, newError(KindBadParam, "set the shaper to one of the INT rates", err, "rate %s", FormatBandwidth(cfg.RateBps))
	}
	if cfg.BufferBytes == 0 {
		return 0, newError(KindBadParam, "give the shaper's buffer, e.g. 1MiB", nil, "no buffer size")
	}
	return code, nil
}

// configBytes encodes cfg as struct hop_config of bpf/int_hop.c, field by
// field in the struct's order, zero-padded to size, the map's value size
// (the C struct's size, alignment included). A new trailing field is one
// more append here.
func (cfg HopConfig) configBytes(code uint8, size uint32) ([]byte, error) {
	b := binary.NativeEndian.AppendUint64(nil, cfg.RateBps)
	b = binary.NativeEndian.AppendUint32(b, uint32(code))
	b = binary.NativeEndian.AppendUint32(b, cfg.BufferBytes)
	b = binary.NativeEndian.AppendUint32(b, cfg.ECNThreshold)
	b = binary.NativeEndian.AppendUint32(b, cfg.burst())
	b = binary.NativeEndian.AppendUint32(b, boolU32(cfg.ACKPadding))
	if len(b) > int(size) {
		return nil, newError(KindLoad, "rebuild ccload: its INT hop object and its Go code disagree", nil,
			"the INT hop's %s holds %d bytes, but ccload writes %d", hopConfigMap, size, len(b))
	}
	return append(b, make([]byte, int(size)-len(b))...), nil
}

// hopConfigFromBytes decodes what configBytes wrote, as far as this
// ccload knows the fields.
func hopConfigFromBytes(b []byte) (HopConfig, error) {
	if len(b) < 24 {
		return HopConfig{}, fmt.Errorf("%s is %d bytes, too short for the INT hop's config", hopConfigMap, len(b))
	}
	return HopConfig{
		RateBps:      binary.NativeEndian.Uint64(b[0:]),
		BufferBytes:  binary.NativeEndian.Uint32(b[12:]),
		ECNThreshold: binary.NativeEndian.Uint32(b[16:]),
		BurstBytes:   binary.NativeEndian.Uint32(b[20:]),
		ACKPadding:   len(b) >= 28 && binary.NativeEndian.Uint32(b[24:]) != 0,
	}, nil
}

// hopProgramAt is one program of the hop and the side of the interface
// it runs on.
type hopProgramAt struct {
	name string
	dir  qdisc.Direction
}

// programs lists the programs of bpf/int_hop.c that cfg attaches, and
// where. NewHop and Loader.AttachHop attach exactly these.
func (cfg HopConfig) programs() []hopProgramAt {
	progs := []hopProgramAt{{name: hopProgram, dir: qdisc.Egress}}
	if cfg.ACKPadding {
		progs = append(progs, hopProgramAt{name: hopACKProgram, dir: qdisc.Ingress})
	}
	return progs
}

func boolU32(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// loadHop loads the INT hop's object with cfg in its config map, after
// checking cfg and this process's capabilities. Nothing is attached yet.
func loadHop(cfg HopConfig) (*ebpf.Collection, error) {
	code, err := cfg.check()
	if err != nil {
		return nil, err
	}
	if err := checkCaps(); err != nil {
		return nil, err
	}
	spec, err := loadIntHop()
	if err != nil {
		return nil, fmt.Errorf("read embedded INT hop: %w", err)
	}
	confSpec, ok := spec.Maps[hopConfigMap]
	if !ok {
		return nil, newError(KindLoad, "rebuild ccload: its INT hop object is incomplete", nil, "the INT hop object has no %s map", hopConfigMap)
	}
	conf, err := cfg.configBytes(code, confSpec.ValueSize)
	if err != nil {
		return nil, err
	}
	confSpec.Contents = []ebpf.MapKV{{Key: uint32(0), Value: conf}}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, loadError("the INT hop", err)
	}
	return coll, nil
}

// attachHop attaches the programs of coll that cfg asks for to cfg.Iface.
// When pinDir is not "", it pins each attachment there, as hopPin names
// it. On error it detaches what it attached.
func attachHop(coll *ebpf.Collection, cfg HopConfig, pinDir string) (_ []*qdisc.Attachment, err error) {
	var atts []*qdisc.Attachment
	defer func() {
		if err != nil {
			for i := len(atts) - 1; i >= 0; i-- {
				err = errors.Join(err, atts[i].Close())
			}
		}
	}()
	for _, p := range cfg.programs() {
		prog, ok := coll.Programs[p.name]
		if !ok {
			return nil, newError(KindLoad, "rebuild ccload: its INT hop object is incomplete", nil, "the INT hop object has no program %s", p.name)
		}
		att, err := qdisc.Attach(cfg.Iface, prog, qdisc.AttachOptions{Direction: p.dir, Method: cfg.Method})
		if err != nil {
			return nil, fmt.Errorf("attach INT hop program %s to %s %s: %w", p.name, cfg.Iface, p.dir, err)
		}
		atts = append(atts, att)
		if pinDir != "" {
			if err := att.Pin(hopPinPath(pinDir, p.dir)); err != nil {
				return nil, fmt.Errorf("pin INT hop program %s: %w", p.name, err)
			}
		}
	}
	return atts, nil
}

// NewHop loads the INT hop and attaches it to cfg.Iface in the calling
// thread's network namespace, for as long as this process keeps the Hop.
func NewHop(cfg HopConfig) (*Hop, error) {
	coll, err := loadHop(cfg)
	if err != nil {
		return nil, err
	}
	atts, err := attachHop(coll, cfg, "")
	if err != nil {
		coll.Close()
		return nil, err
	}
	return &Hop{coll: coll, atts: atts}, nil
}

// Method says how the hop was attached.
func (h *Hop) Method() qdisc.Method { return h.atts[0].Method() }

// Stats reads the hop's counters and queue model.
func (h *Hop) Stats() (HopStats, error) {
	return readHopStats(h.coll.Maps[hopStatsMap], h.coll.Maps[hopQueueMap])
}

// readHopStats reads the counters (hop_stats) and the queue model
// (hop_queue) of a hop, loaded in this process or pinned.
func readHopStats(stats, queue *ebpf.Map) (HopStats, error) {
	var s HopStats
	if stats == nil || queue == nil {
		return s, errors.New("read INT hop stats: the hop has no hop_stats or hop_queue map")
	}
	counters := []*uint64{&s.Packets, &s.Records, &s.Full, &s.Malformed, &s.CEMarked, &s.ACKsPadded}
	for i, c := range counters {
		var perCPU []uint64
		if err := stats.Lookup(uint32(i), &perCPU); err != nil {
			return s, fmt.Errorf("read hop counters: %w", err)
		}
		for _, v := range perCPU {
			*c += v
		}
	}
	q := make([]byte, queue.ValueSize())
	if err := queue.Lookup(uint32(0), &q); err != nil {
		return s, fmt.Errorf("read hop queue: %w", err)
	}
	if len(q) < 40 {
		return s, fmt.Errorf("read hop queue: %s is %d bytes, too short", hopQueueMap, len(q))
	}
	// struct hop_queue: lock(4) pad(4) backlog enqueued last_ns drops
	s.BacklogBytes = binary.NativeEndian.Uint64(q[8:])
	s.EnqueuedBytes = binary.NativeEndian.Uint64(q[16:])
	s.DroppedPackets = binary.NativeEndian.Uint64(q[32:])
	return s, nil
}

// Close detaches the hop.
func (h *Hop) Close() error {
	var err error
	for i := len(h.atts) - 1; i >= 0; i-- {
		err = errors.Join(err, h.atts[i].Close())
	}
	h.coll.Close()
	return err
}
