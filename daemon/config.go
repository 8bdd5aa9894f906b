package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/ccload/ccload/clocksync"
	"github.com/ccload/ccload/internal/scope"
	"github.com/ccload/ccload/internal/units"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/onramp"
	"github.com/ccload/ccload/telemetry/hop"
	"github.com/ccload/ccload/telemetry/sockops"
)

// DefaultConfigPath is where the daemon reads its config unless told
// otherwise; the DaemonSet mounts its ConfigMap there.
const DefaultConfigPath = "/etc/ccload/config.yaml"

// DefaultInterval is how often the daemon reconciles when the config does
// not say.
const DefaultInterval = 30 * time.Second

// Config is the daemon's config file: the state one host should be in.
// Keys are written as in the CLI's flags (kebab-case); every value is
// written as the CLI takes it (durations such as 20us, rates such as
// 10gbit, sizes such as 1MiB).
type Config struct {
	// CCs are the congestion controls to keep attached, with their
	// parameters. A parameter not named keeps its default.
	CCs []CCConfig `yaml:"ccs"`
	// Default is the default CC of the daemon's network namespace
	// (net.ipv4.tcp_congestion_control). Empty leaves the sysctl alone.
	Default string `yaml:"default"`
	// INT is INT tagging and echo (ccload int enable); nil keeps it off.
	INT *INTConfig `yaml:"int"`
	// Hops are software INT hops (ccload int hop), one per interface.
	Hops []HopConfig `yaml:"hops"`
	// OnRamp is On-Ramp (ccload onramp enable), one entry per interface.
	OnRamp []OnRampConfig `yaml:"onramp"`
	// Clock runs the clock agent inside the daemon; nil runs none.
	Clock *ClockConfig `yaml:"clock"`
	// Interval is how often the daemon reconciles; default 30s.
	Interval string `yaml:"reconcile-interval"`
}

// CCConfig is one congestion control to keep attached.
type CCConfig struct {
	Name   string            `yaml:"name"`
	Params map[string]string `yaml:"params"`
}

// INTConfig is `ccload int enable`'s flags.
type INTConfig struct {
	Peers  []string `yaml:"peers"`
	Cgroup string   `yaml:"cgroup"`
	Tag    string   `yaml:"tag"`
	Slots  int      `yaml:"slots"`
}

// HopConfig is `ccload int hop`'s flags.
type HopConfig struct {
	Iface        string `yaml:"iface"`
	Rate         string `yaml:"rate"`
	Buffer       string `yaml:"buffer"`
	Burst        string `yaml:"burst"`
	ECNThreshold string `yaml:"ecn-threshold"`
	ACKPadding   bool   `yaml:"ack-padding"`
}

// OnRampConfig is `ccload onramp enable`'s flags.
type OnRampConfig struct {
	Iface        string   `yaml:"iface"`
	Peers        []string `yaml:"peers"`
	Threshold    string   `yaml:"threshold"`
	Gain         string   `yaml:"gain"`
	MaxPause     string   `yaml:"max-pause"`
	ReplaceQdisc bool     `yaml:"replace-qdisc"`
	Cgroup       string   `yaml:"cgroup"`
	Observe      bool     `yaml:"observe"`
	// StampEveryPacket is --stamp-every-packet.
	StampEveryPacket bool `yaml:"stamp-every-packet"`
}

// ClockConfig is `ccload clock run`'s flags.
type ClockConfig struct {
	Peers     []string `yaml:"peers"`
	Listen    string   `yaml:"listen"`
	Port      uint16   `yaml:"port"`
	MaxPeers  int      `yaml:"max-peers"`
	ProbeRate float64  `yaml:"probe-rate"`
	Window    string   `yaml:"window"`
}

// Desired is a validated config, in the types the packages that act on
// the kernel take.
type Desired struct {
	CCs      []loader.AttachRequest
	Default  string
	INT      *sockops.Config
	Hops     []hop.Config
	OnRamp   []onramp.Config
	Clock    *clocksync.Config
	Interval time.Duration
}

// ConfigError is a mistake in the config file: it names the file, the
// line and the key.
type ConfigError struct {
	File string // the file's name as given
	Line int    // 1-based; 0 when the mistake has no one line
	Key  string // the key's path, e.g. ccs[0].params.base_rtt
	Err  error
}

// Error reads "file:line: key: problem".
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Key != "" {
		fmt.Fprintf(&b, ": %s", e.Key)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

// Unwrap returns the problem, which may carry a fix (kernel.FixOf).
func (e *ConfigError) Unwrap() error { return e.Err }

// LoadConfig reads and validates the config file at path.
func LoadConfig(path string) (*Config, *Desired, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read config: %w", err)
	}
	return ParseConfig(data, path)
}

// ParseConfig parses and validates a config; file names it in errors.
// Unknown and repeated keys are errors, as are values the CLI would
// refuse. It does not touch the kernel.
func ParseConfig(data []byte, file string) (*Config, *Desired, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, yamlError(file, err)
	}
	var cfg Config
	if root.Kind != 0 {
		strict := yaml.NewDecoder(bytes.NewReader(data))
		strict.KnownFields(true)
		if err := strict.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
			return nil, nil, yamlError(file, err)
		}
	}
	v := validator{file: file, lines: map[string]int{}}
	v.index(&root, "")
	d, err := v.desired(&cfg)
	if err != nil {
		return nil, nil, err
	}
	return &cfg, d, nil
}

// yamlError turns yaml.v3's errors ("yaml: line 3: ...", or a TypeError
// with one such line per mistake) into a ConfigError.
func yamlError(file string, err error) error {
	msg := err.Error()
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, tail, ok := strings.Cut(rest, ": "); ok {
			if _, err := fmt.Sscanf(n, "%d", &line); err == nil {
				msg = tail
			}
		}
	}
	return &ConfigError{File: file, Line: line, Err: errors.New(msg)}
}

// validator checks a decoded Config, naming lines from the YAML tree.
type validator struct {
	file  string
	lines map[string]int // key path -> line of its value
}

// index records the line of every key path in n.
func (v *validator) index(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			v.index(c, path)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			v.lines[p] = k.Line
			v.index(val, p)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			v.lines[p] = c.Line
			v.index(c, p)
		}
	}
}

// errAt returns a ConfigError for key, at key's line or, when key has no
// line of its own (a missing key), its nearest parent's.
func (v *validator) errAt(key string, err error) error {
	line := 0
	for p := key; p != ""; {
		if l, ok := v.lines[p]; ok {
			line = l
			break
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return &ConfigError{File: v.file, Line: line, Key: key, Err: err}
}

func (v *validator) desired(cfg *Config) (*Desired, error) {
	d := &Desired{Default: cfg.Default, Interval: DefaultInterval}
	if cfg.Interval != "" {
		iv, err := time.ParseDuration(cfg.Interval)
		if err != nil || iv < time.Second || iv > time.Hour {
			return nil, v.errAt("reconcile-interval", fmt.Errorf("%q: want a duration between 1s and 1h, such as 30s", cfg.Interval))
		}
		d.Interval = iv
	}
	seen := map[string]string{}
	for i, c := range cfg.CCs {
		key := fmt.Sprintf("ccs[%d]", i)
		if c.Name == "" {
			return nil, v.errAt(key+".name", errors.New("missing: name the CC, e.g. name: theta_powertcp (see ccload list)"))
		}
		if prev, dup := seen[c.Name]; dup {
			return nil, v.errAt(key+".name", fmt.Errorf("%s is already listed at %s: list each CC once", c.Name, prev))
		}
		seen[c.Name] = key
		if err := loader.CheckParams(c.Name, c.Params); err != nil {
			k := key + ".name"
			for p := range c.Params {
				if loader.CheckParams(c.Name, map[string]string{p: c.Params[p]}) != nil {
					k = key + ".params." + p
					break
				}
			}
			return nil, v.errAt(k, err)
		}
		d.CCs = append(d.CCs, loader.AttachRequest{Name: c.Name, Params: c.Params})
	}
	if d.Default != "" && !isKernelCC(d.Default) {
		if _, ok := seen[d.Default]; !ok {
			return nil, v.errAt("default", fmt.Errorf("%q is neither listed under ccs nor a kernel CC (reno, cubic, bbr, dctcp): list it under ccs first", d.Default))
		}
	}
	if cfg.INT != nil {
		c, err := v.intConfig(cfg.INT)
		if err != nil {
			return nil, err
		}
		d.INT = c
	}
	ifaces := map[string]string{}
	for i, h := range cfg.Hops {
		key := fmt.Sprintf("hops[%d]", i)
		c, err := v.hopConfig(key, h)
		if err != nil {
			return nil, err
		}
		if prev, dup := ifaces["hop "+c.Iface]; dup {
			return nil, v.errAt(key+".iface", fmt.Errorf("%s already has a hop at %s: one hop per interface", c.Iface, prev))
		}
		ifaces["hop "+c.Iface] = key
		d.Hops = append(d.Hops, c)
	}
	for i, o := range cfg.OnRamp {
		key := fmt.Sprintf("onramp[%d]", i)
		c, err := v.onRampConfig(key, o)
		if err != nil {
			return nil, err
		}
		if prev, dup := ifaces["onramp "+c.Iface]; dup {
			return nil, v.errAt(key+".iface", fmt.Errorf("%s already has On-Ramp at %s: one entry per interface", c.Iface, prev))
		}
		ifaces["onramp "+c.Iface] = key
		d.OnRamp = append(d.OnRamp, c)
	}
	if cfg.Clock != nil {
		c, err := v.clockConfig(cfg.Clock)
		if err != nil {
			return nil, err
		}
		d.Clock = c
	}
	return d, nil
}

// isKernelCC reports whether name is a CC the kernel may have built in.
func isKernelCC(name string) bool {
	return slices.Contains([]string{"reno", "cubic", "bbr", "dctcp", "htcp", "vegas", "westwood"}, name)
}

func (v *validator) peers(key string, list []string) ([]netip.Prefix, error) {
	if len(list) == 0 {
		return nil, v.errAt(key, errors.New("missing: list the datacenter's prefixes, e.g. [10.0.0.0/8]; nothing is tagged without them"))
	}
	out, err := scope.ParsePrefixes(list)
	if err != nil {
		return nil, v.errAt(key, err)
	}
	return out, nil
}

func (v *validator) intConfig(c *INTConfig) (*sockops.Config, error) {
	peers, err := v.peers("int.peers", c.Peers)
	if err != nil {
		return nil, err
	}
	out := &sockops.Config{Peers: peers, Cgroup: c.Cgroup, Slots: c.Slots}
	tag := c.Tag
	if tag == "" {
		tag = "every"
	}
	if out.Every, out.TSOOnly, err = sockops.ParseTag(tag); err != nil {
		return nil, v.errAt("int.tag", err)
	}
	if err := out.Validate(); err != nil {
		return nil, v.errAt("int.slots", err)
	}
	return out, nil
}

func (v *validator) hopConfig(key string, h HopConfig) (hop.Config, error) {
	c := hop.Config{Iface: h.Iface, ACKPadding: h.ACKPadding}
	if h.Iface == "" {
		return c, v.errAt(key+".iface", errors.New("missing: name the forwarding interface, e.g. iface: eth1"))
	}
	if h.Rate == "" {
		return c, v.errAt(key+".rate", errors.New("missing: the rate of the shaper on the interface, e.g. rate: 10gbit"))
	}
	var err error
	if c.RateBps, err = units.ParseBandwidth(h.Rate); err != nil {
		return c, v.errAt(key+".rate", err)
	}
	sizes := []struct {
		name, val, def string
		dst            *uint32
	}{
		{"buffer", h.Buffer, "1MiB", &c.BufferBytes},
		{"burst", h.Burst, "", &c.BurstBytes},
		{"ecn-threshold", h.ECNThreshold, "", &c.ECNThreshold},
	}
	for _, s := range sizes {
		val := s.val
		if val == "" {
			val = s.def
		}
		if val == "" {
			continue
		}
		n, err := units.ParseBytes(val)
		if err != nil {
			return c, v.errAt(key+"."+s.name, err)
		}
		if n > 1<<32-1 {
			return c, v.errAt(key+"."+s.name, fmt.Errorf("%s is too large: at most 4GiB", val))
		}
		*s.dst = uint32(n)
	}
	if err := c.Validate(); err != nil {
		return c, v.errAt(key+".rate", err)
	}
	return c, nil
}

func (v *validator) onRampConfig(key string, o OnRampConfig) (onramp.Config, error) {
	c := onramp.Config{Iface: o.Iface, ReplaceQdisc: o.ReplaceQdisc, Cgroup: o.Cgroup, Observe: o.Observe,
		StampEveryPacket: o.StampEveryPacket}
	if o.Iface == "" {
		return c, v.errAt(key+".iface", errors.New("missing: name the interface whose egress On-Ramp paces, e.g. iface: eth0"))
	}
	var err error
	if c.Peers, err = v.peers(key+".peers", o.Peers); err != nil {
		return c, err
	}
	if o.Threshold != "" {
		if c.Threshold, c.AutoThreshold, err = onramp.ParseThreshold(o.Threshold); err != nil {
			return c, v.errAt(key+".threshold", err)
		}
	}
	if o.Gain != "" {
		g, err := units.ParseFraction(o.Gain, 1<<32)
		if err != nil {
			return c, v.errAt(key+".gain", err)
		}
		c.Gain = float64(g) / (1 << 32)
	}
	if o.MaxPause != "" {
		if c.MaxPause, err = time.ParseDuration(o.MaxPause); err != nil || c.MaxPause <= 0 {
			return c, v.errAt(key+".max-pause", fmt.Errorf("%q: want a positive duration such as 2ms", o.MaxPause))
		}
	}
	if err := c.Validate(); err != nil {
		return c, v.errAt(key, err)
	}
	return c, nil
}

func (v *validator) clockConfig(c *ClockConfig) (*clocksync.Config, error) {
	if len(c.Peers) == 0 {
		return nil, v.errAt("clock.peers", errors.New("missing: the addresses, prefixes or files of the agents to probe"))
	}
	set, err := clocksync.ParsePeers(strings.Join(c.Peers, ","))
	if err != nil {
		return nil, v.errAt("clock.peers", err)
	}
	out := &clocksync.Config{Peers: set, MaxPeers: c.MaxPeers, ProbeRate: c.ProbeRate}
	listen := netip.IPv6Unspecified()
	if c.Listen != "" {
		if listen, err = netip.ParseAddr(c.Listen); err != nil {
			return nil, v.errAt("clock.listen", err)
		}
	}
	port := c.Port
	if port == 0 {
		port = clocksync.DefaultPort
	}
	out.Listen = netip.AddrPortFrom(listen, port)
	if c.Window != "" {
		if out.Window, err = time.ParseDuration(c.Window); err != nil {
			return nil, v.errAt("clock.window", err)
		}
	}
	if err := out.Validate(); err != nil {
		return nil, v.errAt("clock", err)
	}
	return out, nil
}
