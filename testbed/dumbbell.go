package testbed

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DefaultBufferBytes is the bottleneck queue limit used when
// DumbbellConfig.BufferBytes is 0.
const DefaultBufferBytes = 1 << 20

// minBufferBytes is the smallest accepted bottleneck queue: one full-size
// Ethernet frame.
const minBufferBytes = 1514

// minBottleneckRate is the smallest accepted non-zero rate, 1 kbit/s.
const minBottleneckRate = 1000

// DumbbellConfig configures NewDumbbell.
type DumbbellConfig struct {
	// Senders is the number of sender hosts, 1 to 250.
	Senders int
	// BottleneckRate is the rate in bits/s of the router's egress toward the
	// receiver. 0 means no shaping: the interface then gets a plain bfifo
	// root qdisc with limit BufferBytes.
	BottleneckRate uint64
	// BufferBytes is the byte limit of the bottleneck queue (the bfifo
	// leaf). 0 means DefaultBufferBytes.
	//
	// The limit is checked against whole GSO packets, which can be up to
	// 64 KiB with default offloads; buffers near or below that size drop
	// most large packets. With ECNThreshold the limit counts packet memory
	// (fq_codel's memory_limit, the skb truesize: a little more than the
	// packet's length), and at most 10240 packets.
	BufferBytes uint32
	// ECNThreshold, when positive, makes the bottleneck queue a DCTCP-style
	// step marker instead of a bfifo: every ECN-capable (ECT) packet that
	// has waited in the queue longer than ECNThreshold is marked CE as it
	// leaves; packets that are not ECN-capable are never marked and are
	// dropped only when the queue is full. The waiting time includes the
	// time spent behind the htb shaper, so at a busy bottleneck the
	// threshold corresponds to a queue of K = ECNThreshold·BottleneckRate/8
	// bytes ahead of the packet (ECNThresholdBytes), DCTCP's marking
	// threshold K.
	//
	// The leaf is an fq_codel qdisc (CONFIG_NET_SCH_FQ_CODEL) with a single
	// flow queue, so all flows share one FIFO; its ce_threshold is
	// ECNThreshold rounded to microseconds, and CoDel's own control law is
	// kept out of the way by a 1000 s target. When the queue overflows,
	// fq_codel drops from its head where bfifo drops the arriving packet.
	// When the kernel has no fq_codel, NewDumbbell fails with an error that
	// wraps ErrQdiscNotSupported.
	//
	// ECNThreshold needs a non-zero BottleneckRate and must be between 1µs
	// and 1s. 0, the default, keeps the bfifo leaf, which never marks.
	ECNThreshold time.Duration
	// Prefix is prepended to the netns names; "" means DefaultPrefix.
	Prefix string
}

func (c DumbbellConfig) withDefaults() DumbbellConfig {
	if c.BufferBytes == 0 {
		c.BufferBytes = DefaultBufferBytes
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	return c
}

func (c DumbbellConfig) validate() error {
	if c.Senders < 1 || c.Senders > maxSenders {
		return fmt.Errorf("senders must be between 1 and %d, got %d", maxSenders, c.Senders)
	}
	if c.BottleneckRate != 0 && c.BottleneckRate < minBottleneckRate {
		return fmt.Errorf("bottleneck rate must be 0 or at least %d bit/s, got %d", minBottleneckRate, c.BottleneckRate)
	}
	if c.BufferBytes < minBufferBytes {
		return fmt.Errorf("buffer must be at least %d bytes, got %d", minBufferBytes, c.BufferBytes)
	}
	if c.ECNThreshold != 0 {
		if c.BottleneckRate == 0 {
			return fmt.Errorf("ecn threshold %v needs a bottleneck rate", c.ECNThreshold)
		}
		if c.ECNThreshold < minECNThreshold || c.ECNThreshold > maxECNThreshold {
			return fmt.Errorf("ecn threshold must be 0 or between %v and %v, got %v", minECNThreshold, maxECNThreshold, c.ECNThreshold)
		}
	}
	return nil
}

// ECNThresholdBytes is the marking threshold K in bytes that ECNThreshold
// amounts to at BottleneckRate: ECNThreshold·BottleneckRate/8. It is 0
// when either is 0.
func (c DumbbellConfig) ECNThresholdBytes() uint64 {
	if c.ECNThreshold <= 0 || c.BottleneckRate == 0 {
		return 0
	}
	return uint64(c.ECNThreshold.Seconds() * float64(c.BottleneckRate) / 8)
}

// Dumbbell is senders[i] --veth-- router --veth-- receiver.
//
// The router forwards IPv4 and IPv6; senders and the receiver have default
// routes via the router, so all hosts reach each other over both families.
// Sender i is 198.18.i.2 / fd00:18:i::2, the receiver 198.19.0.2 / fd00:19::2
// and the router's primary addresses are 198.19.0.1 / fd00:19::1.
//
// The bottleneck is the router's interface toward the receiver: an htb root
// qdisc (handle 1:) whose default class 1:10 runs at BottleneckRate
// (rate = ceil), with a bfifo leaf (handle 10:) limited to BufferBytes, or,
// with ECNThreshold, an fq_codel leaf (handle 10:) that CE-marks at that
// threshold. Either way the root's backlog and drops include the leaf's, so
// SampleQueue on BottleneckIface reads the bottleneck queue. Offloads stay
// at their defaults, so the queue holds GSO packets, and a marked GSO
// packet arrives with all its segments marked.
type Dumbbell struct {
	// Senders are the hosts on the left of the bottleneck.
	Senders []*Host
	// Router forwards between the senders and the receiver.
	Router *Host
	// Receiver is the host behind the bottleneck.
	Receiver *Host
	// BottleneckIface is the name of the bottleneck interface inside the
	// Router's netns.
	BottleneckIface string
	// Config is the configuration in effect, with defaults filled in.
	Config DumbbellConfig

	topo topology
}

// NewDumbbell builds a Dumbbell. On error everything created so far has been
// removed.
func NewDumbbell(ctx context.Context, cfg DumbbellConfig) (_ *Dumbbell, err error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("dumbbell config: %w", err)
	}
	nm, err := newNamer(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("dumbbell config: %w", err)
	}

	d := &Dumbbell{Config: cfg}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.topo.close())
		}
	}()

	if err := d.buildHosts(ctx, nm); err != nil {
		return nil, err
	}
	for i, s := range d.Senders {
		if err := d.linkSender(ctx, nm, i, s); err != nil {
			return nil, err
		}
	}
	if err := d.linkReceiver(ctx, nm); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("install bottleneck qdisc: %w", err)
	}
	spec := bottleneckSpec{rateBits: cfg.BottleneckRate, limit: cfg.BufferBytes, ecnThreshold: cfg.ECNThreshold}
	if err := installBottleneck(d.Router, d.BottleneckIface, spec); err != nil {
		return nil, err
	}
	return d, nil
}

// buildHosts creates all namespaces and enables forwarding on the router.
func (d *Dumbbell) buildHosts(ctx context.Context, nm namer) (err error) {
	if d.Router, err = d.topo.addHost(ctx, nm.netns("rtr")); err != nil {
		return err
	}
	err = d.Router.setSysctls(
		sysctl{"net/ipv4/ip_forward", "1"},
		sysctl{"net/ipv6/conf/all/forwarding", "1"},
	)
	if err != nil {
		return err
	}
	if d.Receiver, err = d.topo.addHost(ctx, nm.netns("rcv")); err != nil {
		return err
	}
	for i := range d.Config.Senders {
		s, err := d.topo.addHost(ctx, nm.netns(fmt.Sprintf("snd%d", i)))
		if err != nil {
			return err
		}
		d.Senders = append(d.Senders, s)
	}
	return nil
}

// linkSender connects sender i to the router over access link i.
func (d *Dumbbell) linkSender(ctx context.Context, nm namer, i int, s *Host) error {
	ifS, err := nm.iface(fmt.Sprintf("s%d", i))
	if err != nil {
		return err
	}
	ifR, err := nm.iface(fmt.Sprintf("r%d", i))
	if err != nil {
		return err
	}
	if err := d.topo.addVeth(ctx, s, ifS, d.Router, ifR); err != nil {
		return err
	}

	r4, r6 := accessSubnet(i).host(1)
	s4, s6 := accessSubnet(i).host(2)
	if err := d.Router.addAddrs(ctx, ifR, r4, r6); err != nil {
		return err
	}
	if err := s.addAddrs(ctx, ifS, s4, s6); err != nil {
		return err
	}
	if err := s.addDefaultRoutes(ctx, ifS, r4.Addr(), r6.Addr()); err != nil {
		return err
	}
	s.Addr, s.Addr6 = s4.Addr(), s6.Addr()
	return nil
}

// linkReceiver connects the router to the receiver over the bottleneck link.
func (d *Dumbbell) linkReceiver(ctx context.Context, nm namer) error {
	ifB, err := nm.iface("btl")
	if err != nil {
		return err
	}
	ifRcv, err := nm.iface("rcv")
	if err != nil {
		return err
	}
	if err := d.topo.addVeth(ctx, d.Router, ifB, d.Receiver, ifRcv); err != nil {
		return err
	}
	d.BottleneckIface = ifB

	r4, r6 := bottleneckSubnet().host(1)
	c4, c6 := bottleneckSubnet().host(2)
	if err := d.Router.addAddrs(ctx, ifB, r4, r6); err != nil {
		return err
	}
	if err := d.Receiver.addAddrs(ctx, ifRcv, c4, c6); err != nil {
		return err
	}
	if err := d.Receiver.addDefaultRoutes(ctx, ifRcv, r4.Addr(), r6.Addr()); err != nil {
		return err
	}
	d.Router.Addr, d.Router.Addr6 = r4.Addr(), r6.Addr()
	d.Receiver.Addr, d.Receiver.Addr6 = c4.Addr(), c6.Addr()
	return nil
}

// Close deletes every link and netns the Dumbbell created. It is idempotent.
//
// Sockets still open in the namespaces (for example an open Sink) and
// running SampleQueue calls keep the kernel namespace alive, though unnamed,
// until they end; stop them first.
func (d *Dumbbell) Close() error {
	return d.topo.close()
}
