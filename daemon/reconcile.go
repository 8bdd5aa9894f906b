package daemon

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/scope"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/onramp"
	"github.com/ccload/ccload/telemetry/hop"
	"github.com/ccload/ccload/telemetry/sockops"
)

// Action is one change a reconcile makes.
type Action struct {
	// Kind is what it does: attach, upgrade, set, detach, default,
	// int-enable, int-disable, hop-attach, hop-upgrade, hop-detach,
	// onramp-enable, onramp-disable.
	Kind string `json:"kind"`
	// Target is what it acts on: a CC's name, an interface, "int".
	Target string `json:"target"`
	// Reason says why, for the log and --dry-run.
	Reason string `json:"reason"`

	do func() error
}

// String reads "kind target: reason", as the log and --dry-run print it.
func (a Action) String() string { return fmt.Sprintf("%s %s: %s", a.Kind, a.Target, a.Reason) }

// Plan is what a reconcile would change, in the order it changes it.
type Plan struct {
	Actions []Action `json:"actions"`
	// Owned is the ownership record the plan leaves behind.
	Owned Owned `json:"owned"`
}

// Empty reports whether the host already matches the config.
func (p *Plan) Empty() bool { return len(p.Actions) == 0 }

// parts are the packages that act on the kernel, one per concern.
type parts struct {
	host   kernel.Host
	ccs    *loader.Loader
	int    *sockops.INT
	hops   *hop.Pins
	onramp *onramp.OnRamp
}

// newParts wires the packages to host. build, when not 0, stands for a
// newer ccload in tests of upgrades: every object is loaded as that build
// (loader.WithBuildVersion, and the tc packages' WithBuildSalt).
func newParts(host kernel.Host, build uint32, opts ...loader.Option) *parts {
	in := sockops.New(host, sockops.WithBuildSalt(build))
	if build != 0 {
		opts = append(opts, loader.WithBuildVersion(build))
	}
	return &parts{
		host:   host,
		ccs:    loader.New(host, append([]loader.Option{loader.WithSharedMaps(in.Store())}, opts...)...),
		int:    in,
		hops:   hop.NewPins(host, hop.WithBuildSalt(build)),
		onramp: onramp.New(host, onramp.WithBuildSalt(build)),
	}
}

// plan compares the host with d and returns what must change. It reads
// the kernel and bpffs and changes nothing. owned is the record of the
// previous reconcile.
func (p *parts) plan(d *Desired, owned Owned) (*Plan, error) {
	pl := &Plan{Owned: ownedOf(d)}
	add := func(kind, target, reason string, do func() error) {
		pl.Actions = append(pl.Actions, Action{Kind: kind, Target: target, Reason: reason, do: do})
	}

	// CCs first: the default and the CCs' users need them registered.
	ccs, err := p.ccs.List()
	if err != nil {
		return nil, fmt.Errorf("list CCs: %w", err)
	}
	byName := map[string]loader.CCStatus{}
	for _, c := range ccs {
		byName[c.Name] = c
	}
	for _, req := range d.CCs {
		cur := byName[req.Name]
		switch {
		case !cur.Attached:
			why := "not attached"
			if cur.Stale {
				why = "its pins are left from an attach that is no longer registered"
			}
			add("attach", req.Name, why, func() error {
				_, err := p.ccs.Attach(req)
				return err
			})
		case cur.UpgradeAvailable:
			// A new ccload (the DaemonSet rolled) embeds another build:
			// swap it in place, keeping the name registered throughout,
			// and bring the parameters to the config's at once.
			up := req
			up.Replace = true
			add("upgrade", req.Name, fmt.Sprintf("generation %d was built from another object", cur.Generation), func() error {
				_, err := p.ccs.Attach(up)
				return err
			})
		default:
			drift, err := paramDrift(req.Name, req.Params, cur.Params)
			if err != nil {
				return nil, err
			}
			if len(drift) > 0 {
				keys := slices.Sorted(maps.Keys(drift))
				var why []string
				for _, k := range keys {
					why = append(why, fmt.Sprintf("%s is %s, config says %s", k, cur.Params[k], drift[k]))
				}
				add("set", req.Name, strings.Join(why, "; "), func() error {
					_, err := p.ccs.Set(req.Name, drift)
					return err
				})
			}
		}
	}
	if d.Default != "" {
		def, _ := kernel.ReadSysctl(p.host.ProcSys, sysctlDefault)
		if def != d.Default {
			add("default", d.Default, fmt.Sprintf("net.ipv4.tcp_congestion_control is %s", def), func() error {
				if err := kernel.WriteSysctl(p.host.ProcSys, sysctlDefault, d.Default); err != nil {
					return kernel.NewError(kernel.KindSysctl, "check that the daemon runs with CAP_NET_ADMIN in the host's network namespace (hostNetwork: true)",
						err, "make %s the default congestion control", d.Default)
				}
				return nil
			})
		}
	}

	// INT before the hops and On-Ramp: their option budget is INT's.
	ist, err := p.int.Status()
	if err != nil {
		return nil, fmt.Errorf("read INT: %w", err)
	}
	switch {
	case d.INT != nil:
		why := intDrift(*d.INT, ist)
		if why == "" && ist.UpgradeAvailable {
			// Enable swaps this ccload's build in on the pinned link.
			why = "the sockops program was built from another object"
		}
		if why != "" {
			cfg := *d.INT
			add("int-enable", "int", why, func() error {
				_, err := p.int.Enable(cfg)
				return err
			})
		}
	case owned.INT && ist.Enabled:
		add("int-disable", "int", "the config no longer enables INT", func() error {
			_, err := p.int.Disable()
			return err
		})
	}

	hops, err := p.hops.List()
	if err != nil {
		return nil, fmt.Errorf("list INT hops: %w", err)
	}
	hopOf := map[string]hop.Status{}
	for _, h := range hops {
		hopOf[h.Iface] = h
	}
	for _, want := range d.Hops {
		cur, ok := hopOf[want.Iface]
		why := ""
		switch {
		case !ok:
			why = "no hop on the interface"
		case !cur.Attached:
			why = "the hop's programs were detached"
		default:
			why = hopDrift(want, cur)
		}
		upgrade := false
		if why == "" && cur.UpgradeAvailable {
			// Attach swaps this ccload's build in, in place.
			why, upgrade = "the hop was built from another object", true
		}
		if why == "" {
			continue
		}
		cfg, replace := want, ok && !upgrade
		kind := "hop-attach"
		if upgrade {
			kind = "hop-upgrade"
		}
		add(kind, want.Iface, why, func() error {
			if replace {
				if _, err := p.hops.Detach(cfg.Iface); err != nil {
					return err
				}
			}
			_, err := p.hops.Attach(cfg)
			return err
		})
	}
	for _, iface := range owned.Hops {
		if _, ok := hopOf[iface]; ok && !slices.Contains(pl.Owned.Hops, iface) {
			add("hop-detach", iface, "the config no longer names this hop", func() error {
				_, err := p.hops.Detach(iface)
				return err
			})
		}
	}

	ors, err := p.onramp.Status()
	if err != nil {
		return nil, fmt.Errorf("read On-Ramp: %w", err)
	}
	orOf := map[string]onramp.Status{}
	for _, o := range ors {
		orOf[o.Iface] = o
	}
	for _, want := range d.OnRamp {
		cur, ok := orOf[want.Iface]
		why := ""
		switch {
		case !ok:
			why = "On-Ramp is off on the interface"
		case !cur.Attached:
			why = "On-Ramp's programs were detached"
		case cur.Qdisc == nil && !want.Observe:
			why = "there is no fq root to enforce the pauses"
		default:
			why = onRampDrift(want, cur)
		}
		if why == "" && cur.UpgradeAvailable {
			// Enable swaps this ccload's build in, in place.
			why = "On-Ramp was built from another object"
		}
		if why == "" {
			continue
		}
		cfg := want
		add("onramp-enable", want.Iface, why, func() error {
			_, err := p.onramp.Enable(cfg)
			return err
		})
	}
	for _, iface := range owned.OnRamp {
		if _, ok := orOf[iface]; ok && !slices.Contains(pl.Owned.OnRamp, iface) {
			add("onramp-disable", iface, "the config no longer names On-Ramp on this interface", func() error {
				_, err := p.onramp.Disable(iface)
				return err
			})
		}
	}

	// CCs the config dropped go last, once nothing else still needs them.
	// Detach moves the default back to cubic if it named the CC.
	for _, name := range owned.CCs {
		if byName[name].Attached && !slices.Contains(pl.Owned.CCs, name) {
			add("detach", name, "the config no longer names it", func() error {
				_, err := p.ccs.Detach(name)
				return err
			})
		}
	}
	return pl, nil
}

// apply carries the plan out, in order. It goes on after a failed action,
// so that one broken interface does not hold the others back, and returns
// every failure.
func (p *parts) apply(pl *Plan, logf func(string, ...any)) error {
	var errs []error
	for _, a := range pl.Actions {
		if err := a.do(); err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", a.Kind, a.Target, err))
			logf("reconcile: %s failed: %v", a, err)
			continue
		}
		logf("reconcile: %s", a)
	}
	return errors.Join(errs...)
}

const sysctlDefault = "net/ipv4/tcp_congestion_control"

// paramDrift returns the parameters of the attached CC name whose values
// differ from the config's: those the config names, and those it leaves
// at their default. Parameters whose desired value is "auto" are resolved
// by the loader at attach time and are not compared.
func paramDrift(name string, want, cur map[string]string) (map[string]string, error) {
	cc, err := loader.Lookup(name)
	if err != nil {
		return nil, err
	}
	drift := map[string]string{}
	for _, p := range cc.Params {
		text, named := want[p.Name]
		if !named {
			text = p.Default
		}
		if p.Auto && strings.EqualFold(strings.TrimSpace(text), "auto") {
			continue
		}
		w, err := p.Parse(text)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", name, p.Name, err)
		}
		c, err := p.Parse(cur[p.Name])
		if err != nil || c != w {
			drift[p.Name] = text
		}
	}
	return drift, nil
}

// samePrefixes reports whether the prefixes in want and the ones a status
// printed are the same set.
func samePrefixes(want []netip.Prefix, have []string) bool {
	norm, err := scope.Normalize(want)
	if err != nil {
		return false
	}
	var w []string
	for _, p := range norm {
		w = append(w, p.String())
	}
	h := slices.Clone(have)
	slices.Sort(w)
	slices.Sort(h)
	return slices.Equal(w, h)
}

func intDrift(want sockops.Config, cur *sockops.Status) string {
	slots := want.Slots
	if slots == 0 {
		slots = 3
	}
	every := max(want.Every, 1)
	switch {
	case !cur.Enabled:
		return "INT is not enabled"
	case !samePrefixes(want.Peers, cur.Peers):
		return fmt.Sprintf("peers are %s", strings.Join(cur.Peers, ","))
	case cur.Slots != slots:
		return fmt.Sprintf("%d slots, config says %d", cur.Slots, slots)
	case cur.Every != every || cur.TSOOnly != want.TSOOnly:
		return "the tagging policy differs"
	case want.Cgroup != "" && cur.Cgroup != want.Cgroup:
		return fmt.Sprintf("attached to %s, config says %s", cur.Cgroup, want.Cgroup)
	}
	return ""
}

func hopDrift(want hop.Config, cur hop.Status) string {
	burst := want.BurstBytes
	if burst == 0 {
		burst = 1514
	}
	switch {
	case cur.RateBps != want.RateBps:
		return fmt.Sprintf("rate is %s", cur.Rate)
	case cur.BufferBytes != want.BufferBytes || cur.BurstBytes != burst || cur.ECNThreshold != want.ECNThreshold:
		return "buffer, burst or ECN threshold differ"
	case cur.ACKPadding != want.ACKPadding:
		return "ACK padding differs"
	}
	return ""
}

func onRampDrift(want onramp.Config, cur onramp.Status) string {
	s := cur.Settings
	th := want.Threshold
	if th == 0 {
		th = onramp.DefaultThreshold
	}
	gain := want.Gain
	if gain == 0 {
		gain = onramp.DefaultGain
	}
	mp := want.MaxPause
	if mp == 0 {
		mp = onramp.DefaultMaxPause
	}
	switch {
	case !samePrefixes(want.Peers, cur.Peers):
		return fmt.Sprintf("peers are %s", strings.Join(cur.Peers, ","))
	case s.Observe != want.Observe:
		return "observe mode differs"
	case s.StampEveryPacket != want.StampEveryPacket:
		return "stamping every packet or sparsely differs"
	case s.AutoThreshold != want.AutoThreshold || (!want.AutoThreshold && s.ThresholdNs != uint64(th)):
		return "the threshold differs"
	case s.MaxPauseNs != uint64(mp):
		return "the maximum pause differs"
	case s.Gain < gain*0.999 || s.Gain > gain*1.001:
		return "the gain differs"
	}
	return ""
}
