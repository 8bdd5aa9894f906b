// Package hop is the software INT hop: the tc program of bpf/int_hop.c on
// a forwarding interface's egress, which models the interface's shaper as
// a token bucket and writes this hop's record (queue, transmitted bytes,
// rate, time) into the forward INT option of each tagged packet, and, with
// ACK padding, refreshes that record in the echoes that return through the
// interface. A Hop lives as long as the process that made it ([New]); Pins
// attaches one that outlives it ([Pins.Attach]).
package hop

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/percpu"
	"github.com/ccload/ccload/internal/units"
	"github.com/ccload/ccload/qdisc"
	"github.com/ccload/ccload/telemetry"
)

// Config configures a software INT hop (bpf/int_hop.c).
type Config struct {
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

// Hop is a software INT hop attached to an interface. It lives as long as
// the Hop: Close detaches it. Pins.Attach makes one that outlives the
// process instead.
type Hop struct {
	objs *intHopObjects
	atts []*qdisc.Attachment
}

// Stats are the hop's counters and its queue model.
type Stats struct {
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
func (cfg Config) burst() uint32 {
	if cfg.BurstBytes == 0 {
		return defaultHopBurst
	}
	return cfg.BurstBytes
}

// check validates cfg and returns the INT code of its rate.
func (cfg Config) check() (uint8, error) {
	code, err := telemetry.RateCode(cfg.RateBps)
	if err != nil {
		return 0, kernel.NewError(kernel.KindBadParam, "set the shaper to one of the INT rates", err, "rate %s", units.FormatBandwidth(cfg.RateBps))
	}
	if cfg.BufferBytes == 0 {
		return 0, kernel.NewError(kernel.KindBadParam, "give the shaper's buffer, e.g. 1MiB", nil, "no buffer size")
	}
	return code, nil
}

// config is cfg as struct hop_config of bpf/int_hop.c.
func (cfg Config) config(code uint8) intHopHopConfig {
	return intHopHopConfig{
		RateBps:      cfg.RateBps,
		RateCode:     uint32(code),
		BufferBytes:  cfg.BufferBytes,
		EcnThreshold: cfg.ECNThreshold,
		BurstBytes:   cfg.burst(),
		AckPadding:   boolU32(cfg.ACKPadding),
	}
}

// configFrom reads back what config wrote.
func configFrom(c intHopHopConfig) Config {
	return Config{
		RateBps:      c.RateBps,
		BufferBytes:  c.BufferBytes,
		ECNThreshold: c.EcnThreshold,
		BurstBytes:   c.BurstBytes,
		ACKPadding:   c.AckPadding != 0,
	}
}

// programAt is one program of the hop and the side of the interface it
// runs on.
type programAt struct {
	prog *ebpf.Program
	dir  qdisc.Direction
}

// programs lists the programs of objs that cfg attaches, and where. New
// and Pins.Attach attach exactly these.
func (cfg Config) programs(objs *intHopObjects) []programAt {
	progs := []programAt{{prog: objs.IntHop, dir: qdisc.Egress}}
	if cfg.ACKPadding {
		progs = append(progs, programAt{prog: objs.IntHopAck, dir: qdisc.Ingress})
	}
	return progs
}

func boolU32(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// load loads the INT hop's object with cfg in its config map, after
// checking cfg and this process's capabilities. Nothing is attached yet.
func load(cfg Config) (*intHopObjects, error) {
	code, err := cfg.check()
	if err != nil {
		return nil, err
	}
	if err := kernel.CheckCaps(); err != nil {
		return nil, err
	}
	spec, err := loadIntHop()
	if err != nil {
		return nil, kernel.NewError(kernel.KindBadObject, "rebuild ccload", err, "read the embedded INT hop object")
	}
	spec.Maps[intHopMapHopConfig].Contents = []ebpf.MapKV{{Key: uint32(0), Value: cfg.config(code)}}
	objs := new(intHopObjects)
	if err := spec.LoadAndAssign(objs, nil); err != nil {
		return nil, kernel.LoadError("the INT hop", err)
	}
	return objs, nil
}

// attach attaches the programs of objs that cfg asks for to cfg.Iface.
// When pinDir is not "", it pins each attachment there, as qdisc.SidePin names
// it. On error it detaches what it attached.
func attach(objs *intHopObjects, cfg Config, pinDir string) (_ []*qdisc.Attachment, err error) {
	var atts []*qdisc.Attachment
	defer func() {
		if err != nil {
			for i := len(atts) - 1; i >= 0; i-- {
				err = errors.Join(err, atts[i].Close())
			}
		}
	}()
	for _, p := range cfg.programs(objs) {
		att, err := qdisc.Attach(cfg.Iface, p.prog, qdisc.AttachOptions{Direction: p.dir, Method: cfg.Method})
		if err != nil {
			return nil, fmt.Errorf("attach INT hop program %s to %s %s: %w", p.prog, cfg.Iface, p.dir, err)
		}
		atts = append(atts, att)
		if pinDir != "" {
			if err := att.Pin(qdisc.SidePin(pinDir, p.dir)); err != nil {
				return nil, fmt.Errorf("pin INT hop program %s: %w", p.prog, err)
			}
		}
	}
	return atts, nil
}

// New loads the INT hop and attaches it to cfg.Iface in the calling
// thread's network namespace, for as long as this process keeps the Hop.
// Pins.Foreground does the same after checking that no pinned hop runs
// there.
func New(cfg Config) (*Hop, error) {
	if _, err := cfg.check(); err != nil {
		return nil, err
	}
	if err := qdisc.RequireEthernet(cfg.Iface, "the INT hop"); err != nil {
		return nil, err
	}
	objs, err := load(cfg)
	if err != nil {
		return nil, err
	}
	atts, err := attach(objs, cfg, "")
	if err != nil {
		objs.Close()
		return nil, err
	}
	return &Hop{objs: objs, atts: atts}, nil
}

// Method says how the hop was attached.
func (h *Hop) Method() qdisc.Method { return h.atts[0].Method() }

// Stats reads the hop's counters and queue model.
func (h *Hop) Stats() (Stats, error) {
	return readStats(h.objs.HopStats, h.objs.HopQueue)
}

// readStats reads the counters (hop_stats) and the queue model
// (hop_queue) of a hop, loaded in this process or pinned.
func readStats(stats, queue *ebpf.Map) (Stats, error) {
	var s Stats
	counters := []*uint64{&s.Packets, &s.Records, &s.Full, &s.Malformed, &s.CEMarked, &s.ACKsPadded}
	sums, err := percpu.SumAll(stats, len(counters))
	if err != nil {
		return s, fmt.Errorf("read hop counters: %w", err)
	}
	for i, v := range sums {
		*counters[i] = v
	}
	var q intHopHopQueue
	if err := queue.Lookup(uint32(0), &q); err != nil {
		return s, fmt.Errorf("read hop queue: %w", err)
	}
	s.BacklogBytes, s.EnqueuedBytes, s.DroppedPackets = q.Backlog, q.Enqueued, q.Drops
	return s, nil
}

// Close detaches the hop.
func (h *Hop) Close() error {
	var err error
	for i := len(h.atts) - 1; i >= 0; i-- {
		err = errors.Join(err, h.atts[i].Close())
	}
	return errors.Join(err, h.objs.Close())
}

// Validate checks cfg as Pins.Attach would, without touching the kernel.
func (cfg Config) Validate() error {
	if cfg.Iface == "" {
		return kernel.NewError(kernel.KindBadParam, "name the forwarding interface, e.g. eth1", nil, "no interface given")
	}
	_, err := cfg.check()
	return err
}
