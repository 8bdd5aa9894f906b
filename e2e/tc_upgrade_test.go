package e2e

// The crash tests of the in-place upgrades of the INT sockops program and
// of INT hops (issue 15 §3 and §4): the state is made by another build
// (the packages' WithBuildSalt, in this process, on the crash tests'
// bpffs), and the ccload binary, whose build differs, upgrades it with
// the command users run, `ccload int enable` or `ccload int hop`. Each
// run is killed at each kill point it passes; then the same command runs
// again, and the crash tests' invariants must hold, with the upgrade
// done: the pins record the binary's build.

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
	"github.com/ccload/ccload/qdisc"
	"github.com/ccload/ccload/telemetry/hop"
	"github.com/ccload/ccload/telemetry/sockops"
)

// otherBuild stands for the build that made the state an upgrade
// replaces.
const otherBuild = 7

// upgradeKill is a command of TestKillUpgrade, with the state it
// upgrades.
type upgradeKill struct {
	killCase
	prep   func(t *testing.T) // makes the state, with another build
	clsact bool               // the hop is attached with clsact
}

// upgradeKills are the upgrades TestKillUpgrade kills: INT's sockops
// program, and a hop with each attach method, on one side and on two.
func (e *killEnv) upgradeKills() []upgradeKill {
	intOn := sockops.Config{Peers: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}}
	enableINT := func(t *testing.T) {
		t.Helper()
		if _, err := sockops.New(e.host, sockops.WithBuildSalt(otherBuild)).Enable(intOn); err != nil {
			t.Fatalf("enable INT from another build: %v (fix: %s)", err, kernel.FixOf(err))
		}
	}
	attachHop := func(m qdisc.Method, ackPad bool) func(t *testing.T) {
		return func(t *testing.T) {
			t.Helper()
			cfg := hop.Config{Iface: e.iface, RateBps: 1_000_000_000, BufferBytes: 1 << 20, ACKPadding: ackPad, Method: m}
			err := e.pair.A.Do(func() error {
				_, err := hop.NewPins(e.host, hop.WithBuildSalt(otherBuild)).Attach(cfg)
				return err
			})
			if err != nil {
				t.Fatalf("attach a hop from another build: %v (fix: %s)", err, kernel.FixOf(err))
			}
		}
	}
	hopOn := []string{"int", "hop", "--iface", e.iface, "--rate", "1gbit"}
	hopPad := append(slices.Clone(hopOn), "--ack-padding")
	refusal := "an INT hop is already attached to " + e.iface
	return []upgradeKill{
		{killCase{name: "int enable, upgrading", args: []string{"int", "enable", "--peers", "198.18.0.0/15"}}, enableINT, false},
		{killCase{name: "int hop, upgrading a tcx hop", args: hopOn, refusal: refusal}, attachHop(qdisc.MethodAuto, false), false},
		{killCase{name: "int hop --ack-padding, upgrading a tcx hop", args: hopPad, refusal: refusal}, attachHop(qdisc.MethodAuto, true), false},
		{killCase{name: "int hop, upgrading a clsact hop", args: hopOn, refusal: refusal}, attachHop(qdisc.MethodClsact, false), true},
		{killCase{name: "int hop --ack-padding, upgrading a clsact hop", args: hopPad, refusal: refusal}, attachHop(qdisc.MethodClsact, true), true},
	}
}

// upgraded checks that what c upgrades runs the binary's build.
func (e *killEnv) upgraded(t *testing.T, c upgradeKill) []string {
	t.Helper()
	if !perInterface(c.args) {
		st, err := sockops.New(e.host).Status()
		switch {
		case err != nil:
			return []string{fmt.Sprintf("read INT's status: %v", err)}
		case !st.Enabled || st.UpgradeAvailable:
			return []string{fmt.Sprintf("INT is not upgraded: enabled %v, object %q, upgrade available %v", st.Enabled, st.Object, st.UpgradeAvailable)}
		}
		return nil
	}
	var problems []string
	err := e.pair.A.Do(func() error {
		hops, err := hop.NewPins(e.host).List()
		if err != nil {
			return err
		}
		if len(hops) != 1 {
			problems = append(problems, fmt.Sprintf("%d hops, want 1", len(hops)))
		}
		for _, h := range hops {
			if !h.Attached || h.UpgradeAvailable {
				problems = append(problems, fmt.Sprintf("the hop %s is not upgraded: attached %v, object %q, upgrade available %v",
					h.PinDir, h.Attached, h.Object, h.UpgradeAvailable))
			}
		}
		return nil
	})
	if err != nil {
		problems = append(problems, fmt.Sprintf("list the hops: %v", err))
	}
	return problems
}

// TestKillUpgrade kills the upgrade of INT and of hops at each of its
// kill points, then runs the command again and checks the crash tests'
// invariants, and that the upgrade is done.
func TestKillUpgrade(t *testing.T) {
	e := newKillEnv(t)
	var tally killTally
	cases := e.upgradeKills()
	for _, c := range cases {
		// A run to its end lists the kill points, and must upgrade.
		e.reset(t)
		c.prep(t)
		r := e.run(t, []string{pin.KillTraceEnv + "=1"}, c.args...)
		if r.code != 0 || r.killed {
			t.Fatalf("%s: %v", c.name, r)
		}
		var points []string
		for _, line := range strings.Split(r.stderr, "\n") {
			if p, ok := strings.CutPrefix(line, "killpoint "); ok {
				points = append(points, p)
			}
		}
		if problems := e.upgraded(t, c); len(problems) > 0 {
			t.Errorf("%s did not upgrade: %s", c.name, strings.Join(problems, "; "))
		}
		if !slices.ContainsFunc(points, func(p string) bool { return strings.Contains(p, "upgrade") }) {
			t.Errorf("%s passes no upgrade kill point: %q", c.name, points)
		}
		t.Logf("%s: %d kill points: %s", c.name, len(points), strings.Join(points, " "))
		tally.points += len(points)

		for _, p := range points {
			e.reset(t)
			c.prep(t)
			r := e.run(t, []string{pin.KillAtEnv + "=" + p}, c.args...)
			if !r.killed {
				tally.missed++
				t.Errorf("%s with %s=%s was not killed: %v", c.name, pin.KillAtEnv, p, r)
				continue
			}
			tally.kills++
			problems := e.next(t, c.killCase)
			problems = append(problems, e.upgraded(t, c)...)
			e.checkUpgradeAfter(t, &tally, fmt.Sprintf("%s killed at %s, then run again", c.name, p), problems, c.clsact)
		}
	}
	e.reset(t)
	t.Logf("upgrade kill points: %d commands, %d points enumerated, %d kills, %d points not reached, %d invariant failures (%d checks passed only after the kernel's deferred release)",
		len(cases), tally.points, tally.kills, tally.missed, tally.failures, tally.settled)
}

// checkUpgradeAfter checks, as checkAfter does, the crash tests'
// invariants plus problems, until they hold or settleTime has gone. For a
// hop attached with clsact, it counts the hop's cls_bpf filters in place
// of its TCX programs, which the invariants count (and find none of).
func (e *killEnv) checkUpgradeAfter(t *testing.T, tally *killTally, what string, problems []string, clsact bool) {
	t.Helper()
	deadline := time.Now().Add(settleTime)
	for first := true; ; first = false {
		var now []string
		for _, p := range e.check(t) {
			if !clsact || !strings.Contains(p, "programs are attached to "+e.iface) {
				now = append(now, p)
			}
		}
		now = append(now, e.checkHopSides(t, clsact)...)
		if len(now) == 0 {
			if !first {
				tally.settled++
			}
			break
		}
		if time.Now().After(deadline) {
			problems = append(problems, now...)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(problems) > 0 {
		tally.failures++
		t.Errorf("after %s:\n  %s", what, strings.Join(problems, "\n  "))
	}
}

// checkHopSides checks what runs on the pair's interface against the
// hops listed: as many int_hop (int_hop_ack) cls_bpf filters on its egress
// (ingress) as there are hops (padding ACKs), with clsact, and none with
// TCX; and no pin of a swap half done (qdisc.ReplacingPin) in their
// directories.
func (e *killEnv) checkHopSides(t *testing.T, clsact bool) []string {
	t.Helper()
	var problems []string
	err := e.pair.A.Do(func() error {
		hops, err := hop.NewPins(e.host).List()
		if err != nil {
			return err
		}
		want := map[qdisc.Direction]int{}
		for _, h := range hops {
			if clsact {
				want[qdisc.Egress]++
				if h.ACKPadding {
					want[qdisc.Ingress]++
				}
			}
			for _, side := range qdisc.Sides() {
				if p := qdisc.ReplacingPin(qdisc.SidePin(h.PinDir, side)); kernel.Exists(p) {
					problems = append(problems, fmt.Sprintf("%s is left", p))
				}
			}
		}
		ifi, err := net.InterfaceByName(e.iface)
		if err != nil {
			return err
		}
		for _, side := range []struct {
			dir  qdisc.Direction
			prog string
		}{{qdisc.Egress, "int_hop"}, {qdisc.Ingress, "int_hop_ack"}} {
			fs, err := qdisc.Filters(e.iface, side.dir)
			if err != nil {
				return err
			}
			n := 0
			for _, f := range fs {
				if f.Name == side.prog {
					n++
				}
			}
			if n != want[side.dir] {
				problems = append(problems, fmt.Sprintf("%d %s filters on %s %s, want %d", n, side.prog, e.iface, side.dir, want[side.dir]))
			}
			if !clsact {
				continue // the invariants count TCX programs
			}
			attach := ebpf.AttachTCXEgress
			if side.dir == qdisc.Ingress {
				attach = ebpf.AttachTCXIngress
			}
			if n, err := programsAttached(link.QueryOptions{Target: ifi.Index, Attach: attach}, side.prog); err == nil && n != 0 {
				problems = append(problems, fmt.Sprintf("%d %s programs attached to %s with tcx, want none beside clsact hops", n, side.prog, e.iface))
			}
		}
		return nil
	})
	if err != nil {
		problems = append(problems, fmt.Sprintf("inspect the hops' filters: %v", err))
	}
	return problems
}
