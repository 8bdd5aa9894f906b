package testbed

import (
	"errors"
	"fmt"
	"math"

	tc "github.com/florianl/go-tc"
	"golang.org/x/sys/unix"
)

// Handles of the bottleneck hierarchy: htb root 1:, class 1:10, bfifo 10:.
// A handle is major<<16 | minor.
const (
	htbClassMinor  = 0x10
	htbRootHandle  = 0x1 << 16
	htbClassHandle = htbRootHandle | htbClassMinor
	leafHandle     = htbClassMinor << 16
)

const (
	// burstTime is how much traffic at the class rate the htb bucket holds,
	// in addition to burstMTU. tc's default is rate/HZ + MTU with HZ=1000.
	burstTimeNs = 1_000_000
	burstMTU    = 1600

	// htb wants quantum within [1000, 200000] bytes and otherwise warns and
	// clamps; keep it at least one MTU.
	minQuantum = burstMTU
	maxQuantum = 200_000
	r2q        = 10

	// pschedShift converts nanoseconds to the kernel's psched ticks
	// (PSCHED_NS2TICKS: ns >> 6).
	pschedShift = 6

	// tcLinklayerEthernet is TC_LINKLAYER_ETHERNET. Declaring a link layer
	// tells the kernel not to expect a legacy rate table.
	tcLinklayerEthernet = 1
)

// htbClassParams are the parameters of the single htb class.
type htbClassParams struct {
	opt    tc.HtbOpt
	rate64 *uint64 // set when the rate does not fit tc_ratespec's 32 bits
}

// newHTBClassParams computes htb class parameters for rate bits/s:
// rate = ceil, burst = cburst = 1 ms at rate plus one MTU, quantum =
// rate/r2q clamped to [minQuantum, maxQuantum].
func newHTBClassParams(rateBits uint64) htbClassParams {
	rateBytes := rateBits / 8
	rate32 := uint32(min(rateBytes, math.MaxUint32))
	spec := tc.RateSpec{Rate: rate32, Linklayer: tcLinklayerEthernet}

	burst := rateBytes*burstTimeNs/1e9 + burstMTU
	ticks := uint32(min(float64(burst)*1e9/float64(rateBytes)/(1<<pschedShift), math.MaxUint32))
	quantum := uint32(min(max(rateBytes/r2q, minQuantum), maxQuantum))

	p := htbClassParams{opt: tc.HtbOpt{
		Rate:    spec,
		Ceil:    spec,
		Buffer:  ticks,
		Cbuffer: ticks,
		Quantum: quantum,
	}}
	if rateBytes > math.MaxUint32 {
		r := rateBytes
		p.rate64 = &r
	}
	return p
}

// installBottleneck installs the bottleneck qdiscs on interface ifname of
// host h: htb root with one default class at rateBits and a bfifo leaf of
// limit bytes, or, with rateBits 0, a bfifo root of limit bytes.
func installBottleneck(h *Host, ifname string, rateBits uint64, limit uint32) (err error) {
	nl, err := h.handle()
	if err != nil {
		return err
	}
	link, err := nl.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("find %s in netns %s: %w", ifname, h.Name, err)
	}
	ifindex := uint32(link.Attrs().Index)

	ns, err := h.nsFd()
	if err != nil {
		return err
	}
	tcnl, err := tc.Open(&tc.Config{NetNS: ns})
	if err != nil {
		return fmt.Errorf("open tc netlink in netns %s: %w", h.Name, err)
	}
	defer func() {
		if cerr := tcnl.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close tc netlink in netns %s: %w", h.Name, cerr))
		}
	}()

	msg := func(handle, parent uint32) tc.Msg {
		return tc.Msg{Family: unix.AF_UNSPEC, Ifindex: ifindex, Handle: handle, Parent: parent}
	}
	bfifo := func(handle, parent uint32) *tc.Object {
		return &tc.Object{
			Msg:       msg(handle, parent),
			Attribute: tc.Attribute{Kind: "bfifo", Bfifo: &tc.FifoOpt{Limit: limit}},
		}
	}

	if rateBits == 0 {
		if err := tcnl.Qdisc().Add(bfifo(htbRootHandle, tc.HandleRoot)); err != nil {
			return fmt.Errorf("add bfifo root qdisc on %s in netns %s: %w", ifname, h.Name, err)
		}
		return nil
	}

	root := &tc.Object{
		Msg: msg(htbRootHandle, tc.HandleRoot),
		Attribute: tc.Attribute{Kind: "htb", Htb: &tc.Htb{Init: &tc.HtbGlob{
			Version:      3,
			Rate2Quantum: r2q,
			Defcls:       htbClassMinor,
		}}},
	}
	if err := tcnl.Qdisc().Add(root); err != nil {
		return fmt.Errorf("add htb root qdisc on %s in netns %s: %w", ifname, h.Name, err)
	}

	p := newHTBClassParams(rateBits)
	class := &tc.Object{
		Msg: msg(htbClassHandle, htbRootHandle),
		Attribute: tc.Attribute{Kind: "htb", Htb: &tc.Htb{
			Parms:  &p.opt,
			Rate64: p.rate64,
			Ceil64: p.rate64,
		}},
	}
	if err := tcnl.Class().Add(class); err != nil {
		return fmt.Errorf("add htb class at %d bit/s on %s in netns %s: %w", rateBits, ifname, h.Name, err)
	}

	if err := tcnl.Qdisc().Add(bfifo(leafHandle, htbClassHandle)); err != nil {
		return fmt.Errorf("add bfifo leaf qdisc on %s in netns %s: %w", ifname, h.Name, err)
	}
	return nil
}
