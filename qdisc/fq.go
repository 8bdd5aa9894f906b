package qdisc

import (
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	tc "github.com/florianl/go-tc"
	"golang.org/x/sys/unix"
)

// fqHandle is the handle of the fq root qdisc this package installs,
// "cc0f:" in tc(8)'s notation. Close deletes the root qdisc only while it
// still has this handle and kind.
const fqHandle = 0xcc0f << 16

// FQConfig holds fq's options. A zero field keeps the kernel's default.
type FQConfig struct {
	// Limit is the most packets fq holds in all (kernel default 10000).
	Limit uint32
	// FlowLimit is the most packets fq holds per flow (kernel default
	// 100). Packets beyond it are dropped.
	FlowLimit uint32
	// Horizon is how far in the future a departure time may lie (kernel
	// default 10 s, microsecond resolution). fq drops packets stamped
	// beyond it.
	Horizon time.Duration
	// FlowMaxRateBps caps each flow's rate, in bits/s (0: no cap, the
	// kernel's default). fq spaces a flow's packets to it on top of any
	// departure time they carry; the kernel takes it in bytes/s, at most
	// 2^32-2 (about 34 Gbit/s).
	FlowMaxRateBps uint64
}

// horizonDrop is TCA_FQ_HORIZON_DROP's value for "drop packets beyond the
// horizon" (rather than cap their departure time at it), the kernel's
// default. It is always sent: go-tc refuses to add an fq without options.
const horizonDrop uint8 = 1

// options converts c to go-tc's fq attributes.
func (c FQConfig) options() (*tc.Fq, error) {
	drop := horizonDrop
	fq := tc.Fq{HorizonDrop: &drop}
	if c.Limit != 0 {
		fq.PLimit = &c.Limit
	}
	if c.FlowLimit != 0 {
		fq.FlowPLimit = &c.FlowLimit
	}
	switch us := c.Horizon.Microseconds(); {
	case c.Horizon < 0:
		return nil, fmt.Errorf("fq horizon %v is negative", c.Horizon)
	case us > math.MaxUint32:
		return nil, fmt.Errorf("fq horizon %v exceeds %v", c.Horizon, time.Duration(math.MaxUint32)*time.Microsecond)
	case c.Horizon > 0 && us == 0:
		return nil, fmt.Errorf("fq horizon %v is below fq's resolution of 1µs", c.Horizon)
	case us > 0:
		h := uint32(us)
		fq.Horizon = &h
	}
	if c.FlowMaxRateBps != 0 {
		perSec := c.FlowMaxRateBps / 8
		if perSec == 0 || perSec >= math.MaxUint32 {
			return nil, fmt.Errorf("fq flow max rate %d bit/s: give 8 bit/s to %d bit/s", c.FlowMaxRateBps, uint64(math.MaxUint32-1)*8)
		}
		r := uint32(perSec)
		fq.FlowMaxRate = &r
	}
	return &fq, nil
}

// FQ is an fq root qdisc that InstallFQ installed on one interface.
type FQ struct {
	dev *netdev
}

// FQStats are fq's counters.
type FQStats struct {
	// Packets and Bytes fq has sent; Drops it has dropped, for any reason.
	Packets uint32
	Bytes   uint64
	Drops   uint32
	// Backlog is the number of packets queued now.
	Backlog uint32
	// Throttled counts the times a flow had to wait for the departure
	// time of its next packet.
	Throttled uint64
	// FlowLimitDrops counts packets dropped because their flow held
	// FQConfig.FlowLimit packets.
	FlowLimitDrops uint64
	// HorizonDrops counts packets dropped because their departure time
	// lay beyond FQConfig.Horizon.
	HorizonDrops uint64
}

// InstallFQ installs fq as the root qdisc of iface, an interface of the
// calling thread's network namespace. It replaces the interface's default
// root qdisc (noqueue, pfifo_fast, mq), but refuses to replace one that
// somebody installed: that one is reported in the error.
//
// A kernel without sch_fq yields an error wrapping ErrNoFQ.
func InstallFQ(iface string, cfg FQConfig) (_ *FQ, err error) {
	opts, err := cfg.options()
	if err != nil {
		return nil, fmt.Errorf("install fq on %s: %w", iface, err)
	}
	d, err := openNetdev(iface)
	if err != nil {
		return nil, fmt.Errorf("install fq: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.close())
		}
	}()

	root := &tc.Object{
		Msg:       d.msg(fqHandle, tc.HandleRoot, 0),
		Attribute: tc.Attribute{Kind: "fq", Fq: opts},
	}
	// Add, not Replace: the kernel lets it take the place of the default
	// root qdisc (handle 0), and answers EEXIST for any other.
	if err := d.tc.Qdisc().Add(root); err != nil {
		switch {
		case errUnknownKind(err):
			return nil, fmt.Errorf("install fq root qdisc on %s: %w: %w", iface, ErrNoFQ, err)
		case errors.Is(err, unix.EEXIST):
			return nil, fmt.Errorf("install fq root qdisc on %s: %s: %w", iface, describeRoot(d), err)
		}
		return nil, fmt.Errorf("install fq root qdisc on %s: %w", iface, err)
	}
	return &FQ{dev: d}, nil
}

// describeRoot names the root qdisc in the way, for an error message.
func describeRoot(d *netdev) string {
	q, err := d.rootQdisc()
	switch {
	case err != nil:
		return "a root qdisc is installed already"
	case q == nil:
		return "the root qdisc is in the way"
	}
	return fmt.Sprintf("root qdisc %s %s is installed already; remove it first", q.Kind, handleString(q.Handle))
}

// Interface returns the name of the interface the qdisc is on.
func (q *FQ) Interface() string {
	return q.dev.name
}

// Stats reads fq's counters.
func (q *FQ) Stats() (FQStats, error) {
	if q.dev.tc == nil {
		return FQStats{}, fmt.Errorf("read fq stats of %s: %w", q.dev.name, os.ErrClosed)
	}
	o, err := q.dev.findQdisc("fq", fqHandle, tc.HandleRoot)
	if err != nil {
		return FQStats{}, fmt.Errorf("read fq stats: %w", err)
	}
	if o == nil {
		return FQStats{}, fmt.Errorf("read fq stats of %s: the fq root qdisc is gone", q.dev.name)
	}
	var s FQStats
	if o.Stats != nil {
		s.Packets, s.Bytes, s.Drops, s.Backlog = o.Stats.Packets, o.Stats.Bytes, o.Stats.Drops, o.Stats.Qlen
	}
	if o.XStats != nil && o.XStats.Fq != nil {
		x := o.XStats.Fq
		s.Throttled, s.FlowLimitDrops, s.HorizonDrops = x.Throttled, x.FlowsPlimit, x.HorizonDrops
	}
	return s, nil
}

// Close deletes the fq root qdisc, so that the kernel puts the default one
// back, unless it is gone already (with its interface, or replaced by
// somebody else's). It is idempotent.
func (q *FQ) Close() error {
	if q.dev.tc == nil {
		return nil
	}
	err := q.remove()
	return errors.Join(err, q.dev.close())
}

func (q *FQ) remove() error {
	d := q.dev
	o, err := d.findQdisc("fq", fqHandle, tc.HandleRoot)
	if err != nil {
		if errGone(err) {
			return nil
		}
		return fmt.Errorf("remove fq from %s: %w", d.name, err)
	}
	if o == nil {
		return nil
	}
	// go-tc wants fq options even to delete; empty ones send none.
	del := &tc.Object{Msg: d.msg(fqHandle, tc.HandleRoot, 0), Attribute: tc.Attribute{Kind: "fq", Fq: &tc.Fq{}}}
	if err := d.tc.Qdisc().Delete(del); err != nil && !errGone(err) {
		return fmt.Errorf("remove fq root qdisc from %s: %w", d.name, err)
	}
	return nil
}
