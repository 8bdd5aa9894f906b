package onramp

import (
	"fmt"
	"math"
	"net/netip"
	"time"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/scope"
	"github.com/ccload/ccload/qdisc"
)

// Defaults and bounds of Config.
const (
	// DefaultThreshold is T when neither a threshold nor auto is given.
	DefaultThreshold = 50 * time.Microsecond
	// DefaultGain is the EWMA gain g of β (§3.2 of the paper).
	DefaultGain = 1.0 / 16
	// DefaultMaxPause bounds every single pause, so that a broken clock
	// or a forged option cannot stall a flow.
	DefaultMaxPause = 2 * time.Millisecond
	// DefaultMinWindow is how long a least one-way delay counts for the
	// automatic threshold: the least of the current and the previous
	// window.
	DefaultMinWindow = 10 * time.Second

	maxThreshold = time.Second // one-way delays are 32-bit ns on the wire
	maxPause     = 100 * time.Millisecond
	fpOne        = 1 << 16 // FP_ONE of bpf/include/ccload.h
)

// Config configures On-Ramp on one interface.
type Config struct {
	// Iface is the interface, in the calling thread's network namespace,
	// whose egress On-Ramp paces and whose ingress brings the echoes.
	Iface string
	// Peers are the datacenter's prefixes: only connections to these get
	// On-Ramp's options, and so stamps, echoes and pauses. None means
	// nothing is stamped.
	Peers []netip.Prefix
	// Threshold is T, the one-way delay above which a flow pauses. With
	// AutoThreshold it is the value used for a peer until its least
	// one-way delay is known. 0 means DefaultThreshold.
	Threshold time.Duration
	// AutoThreshold sets T per peer to its least recent one-way delay plus
	// twice the clock agent's error for it (§7.1 of the paper).
	AutoThreshold bool
	// Gain is β's EWMA gain, in (0, 1]; 0 means DefaultGain.
	Gain float64
	// MaxPause bounds each pause; 0 means DefaultMaxPause.
	MaxPause time.Duration
	// MinWindow is the window of the least one-way delay; 0 means
	// DefaultMinWindow.
	MinWindow time.Duration
	// Strawman pauses for O - T, without the paper's lag compensation
	// (§3.1): for comparisons only.
	Strawman bool
	// Observe stamps, measures and echoes as usual but pauses nothing,
	// and leaves the root qdisc as it is: status shows the one-way
	// delays, and how many of the sampled echoes were above T, before
	// On-Ramp holds any packet. Enabling again without it turns the
	// pauses on (and installs fq).
	Observe bool
	// StampEveryPacket stamps every data segment, as the paper does. By
	// default a flow whose newest echoed one-way delay was below T/2 is
	// stamped at most once per T/4, and its other segments carry no
	// stamp (docs/onramp.md, "Sparse stamps").
	StampEveryPacket bool
	// ReplaceQdisc lets Enable replace a root qdisc that somebody else
	// installed with fq. Disable then leaves the kernel's default.
	ReplaceQdisc bool
	// Cgroup is the cgroup v2 directory the sockops program attaches to
	// when no interface has On-Ramp yet; "" is the root, which covers
	// every socket.
	Cgroup string
	// Method is how the tc programs attach (qdisc.MethodAuto: TCX on
	// 6.6+, clsact before).
	Method qdisc.Method
}

// check fills in the defaults and validates cfg.
func (cfg Config) check() (Config, error) {
	bad := func(fix, format string, args ...any) error {
		return kernel.NewError(kernel.KindBadParam, fix, nil, format, args...)
	}
	if cfg.Iface == "" {
		return cfg, bad("name the interface whose egress On-Ramp paces: --iface eth0", "no interface given")
	}
	peers, err := scope.Normalize(cfg.Peers)
	if err != nil {
		return cfg, err
	}
	cfg.Peers = peers
	if cfg.Threshold == 0 {
		cfg.Threshold = DefaultThreshold
	}
	if cfg.Threshold < time.Microsecond || cfg.Threshold > maxThreshold {
		return cfg, bad("give a threshold between 1us and 1s, for example --threshold 50us, or --threshold auto",
			"threshold %v is out of range", cfg.Threshold)
	}
	if cfg.Gain == 0 {
		cfg.Gain = DefaultGain
	}
	if math.IsNaN(cfg.Gain) || cfg.Gain < 1.0/fpOne || cfg.Gain > 1 {
		return cfg, bad("give a gain in (0, 1], for example --gain 1/16 (the paper's; it is insensitive between 1/4 and 1/64)",
			"gain %v is out of range", cfg.Gain)
	}
	if cfg.MaxPause == 0 {
		cfg.MaxPause = DefaultMaxPause
	}
	if cfg.MaxPause < time.Microsecond || cfg.MaxPause > maxPause {
		return cfg, bad("give a maximum pause between 1us and 100ms, for example --max-pause 2ms",
			"maximum pause %v is out of range", cfg.MaxPause)
	}
	if cfg.MinWindow == 0 {
		cfg.MinWindow = DefaultMinWindow
	}
	if cfg.MinWindow < time.Millisecond || cfg.MinWindow > time.Hour {
		return cfg, bad("give a window between 1ms and 1h", "minimum one-way delay window %v is out of range", cfg.MinWindow)
	}
	return cfg, nil
}

// params is cfg as struct onramp_config of bpf/include/onramp.h.
func (cfg Config) params() onrampOnrampConfig {
	p := onrampOnrampConfig{
		ThresholdNs: uint64(cfg.Threshold),
		MaxPauseNs:  uint64(cfg.MaxPause),
		MinWindowNs: uint64(cfg.MinWindow),
		Gain:        uint32(math.Round(cfg.Gain * fpOne)),
	}
	if cfg.AutoThreshold {
		p.Flags |= flagAutoT
	}
	if cfg.Strawman {
		p.Flags |= flagStrawman
	}
	if cfg.Observe {
		p.Flags |= flagObserve
	}
	if cfg.StampEveryPacket {
		p.Flags |= flagStampEvery
	}
	return p
}

// onramp_config.flags of bpf/include/onramp.h.
const (
	flagAutoT    = 0x1
	flagStrawman = 0x2
	flagObserve  = 0x4
	// flagStampEvery is ONRAMP_F_STAMP_EVERY.
	flagStampEvery = 0x8
)

// Settings are an interface's On-Ramp parameters as its pinned config holds
// them.
type Settings struct {
	ThresholdNs   uint64  `json:"threshold_ns"`
	AutoThreshold bool    `json:"auto_threshold"`
	Gain          float64 `json:"gain"`
	MaxPauseNs    uint64  `json:"max_pause_ns"`
	MinWindowNs   uint64  `json:"min_window_ns"`
	Strawman      bool    `json:"strawman,omitempty"`
	// Observe says that On-Ramp measures and pauses nothing
	// (Config.Observe).
	Observe bool `json:"observe"`
	// StampEveryPacket says that every data segment is stamped
	// (Config.StampEveryPacket); otherwise quiet flows are stamped
	// sparsely.
	StampEveryPacket bool `json:"stamp_every_packet"`
}

func settingsOf(p onrampOnrampConfig) Settings {
	return Settings{
		ThresholdNs: p.ThresholdNs, AutoThreshold: p.Flags&flagAutoT != 0,
		Gain: float64(p.Gain) / fpOne, MaxPauseNs: p.MaxPauseNs, MinWindowNs: p.MinWindowNs,
		Strawman: p.Flags&flagStrawman != 0, Observe: p.Flags&flagObserve != 0,
		StampEveryPacket: p.Flags&flagStampEvery != 0,
	}
}

// fixedThreshold is T when it is fixed; not with an automatic threshold,
// which differs per peer, nor in settings that could not be read.
func (s Settings) fixedThreshold() (time.Duration, bool) {
	if s.AutoThreshold || s.ThresholdNs == 0 {
		return 0, false
	}
	return time.Duration(s.ThresholdNs), true
}

// String describes the threshold as the CLI takes it.
func (s Settings) String() string {
	t := time.Duration(s.ThresholdNs).String()
	if s.AutoThreshold {
		t = "auto (until known: " + t + ")"
	}
	mode := ""
	if s.Observe {
		mode = "observe only (no pauses), "
	}
	stamps := "sparse stamps"
	if s.StampEveryPacket {
		stamps = "every packet stamped"
	}
	return fmt.Sprintf("%sthreshold %s, gain %g, max pause %v, %s", mode, t, s.Gain, time.Duration(s.MaxPauseNs), stamps)
}

// Validate checks cfg as Enable would, without touching the kernel.
func (cfg Config) Validate() error {
	_, err := cfg.check()
	return err
}

// ParseThreshold reads a threshold as users write it: a positive duration
// such as 50us, or auto (AutoThreshold).
func ParseThreshold(s string) (d time.Duration, auto bool, err error) {
	if s == "auto" {
		return 0, true, nil
	}
	d, err = time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, false, fmt.Errorf("threshold %q: want a positive duration such as 50us, or auto", s)
	}
	return d, false, nil
}
