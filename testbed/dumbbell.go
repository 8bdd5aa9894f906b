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
	// SenderEgress, when set, attaches an egress shim to every sender's
	// uplink interface once the dumbbell is built; see EgressFunc.
	SenderEgress EgressFunc
	// SteerFlows makes every veth end hand each received flow to one CPU,
	// chosen by the flow's hash (RPS over all CPUs, through the
	// namespaces' net.core.rps_default_mask), as a NIC's receive queue
	// keeps a flow in order. Without it a veth can reorder a flow whose
	// packets are sent from both CPUs, and TCP takes that for loss. It
	// costs a wake-up of the other CPU per packet on idle CPUs, which adds
	// delay and jitter: the benchmarks' traffic scenarios set it, the clock
	// agents' measurements don't. On a kernel without the sysctl (before
	// 6.2) it does nothing.
	SteerFlows bool
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

// bottleneck returns the bottleneck's settings.
func (c DumbbellConfig) bottleneck() BottleneckConfig {
	return BottleneckConfig{Rate: c.BottleneckRate, BufferBytes: c.BufferBytes, ECNThreshold: c.ECNThreshold}
}

func (c DumbbellConfig) validate() error {
	if c.Senders < 1 || c.Senders > maxSenders {
		return fmt.Errorf("senders must be between 1 and %d, got %d", maxSenders, c.Senders)
	}
	return c.bottleneck().validate()
}

// ECNThresholdBytes is the marking threshold K in bytes that ECNThreshold
// amounts to at BottleneckRate: ECNThreshold·BottleneckRate/8. It is 0
// when either is 0.
func (c DumbbellConfig) ECNThresholdBytes() uint64 {
	return c.bottleneck().ECNThresholdBytes()
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
	// SenderIfaces[i] is sender i's uplink interface toward the router,
	// inside Senders[i]'s netns.
	SenderIfaces []string
	// Router forwards between the senders and the receiver.
	Router *Host
	// Receiver is the host behind the bottleneck.
	Receiver *Host
	// BottleneckIface is the name of the bottleneck interface inside the
	// Router's netns.
	BottleneckIface string
	// Bottlenecks holds the one bottleneck (on Router, BottleneckIface), in
	// the form a Chain has, so that code can treat both alike.
	Bottlenecks []Bottleneck
	// Config is the configuration in effect, with defaults filled in.
	Config DumbbellConfig

	topo topology
}

// NewDumbbell builds a Dumbbell. On error, and on a panic in
// cfg.SenderEgress, everything created so far has been removed.
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
	d.topo.steer = cfg.SteerFlows
	built := false
	defer func() {
		if !built {
			err = errors.Join(err, d.topo.close())
		}
	}()

	if d.Router, err = d.topo.addRouter(ctx, nm.netns("rtr")); err != nil {
		return nil, err
	}
	if d.Receiver, err = d.topo.addHost(ctx, nm.netns("rcv")); err != nil {
		return nil, err
	}
	if d.Senders, err = addHosts(ctx, &d.topo, nm, "snd", cfg.Senders); err != nil {
		return nil, err
	}
	for i, s := range d.Senders {
		_, ifS, err := d.topo.attachLeaf(ctx, nm, d.Router, fmt.Sprintf("r%d", i), s, fmt.Sprintf("s%d", i), accessSubnet(i))
		if err != nil {
			return nil, err
		}
		d.SenderIfaces = append(d.SenderIfaces, ifS)
	}
	if d.BottleneckIface, _, err = d.topo.attachLeaf(ctx, nm, d.Router, "btl", d.Receiver, "rcv", bottleneckSubnet()); err != nil {
		return nil, err
	}
	r4, r6 := bottleneckSubnet().host(1)
	d.Router.Addr, d.Router.Addr6 = r4.Addr(), r6.Addr()

	b, err := installBottleneckOn(ctx, d.Router, d.BottleneckIface, cfg.bottleneck())
	if err != nil {
		return nil, err
	}
	d.Bottlenecks = []Bottleneck{b}
	for i, s := range d.Senders {
		if err := d.topo.attachEgress(ctx, cfg.SenderEgress, s, d.SenderIfaces[i]); err != nil {
			return nil, err
		}
	}
	built = true
	return d, nil
}

// addHosts creates n hosts named role0 .. role(n-1).
func addHosts(ctx context.Context, t *topology, nm namer, role string, n int) ([]*Host, error) {
	hosts := make([]*Host, 0, n)
	for i := range n {
		h, err := t.addHost(ctx, nm.netns(fmt.Sprintf("%s%d", role, i)))
		if err != nil {
			return nil, err
		}
		hosts = append(hosts, h)
	}
	return hosts, nil
}

// Close closes the egress shims' closers and deletes every link and netns
// the Dumbbell created. It is idempotent.
//
// Sockets still open in the namespaces (for example an open Sink) and
// running SampleQueue calls keep the kernel namespace alive, though unnamed,
// until they end; stop them first.
func (d *Dumbbell) Close() error {
	return d.topo.close()
}
