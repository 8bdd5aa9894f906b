package testbed

import (
	"errors"
	"fmt"
	"math"
	"time"

	tc "github.com/florianl/go-tc"
	"golang.org/x/sys/unix"
)

// ErrQdiscNotSupported is wrapped into the error of NewDumbbell when the
// running kernel does not have a qdisc that the configuration needs, such
// as fq_codel for DumbbellConfig.ECNThreshold. Test for it with errors.Is.
var ErrQdiscNotSupported = errors.New("qdisc kind not supported by the kernel")

// Handles of the bottleneck hierarchy: htb root 1:, class 1:10, leaf 10:
// (bfifo, or fq_codel for ECN marking). A handle is major<<16 | minor.
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

// Parameters of the fq_codel leaf that DumbbellConfig.ECNThreshold asks
// for. fq_codel takes its times in microseconds.
const (
	// markerFlows is the number of fq_codel flow queues: one, so that all
	// flows share a single FIFO, as they share a switch port's queue.
	markerFlows = 1
	// markerPacketLimit is fq_codel's packet limit, its default. The byte
	// limit is BufferBytes, as memory_limit.
	markerPacketLimit = 10240
	// codelOffTarget is CoDel's target delay. No queue this package builds
	// gets near it, so CoDel's own drop (or mark) law never engages and
	// only the ce_threshold step marks. CoDel compares times in signed
	// 32-bit units of 1024 ns, so the target must stay below about 2199 s.
	codelOffTarget = 1000 * time.Second
	// codelInterval is CoDel's interval, its default. It only matters once
	// the target is exceeded.
	codelInterval = 100 * time.Millisecond
	// minECNThreshold and maxECNThreshold bound DumbbellConfig.ECNThreshold.
	minECNThreshold = time.Microsecond
	maxECNThreshold = time.Second
)

// bottleneckSpec describes the qdiscs installBottleneck builds.
type bottleneckSpec struct {
	// rateBits is the htb class rate in bits/s; 0 means no htb, only a
	// bfifo root.
	rateBits uint64
	// limit is the leaf's byte limit.
	limit uint32
	// ecnThreshold, when positive, makes the leaf an fq_codel that CE-marks
	// packets whose sojourn time exceeds it, instead of a bfifo. It needs
	// rateBits > 0.
	ecnThreshold time.Duration
}

// stepMarker returns the options of an fq_codel qdisc that acts as a
// DCTCP-style step marker: a single FIFO of at most limit bytes (of packet
// memory) that CE-marks every ECN-capable packet whose sojourn time exceeds
// threshold, and whose CoDel law never engages.
func stepMarker(threshold time.Duration, limit uint32) *tc.FqCodel {
	micros := func(d time.Duration) *uint32 {
		v := uint32((d + time.Microsecond/2) / time.Microsecond)
		return &v
	}
	one := uint32(1)
	flows := uint32(markerFlows)
	packets := uint32(markerPacketLimit)
	return &tc.FqCodel{
		Target:      micros(codelOffTarget),
		Interval:    micros(codelInterval),
		Limit:       &packets,
		MemoryLimit: &limit,
		ECN:         &one,
		Flows:       &flows,
		CEThreshold: micros(max(threshold, minECNThreshold)),
	}
}

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
// host h: htb root with one default class at spec.rateBits and a leaf of
// spec.limit bytes (a bfifo, or the fq_codel step marker of stepMarker when
// spec.ecnThreshold is set), or, with rateBits 0, a bfifo root of limit
// bytes. A leaf kind the kernel lacks yields an error that wraps
// ErrQdiscNotSupported.
func installBottleneck(h *Host, ifname string, spec bottleneckSpec) (err error) {
	rateBits, limit := spec.rateBits, spec.limit
	if spec.ecnThreshold > 0 && rateBits == 0 {
		return fmt.Errorf("bottleneck on %s in netns %s: ECN marking needs a bottleneck rate", ifname, h.Name)
	}
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

	if spec.ecnThreshold == 0 {
		if err := tcnl.Qdisc().Add(bfifo(leafHandle, htbClassHandle)); err != nil {
			return fmt.Errorf("add bfifo leaf qdisc on %s in netns %s: %w", ifname, h.Name, err)
		}
		return nil
	}

	marker := &tc.Object{
		Msg: msg(leafHandle, htbClassHandle),
		Attribute: tc.Attribute{
			Kind:    "fq_codel",
			FqCodel: stepMarker(spec.ecnThreshold, limit),
		},
	}
	if err := tcnl.Qdisc().Add(marker); err != nil {
		// The parent class was created just above, so ENOENT can only mean
		// that the kernel does not know the kind ("Specified qdisc kind is
		// unknown").
		if errors.Is(err, unix.ENOENT) {
			err = fmt.Errorf("%w (load sch_fq_codel, or build a kernel with CONFIG_NET_SCH_FQ_CODEL): %w", ErrQdiscNotSupported, err)
		}
		return fmt.Errorf("add fq_codel ECN-marking leaf qdisc (ce_threshold %v) on %s in netns %s: %w",
			spec.ecnThreshold, ifname, h.Name, err)
	}
	return nil
}
