package testbed

import (
	"context"
	"errors"
	"fmt"
)

// ChainConfig configures NewChain.
type ChainConfig struct {
	// Senders is the number of sender hosts attached to Router1, 1 to 250.
	// Their traffic to the receiver crosses both bottlenecks.
	Senders int
	// CrossSenders is the number of cross-traffic hosts attached to
	// Router2, 0 to 240. Their traffic to the receiver crosses only the
	// second bottleneck, so it can congest hop 2 while hop 1 stays idle.
	CrossSenders int
	// Hop1 is the first bottleneck: Router1's egress toward Router2.
	Hop1 BottleneckConfig
	// Hop2 is the second bottleneck: Router2's egress toward the receiver.
	Hop2 BottleneckConfig
	// Prefix is prepended to the netns names; "" means DefaultPrefix.
	Prefix string
	// SenderEgress, when set, attaches an egress shim to every sender's
	// uplink interface once the chain is built; see EgressFunc.
	SenderEgress EgressFunc
	// CrossEgress is SenderEgress for the cross senders' uplinks; it is
	// separate so that a shim can be given to one group only.
	CrossEgress EgressFunc
}

func (c ChainConfig) withDefaults() ChainConfig {
	c.Hop1 = c.Hop1.withDefaults()
	c.Hop2 = c.Hop2.withDefaults()
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	return c
}

func (c ChainConfig) validate() error {
	if c.Senders < 1 || c.Senders > maxSenders {
		return fmt.Errorf("senders must be between 1 and %d, got %d", maxSenders, c.Senders)
	}
	if c.CrossSenders < 0 || c.CrossSenders > maxCrossSenders {
		return fmt.Errorf("cross senders must be between 0 and %d, got %d", maxCrossSenders, c.CrossSenders)
	}
	if err := c.Hop1.validate(); err != nil {
		return fmt.Errorf("hop 1: %w", err)
	}
	if err := c.Hop2.validate(); err != nil {
		return fmt.Errorf("hop 2: %w", err)
	}
	return nil
}

// Chain is two bottlenecks in series, for multi-hop telemetry:
//
//	senders[i] --veth-- Router1 ==hop 1==> Router2 ==hop 2==> Receiver
//	                                          |
//	                     crossSenders[j] --veth
//
// Hop 1 is Router1's interface toward Router2, hop 2 is Router2's interface
// toward the receiver; each is built like a Dumbbell's bottleneck (htb root
// 1:, class 1:10, bfifo or fq_codel leaf 10:) from its own
// BottleneckConfig, and Bottlenecks describes both, in path order.
//
// Addresses (see the plan in addr.go): sender i is 198.18.i.2 /
// fd00:18:i::2 on access link i, whose .1 is Router1; Router1 is
// 198.19.1.1 / fd00:19:1::1 and Router2 198.19.1.2 / fd00:19:1::2 on router
// link 1; Router2 is 198.19.0.1 / fd00:19::1 and the receiver 198.19.0.2 /
// fd00:19::2 on the last-hop link; cross sender j is 198.19.(16+j).2 /
// fd00:19:(16+j)::2 on cross access link j, whose .1 is Router2. Host.Addr
// and Host.Addr6 hold these: for Router1 its router-link address, for
// Router2 its last-hop address.
//
// Both routers forward IPv4 and IPv6. Senders have default routes via
// Router1, Router1 via Router2, and the receiver and cross senders via
// Router2; Router2 reaches the senders' access links (198.18.0.0/16,
// fd00:18::/32) via Router1. Every host reaches every other over both
// families. Reverse traffic (ACKs) crosses no bottleneck.
type Chain struct {
	// Senders are the hosts behind Router1.
	Senders []*Host
	// SenderIfaces[i] is sender i's uplink interface toward Router1.
	SenderIfaces []string
	// CrossSenders are the hosts behind Router2.
	CrossSenders []*Host
	// CrossIfaces[j] is cross sender j's uplink interface toward Router2.
	CrossIfaces []string
	// Router1 owns the first bottleneck; Router2 the second.
	Router1, Router2 *Host
	// Receiver is the host behind the second bottleneck.
	Receiver *Host
	// Bottlenecks are hop 1 (Router1's egress toward Router2) and hop 2
	// (Router2's egress toward the Receiver), in this order.
	Bottlenecks []Bottleneck
	// Config is the configuration in effect, with defaults filled in.
	Config ChainConfig

	topo      topology
	hopIfaces [2]string // the bottleneck interfaces, set by buildLinks
}

// NewChain builds a Chain. On error, and on a panic in an EgressFunc,
// everything created so far has been removed.
func NewChain(ctx context.Context, cfg ChainConfig) (_ *Chain, err error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("chain config: %w", err)
	}
	nm, err := newNamer(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("chain config: %w", err)
	}

	c := &Chain{Config: cfg}
	built := false
	defer func() {
		if !built {
			err = errors.Join(err, c.topo.close())
		}
	}()

	if err := c.buildHosts(ctx, nm); err != nil {
		return nil, err
	}
	if err := c.buildLinks(ctx, nm); err != nil {
		return nil, err
	}

	hop1, err := installBottleneckOn(ctx, c.Router1, c.hopIfaces[0], cfg.Hop1)
	if err != nil {
		return nil, fmt.Errorf("hop 1: %w", err)
	}
	hop2, err := installBottleneckOn(ctx, c.Router2, c.hopIfaces[1], cfg.Hop2)
	if err != nil {
		return nil, fmt.Errorf("hop 2: %w", err)
	}
	c.Bottlenecks = []Bottleneck{hop1, hop2}

	for i, s := range c.Senders {
		if err := c.topo.attachEgress(ctx, cfg.SenderEgress, s, c.SenderIfaces[i]); err != nil {
			return nil, err
		}
	}
	for j, x := range c.CrossSenders {
		if err := c.topo.attachEgress(ctx, cfg.CrossEgress, x, c.CrossIfaces[j]); err != nil {
			return nil, err
		}
	}
	built = true
	return c, nil
}

// buildHosts creates all namespaces and enables forwarding on the routers.
func (c *Chain) buildHosts(ctx context.Context, nm namer) (err error) {
	if c.Router1, err = c.topo.addRouter(ctx, nm.netns("rtr1")); err != nil {
		return err
	}
	if c.Router2, err = c.topo.addRouter(ctx, nm.netns("rtr2")); err != nil {
		return err
	}
	if c.Receiver, err = c.topo.addHost(ctx, nm.netns("rcv")); err != nil {
		return err
	}
	if c.Senders, err = addHosts(ctx, &c.topo, nm, "snd", c.Config.Senders); err != nil {
		return err
	}
	c.CrossSenders, err = addHosts(ctx, &c.topo, nm, "x", c.Config.CrossSenders)
	return err
}

// buildLinks creates, addresses and routes every link.
func (c *Chain) buildLinks(ctx context.Context, nm namer) error {
	for i, s := range c.Senders {
		_, ifS, err := c.topo.attachLeaf(ctx, nm, c.Router1, fmt.Sprintf("r%d", i), s, fmt.Sprintf("s%d", i), accessSubnet(i))
		if err != nil {
			return err
		}
		c.SenderIfaces = append(c.SenderIfaces, ifS)
	}

	// Router link 1: Router1 is host 1, Router2 host 2.
	mid := routerSubnet(1)
	ifOut1, ifIn2, err := c.topo.link(ctx, nm, c.Router1, "btl1", c.Router2, "in1", mid)
	if err != nil {
		return err
	}
	c.hopIfaces[0] = ifOut1
	r1v4, r1v6 := mid.host(1)
	r2v4, r2v6 := mid.host(2)
	if err := c.Router1.addDefaultRoutes(ctx, ifOut1, r2v4.Addr(), r2v6.Addr()); err != nil {
		return err
	}
	senders := allAccessSubnets()
	err = c.Router2.addRoutes(ctx, ifIn2,
		route{dst: senders.v4, gw: r1v4.Addr()},
		route{dst: senders.v6, gw: r1v6.Addr()},
	)
	if err != nil {
		return err
	}
	c.Router1.Addr, c.Router1.Addr6 = r1v4.Addr(), r1v6.Addr()

	if c.hopIfaces[1], _, err = c.topo.attachLeaf(ctx, nm, c.Router2, "btl2", c.Receiver, "rcv", bottleneckSubnet()); err != nil {
		return err
	}
	last4, last6 := bottleneckSubnet().host(1)
	c.Router2.Addr, c.Router2.Addr6 = last4.Addr(), last6.Addr()

	for j, x := range c.CrossSenders {
		_, ifX, err := c.topo.attachLeaf(ctx, nm, c.Router2, fmt.Sprintf("y%d", j), x, fmt.Sprintf("x%d", j), crossSubnet(j))
		if err != nil {
			return err
		}
		c.CrossIfaces = append(c.CrossIfaces, ifX)
	}
	return nil
}

// Close closes the egress shims' closers and deletes every link and netns
// the Chain created. It is idempotent.
//
// Sockets still open in the namespaces (for example an open Sink) and
// running SampleQueue calls keep the kernel namespace alive, though unnamed,
// until they end; stop them first.
func (c *Chain) Close() error {
	return c.topo.close()
}
