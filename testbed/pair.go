package testbed

import (
	"context"
	"errors"
)

// Pair is the simplest topology: two hosts joined by one veth pair, with no
// router and no shaping.
//
// A is 198.18.0.1 / fd00:18::1 and B is 198.18.0.2 / fd00:18::2, both on
// one /24 and one /64.
type Pair struct {
	// A and B are the two ends.
	A, B *Host

	topo topology
}

// NewPair builds a Pair. prefix is prepended to the netns names; "" means
// DefaultPrefix. On error everything created so far has been removed.
func NewPair(ctx context.Context, prefix string) (_ *Pair, err error) {
	nm, err := newNamer(prefix)
	if err != nil {
		return nil, err
	}

	p := &Pair{}
	built := false
	defer func() {
		if !built {
			err = errors.Join(err, p.topo.close())
		}
	}()

	if p.A, err = p.topo.addHost(ctx, nm.netns("a")); err != nil {
		return nil, err
	}
	if p.B, err = p.topo.addHost(ctx, nm.netns("b")); err != nil {
		return nil, err
	}
	sub := accessSubnet(0)
	if _, _, err := p.topo.link(ctx, nm, p.A, "a", p.B, "b", sub); err != nil {
		return nil, err
	}
	a4, a6 := sub.host(1)
	b4, b6 := sub.host(2)
	p.A.Addr, p.A.Addr6 = a4.Addr(), a6.Addr()
	p.B.Addr, p.B.Addr6 = b4.Addr(), b6.Addr()
	built = true
	return p, nil
}

// Close deletes the veth pair and both namespaces. It is idempotent.
//
// Sockets still open in the namespaces (for example an open Sink) and
// running SampleQueue calls keep the kernel namespace alive, though unnamed,
// until they end; stop them first.
func (p *Pair) Close() error {
	return p.topo.close()
}
