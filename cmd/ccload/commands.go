package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/loader"
)

func paramHelp() string {
	var b strings.Builder
	for _, cc := range loader.Builtin() {
		fmt.Fprintf(&b, "\n%s — %s\n", cc.Name, cc.Summary)
		for _, p := range cc.Params {
			fmt.Fprintf(&b, "  %-15s %s (default %s; %s: %s)\n", p.Name, p.Doc, p.Default, p.Unit, p.Range())
		}
	}
	return b.String()
}

func newListCmd(a *app) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "list",
		Short: "List the CCs built into ccload, and which are attached",
		Long: `List the congestion controls compiled into this ccload binary. For each:
whether it is attached, how it is registered, whether it is the default of
this network namespace, how many sockets use it, its parameters (live values
when attached) and its counters.

An attached CC has generations: an upgrade (attach --replace) registers a
new one under the same name, which new sockets get, while live sockets keep
the one they started with until they close. GEN is the generation new
sockets get; each older generation that sockets still use is listed below
its CC with its socket count. "upgrade available" means this ccload embeds
another build than the one attached.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			l := a.loader()
			ccs, err := l.List()
			if err != nil {
				return err
			}
			kernel, _ := l.KernelCCs()
			if asJSON {
				return a.printJSON(struct {
					CCs    []loader.CCStatus `json:"ccs"`
					Kernel []string          `json:"kernel_registered"`
				}{ccs, kernel})
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tATTACHED\tDEFAULT\tGEN\tSOCKETS\tACKS\tPARAMS")
			for _, s := range ccs {
				att, gen := "no", "-"
				if s.Attached {
					att = "yes (" + string(s.Registration) + ")"
					gen = fmt.Sprint(s.Generation)
				} else if s.Stale {
					att = "stale pins"
				}
				fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%d\t%d\t%s\n", s.Name, att, yesNo(s.Default), gen,
					s.SocketsInUse, s.Stats["acks"], loader.ParamsString(s.Params))
				for _, g := range s.Generations {
					if len(s.Generations) == 1 && !s.UpgradeAvailable {
						break
					}
					what := "old: live sockets keep it until they close"
					if g.Current {
						what = "current: new sockets get it"
					}
					fmt.Fprintf(tw, "  gen %d\t%s\t\t\t%d\t%d\tobject %s\n", g.Generation, what, g.SocketsInUse, g.Stats["acks"], g.Object.Short())
				}
				if s.UpgradeAvailable {
					fmt.Fprintf(tw, "  upgrade available\tccload attach %s --replace\t\t\t\t\t\n", s.Name)
				}
			}
			tw.Flush()
			fmt.Fprintf(a.out, "\nregistered in the kernel: %s\n", strings.Join(kernel, " "))
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// statusReport is what `ccload status --json` prints: whether every
// required check passed, and each check.
type statusReport struct {
	OK     bool           `json:"ok"`
	Checks []loader.Check `json:"checks"`
}

func newStatusCmd(a *app) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status",
		Short: "Check the kernel features ccload needs",
		Long: `Check, one by one, what ccload needs from this machine.

Required, for any CC: kernel BTF, struct_ops support for tcp_congestion_ops,
how CCs get registered (links on 6.4+, map updates before), which
cong_control prototype the kernel has, capabilities, and bpffs.

Needed by some commands only, each line says which: cgroup v2 (the sockops
programs of 'int enable' and 'onramp enable') and sch_fq (On-Ramp's pauses).
The sch_fq check installs fq on the loopback device of a network namespace
made for the probe and removed after it, which may load the sch_fq module;
nothing else on the machine is changed.

Exits 1 when a required check fails; a missing optional feature is reported
with its fix, and does not fail the command.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			checks := a.loader().Status()
			failed, required := 0, 0
			for _, ch := range checks {
				if ch.Required {
					required++
					if !ch.OK {
						failed++
					}
				}
			}
			if asJSON {
				if err := a.printJSON(statusReport{OK: failed == 0, Checks: checks}); err != nil {
					return err
				}
			} else {
				tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
				for _, ch := range checks {
					answer := yesNo(ch.OK)
					if ch.Unknown {
						answer = "?"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\n", ch.Name, answer, ch.Detail)
					if !ch.Required {
						fmt.Fprintf(tw, "\t\tneeded by: %s\n", ch.NeededBy)
					}
					if ch.Fix != "" {
						fmt.Fprintf(tw, "\t\tfix: %s\n", ch.Fix)
					}
				}
				tw.Flush()
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d required checks failed", failed, required)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func newAttachCmd(a *app) *cobra.Command {
	var (
		params     []string
		setDefault bool
		replace    bool
		build      uint32
		asJSON     bool
	)
	c := &cobra.Command{
		Use:   "attach NAME [--param name=value]... [--default] [--replace]",
		Short: "Register a CC with the kernel and pin it",
		Long: `Register a congestion control with the kernel. It stays registered after
ccload exits (it is pinned under /sys/fs/bpf/ccload/NAME) until 'ccload detach'.
Attaching an attached CC changes nothing but the parameters given, and says so.

--replace upgrades an attached CC in place when it was built from another
object than the one in this ccload (after an upgrade of ccload itself; see
"upgrade available" in 'ccload list'), and says so when it was not. A CC that
is not attached is simply attached.
  - On Linux 6.4 and later one link update swaps the new build in under the
    same name. The name never leaves tcp_available_congestion_control, and
    every new socket gets the new build, whether it asks by setsockopt or by
    the sysctl: a namespace's default keeps pointing at the build it was set
    to, so ccload sets it again, to the same name, in every network namespace
    whose default names the CC (those it can see: its own, those of the
    processes in its PID namespace, and those under /run/netns). Live sockets
    keep the old build until they close; 'ccload list' shows both generations
    and their sockets.
  - Before 6.4 a swap cannot be gapless: the old build is unregistered and the
    new one registered, and ccload prints how long the name was missing
    (milliseconds: the kernel waits for an RCU grace period in between). In
    that moment setsockopt(TCP_CONGESTION) with the name fails with ENOENT,
    and new sockets that take this namespace's default get cubic: ccload
    moves the default there for the swap, so that it never names a missing
    CC, and back after. Other namespaces whose default names the CC keep
    giving their new sockets the old build until the swap ends. Live sockets
    keep the old build, as with links.
The parameters carry over; both generations share them.

Parameters (--param name=value, repeatable or comma-separated):` + paramHelp(),
		Example: `  ccload attach theta_powertcp
  ccload attach theta_powertcp --param base_rtt=20us,gamma=0.9 --param host_bw=25gbit
  ccload attach bpf_dctcp --default
  ccload attach theta_powertcp --replace`,
		Args: exactArgs(1, "one CC name"),
		RunE: func(c *cobra.Command, args []string) error {
			given, err := loader.ParseAssignments(params)
			if err != nil {
				return err
			}
			l := a.loader()
			if build != 0 {
				l = l.With(loader.WithBuildVersion(build))
			}
			res, err := l.Attach(loader.AttachRequest{Name: args[0], Params: given, SetDefault: setDefault, Replace: replace})
			if err != nil {
				return fmt.Errorf("attach %s: %w", args[0], err)
			}
			if asJSON {
				return a.printJSON(res)
			}
			for _, n := range res.Notes {
				fmt.Fprintf(a.out, "note: %s\n", n)
			}
			switch up := res.Upgrade; {
			case up != nil && up.Upgraded:
				fmt.Fprintf(a.out, "upgraded %s (%s registration): generation %d (object %s) replaces generation %d (object %s)\n",
					res.Name, up.Registration, up.Generation, up.To.Short(), up.FromGeneration, up.From.Short())
				if up.Registration == kernel.RegLegacy {
					fmt.Fprintf(a.out, "%s was missing from tcp_available_congestion_control for at most %v", res.Name, up.Gap.Round(time.Microsecond))
					if up.DefaultFallback != "" {
						fmt.Fprintf(a.out, "; meanwhile the default was %s", up.DefaultFallback)
					}
					fmt.Fprintln(a.out)
				} else {
					fmt.Fprintf(a.out, "%s never left tcp_available_congestion_control\n", res.Name)
				}
				fmt.Fprintf(a.out, "%d live sockets keep generation %d until they close; new sockets get generation %d\n",
					up.OldSockets, up.FromGeneration, up.Generation)
			case up != nil:
				fmt.Fprintf(a.out, "%s already runs this build (generation %d, object %s); nothing replaced", res.Name, res.Generation, res.Object.Short())
				if len(given) > 0 {
					fmt.Fprintf(a.out, "; parameters updated")
				}
				fmt.Fprintln(a.out)
			case res.AlreadyAttached:
				fmt.Fprintf(a.out, "%s is already attached (%s); nothing re-registered", res.Name, res.Registration)
				if len(given) > 0 {
					fmt.Fprintf(a.out, "; parameters updated")
				}
				fmt.Fprintln(a.out)
			default:
				fmt.Fprintf(a.out, "attached %s (%s registration, %s), pinned at %s\n",
					res.Name, res.Registration, res.CongControl, res.PinDir)
			}
			fmt.Fprintf(a.out, "parameters: %s\n", loader.ParamsString(res.Params))
			if res.Default {
				fmt.Fprintf(a.out, "net.ipv4.tcp_congestion_control = %s\n", res.Name)
			} else if !res.AlreadyAttached {
				fmt.Fprintf(a.out, "select it with: sysctl net.ipv4.tcp_congestion_control=%s, or setsockopt(TCP_CONGESTION)\n", res.Name)
			}
			return nil
		},
	}
	c.Flags().StringArrayVarP(&params, "param", "p", nil, "set a parameter, name=value (repeatable)")
	c.Flags().BoolVar(&setDefault, "default", false, "also make it this network namespace's default CC (net.ipv4.tcp_congestion_control)")
	c.Flags().BoolVar(&replace, "replace", false, "upgrade an attached CC built from another object to this ccload's build, in place")
	c.Flags().Uint32Var(&build, "build-version", 0, "load the CC with its ccload_build constant set to this (tests of upgrades)")
	_ = c.Flags().MarkHidden("build-version")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func newSetCmd(a *app) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "set NAME name=value...",
		Short: "Change parameters of an attached CC at run time",
		Long: `Change parameters of an attached congestion control. The new values are
written in one map update; every socket using the CC, including live ones,
uses them from its next ACK. Parameters not named keep their values.

Parameters:` + paramHelp(),
		Example: `  ccload set theta_powertcp gamma=0.8
  ccload set theta_powertcp base_rtt=0 host_bw=100gbit`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) < 2 {
				return usage(c, fmt.Errorf("set expects a CC name and at least one name=value"))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			given, err := loader.ParseAssignments(args[1:])
			if err != nil {
				return err
			}
			vals, err := a.loader().Set(args[0], given)
			if err != nil {
				return fmt.Errorf("set %s: %w", args[0], err)
			}
			if asJSON {
				return a.printJSON(struct {
					Name   string            `json:"name"`
					Params map[string]string `json:"params"`
				}{args[0], vals})
			}
			fmt.Fprintf(a.out, "%s parameters: %s\n", args[0], loader.ParamsString(vals))
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func newDetachCmd(a *app) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "detach NAME",
		Short: "Unregister a CC and remove its pins",
		Long: `Unregister a congestion control and remove its pins. New sockets can no
longer select it. Sockets that already use it keep it, safely, until they
close; ccload says how many there are. If it is the default CC of this
network namespace, the default is set back to cubic first.`,
		Args: exactArgs(1, "one CC name"),
		RunE: func(c *cobra.Command, args []string) error {
			res, err := a.loader().Detach(args[0])
			if err != nil {
				return fmt.Errorf("detach %s: %w", args[0], err)
			}
			if asJSON {
				return a.printJSON(res)
			}
			if !res.WasAttached {
				fmt.Fprintf(a.out, "%s is not attached; nothing to do\n", res.Name)
				return nil
			}
			if res.ResetDefault != "" {
				fmt.Fprintf(a.out, "net.ipv4.tcp_congestion_control reset to %s\n", res.ResetDefault)
			}
			fmt.Fprintf(a.out, "detached %s", res.Name)
			if res.SocketsInUse > 0 {
				fmt.Fprintf(a.out, "; %d sockets still use it and keep it until they close", res.SocketsInUse)
			}
			fmt.Fprintln(a.out)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
