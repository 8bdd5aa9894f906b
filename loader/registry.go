package loader

import (
	"sort"
	"strings"

	"github.com/ccload/ccload/internal/kernel"

	"github.com/cilium/ebpf"
)

// CC is a congestion control compiled into ccload.
type CC struct {
	// Name is the kernel name (tcp_congestion_ops.name), the one users
	// give to sysctl net.ipv4.tcp_congestion_control or TCP_CONGESTION.
	Name string
	// Summary says in one line what the algorithm is.
	Summary string
	// NeedsECN is true when the CC negotiates ECN on its sockets.
	NeedsECN bool
	// Params are the run-time parameters, in display order.
	Params []ParamSpec
	// UsesINT is true when the CC reads INT records from the int_store
	// map that the INT sockops program fills (ccload int enable).
	UsesINT bool

	load   func() (*ebpf.CollectionSpec, error)
	object []byte // the embedded ELF that load parses: its hash is the CC's identity
	opsMap string // the struct_ops map's name in the object (bpf2go's constant)
	// derived computes, from the parameters' stored values, the params
	// struct's other members by their C names: values the BPF code would
	// otherwise compute on every ACK. Nil for a CC without any.
	derived func(vals map[string]uint64) map[string]uint64
}

// The maps every CC object has, under the same names (CCLOAD_STATS_MAP and
// CCLOAD_PARAMS in bpf/include/ccload.h, CCLOAD_TRACE_MAPS in the CCs that
// trace, INT_STORE_MAP in bpf/include/int.h). bpf2go names them once per
// object; these take theta_powertcp's and powertcp's names, and
// TestObjectMapNames checks that every object agrees.
const (
	mapParams   = thetaPowertcpMapParams
	mapStats    = thetaPowertcpMapStats
	mapEvents   = thetaPowertcpMapEvents
	mapTraceOn  = thetaPowertcpMapTraceOn
	mapINTStore = powertcpMapIntStore
	// On-Ramp's holds (ONRAMP_HOLDS_MAP in bpf/include/onramp.h), which
	// θ-PowerTCP with onramp_holds=1 reads to take its RTT samples without
	// On-Ramp's pauses.
	mapOnRampHolds = thetaPowertcpMapOnrampHolds
)

// sharedMaps are the maps a CC shares with objects that other commands
// load (INT's sockops program, On-Ramp's tc programs), through the
// Loader's SharedMaps: a CC's pin set never holds them.
func sharedMaps() []string { return []string{mapINTStore, mapOnRampHolds} }

// Param returns the spec of the named parameter.
func (c *CC) Param(name string) (ParamSpec, bool) {
	for _, p := range c.Params {
		if p.Name == name {
			return p, true
		}
	}
	return ParamSpec{}, false
}

const (
	fpOne      = 1 << 16 // FP_ONE in bpf/include/ccload.h
	recipShift = 32      // RECIP_SHIFT in bpf/include/ccload.h
)

// Builtin returns the congestion controls compiled into this binary,
// sorted by name. Each call returns fresh values.
func Builtin() []*CC {
	ccs := []*CC{
		{
			Name:    "theta_powertcp",
			Summary: "θ-PowerTCP: power-based window from RTT and RTT gradient (PowerTCP, NSDI'22, App. D)",
			Params:  powerParams("host_bw·τ/expected_flows, at least one MSS"),
			load:    loadThetaPowertcp,
			object:  _ThetaPowertcpBytes,
			opsMap:  thetaPowertcpMapThetaPowertcp,
			derived: derivePower,
		},
		{
			Name:    "powertcp",
			Summary: "PowerTCP: power-based window from per-hop INT (PowerTCP, NSDI'22, Alg. 1); θ mode without INT",
			Params:  powerParams("host_bw·τ/expected_flows, at least one MSS, with τ the base RTT INT measures, not floored at a GSO burst"),
			UsesINT: true,
			load:    loadPowertcp,
			object:  _PowertcpBytes,
			opsMap:  powertcpMapPowertcp,
			derived: derivePower,
		},
		{
			Name:    "hpcc",
			Summary: "HPCC-style window from per-hop INT: inflight U, MI/MD to η, W_AI stages (HPCC, SIGCOMM'19, Alg. 1)",
			UsesINT: true,
			Params: []ParamSpec{
				{Name: "eta", Field: "eta", Unit: UnitFraction, Scale: fpOne, Default: "0.95",
					Min: fpOne / 2, Max: fpOne, Doc: "target utilisation η"},
				{Name: "max_stage", Field: "max_stage", Unit: UnitCount, Default: "5",
					Min: 0, Max: 100, Doc: "additive-increase stages before a multiplicative step"},
				baseRTTParam("T, the base RTT (a little above the network's largest)"),
				hostBWParam("host NIC bandwidth: W_init = host_bw·T; auto reads the default-route interface"),
				{Name: "wai", Field: "wai_bytes", Unit: UnitBytes, Default: "0",
					Min: 1, Max: 1 << 30, Zero: "W_init·(1-η)/expected_flows",
					Doc: "additive increase W_AI"},
				expectedFlowsParam("N in W_AI = W_init·(1-η)/N: flows expected on a link"),
			},
			load:   loadHpcc,
			object: _HpccBytes,
			opsMap: hpccMapHpcc,
		},
		{
			Name:     "bpf_dctcp",
			Summary:  "DCTCP: ECN-fraction window cuts, as the kernel's tcp_dctcp; falls back to reno without ECN",
			NeedsECN: true,
			Params: []ParamSpec{
				{Name: "shift_g", Field: "shift_g", Unit: UnitCount, Default: "4",
					Min: 0, Max: 10, Doc: "α gain g = 2^-shift_g (4 means g = 1/16)"},
				{Name: "alpha_on_init", Field: "alpha_on_init", Unit: UnitFraction, Scale: 1024,
					Default: "1", Min: 0, Max: 1024, Doc: "α of a new connection"},
			},
			load:   loadDctcp,
			object: _DctcpBytes,
			opsMap: dctcpMapBpfDctcp,
		},
	}
	sort.Slice(ccs, func(i, j int) bool { return ccs[i].Name < ccs[j].Name })
	return ccs
}

// powerParams are the parameters of both PowerTCP variants (struct
// power_params in bpf/include/power.h); betaZero says what β is when
// beta is 0, which differs between them.
func powerParams(betaZero string) []ParamSpec {
	return []ParamSpec{
		{Name: "gamma", Field: "gamma", Unit: UnitFraction, Scale: fpOne, Default: "0.9",
			Min: fpOne / 100, Max: fpOne, Doc: "EWMA weight γ of the window update"},
		baseRTTParam("base RTT τ of the network"),
		hostBWParam("host NIC bandwidth; auto reads the default-route interface's speed"),
		expectedFlowsParam("N in β = host_bw·τ/N: flows expected to share the NIC"),
		{Name: "beta", Field: "beta_bytes", Unit: UnitBytes, Default: "0",
			Min: 1, Max: 1 << 30, Zero: betaZero,
			Doc: "additive increase β per RTT"},
		{Name: "onramp_holds", Field: "onramp_holds", Unit: UnitCount, Default: "0",
			Min: 1, Max: 1, Zero: "RTT samples as TCP takes them, On-Ramp's pauses included",
			Doc: "1: take the time On-Ramp held a segment out of its RTT sample (θ mode; docs/onramp.md)"},
	}
}

// derivePower computes the derived members of struct power_params in
// bpf/include/power.h from host_bw and expected_flows: host_bw in bytes per
// µs and host_bw/expected_flows in bytes per µs (both FP_ONE scale), and
// µs per byte at host_bw (RECIP_ONE scale). host_bw is at most 1.6 Tbit/s
// and at least 1 Mbit/s (hostBWParam), so none of them overflows.
func derivePower(vals map[string]uint64) map[string]uint64 {
	bw := max(vals["host_bw"], 1)
	flows := max(vals["expected_flows"], 1)
	hostBpusFP := bw * fpOne / 8 / 1_000_000
	return map[string]uint64{
		"host_Bpus_fp":   hostBpusFP,
		"beta_Bpus_fp":   hostBpusFP / flows,
		"us_per_B_recip": (8_000_000 << recipShift) / bw,
	}
}

// The parameters that several CCs share (struct power_params in
// bpf/include/power.h, struct hpcc_params in bpf/hpcc.c): one spec each,
// with the CC's own explanation.

func baseRTTParam(doc string) ParamSpec {
	return ParamSpec{Name: "base_rtt", Field: "base_rtt_us", Unit: UnitDuration, Default: "0",
		Min: 1, Max: 1 << 24, Zero: "track each flow's minimum RTT", Doc: doc}
}

func hostBWParam(doc string) ParamSpec {
	return ParamSpec{Name: "host_bw", Field: "host_bw_bps", Unit: UnitBandwidth, Default: "auto", Auto: true,
		Min: 1_000_000, Max: 1_600_000_000_000, Doc: doc}
}

func expectedFlowsParam(doc string) ParamSpec {
	return ParamSpec{Name: "expected_flows", Field: "expected_flows", Unit: UnitCount, Default: "10",
		Min: 1, Max: 1 << 20, Doc: doc}
}

// Lookup returns the built-in CC called name.
func Lookup(name string) (*CC, error) {
	var names []string
	for _, c := range Builtin() {
		if c.Name == name {
			return c, nil
		}
		names = append(names, c.Name)
	}
	return nil, kernel.NewError(kernel.KindUnknownCC,
		"available: "+strings.Join(names, ", ")+" (see `ccload list`)", nil,
		"unknown congestion control %q", name)
}
