package main

import (
	"fmt"
	"log"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/ccload/ccload/daemon"
	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
	"github.com/ccload/ccload/internal/recovery"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/metrics"
)

// loaderOptions are the CC loader's options the persistent flags ask for.
func (a *app) loaderOptions() []loader.Option {
	if a.legacy {
		return []loader.Option{loader.WithRegistration(kernel.RegLegacy)}
	}
	return nil
}

func newDaemonCmd(a *app) *cobra.Command {
	var (
		opts   daemon.Options
		dryRun bool
		asJSON bool
		build  uint32
	)
	c := &cobra.Command{
		Use:   "daemon [--config FILE] [--metrics-addr ADDR] [--dry-run] [--cleanup-on-exit]",
		Short: "Hold this host to a config file: the fleet agent (a Kubernetes DaemonSet runs it)",
		Long: `Run until SIGTERM, holding this host to the config file: the CCs and their
parameters, the default CC of this network namespace, INT tagging, INT hops,
On-Ramp and the clock agent (see deploy/README.md for the format).

The daemon reconciles at start, every reconcile-interval (30s), on SIGHUP
and when the file changes: it attaches what is missing, sets parameters that
drifted, re-attaches what was detached by hand, and removes what an earlier
config named and this one does not. It never touches what it does not own:
state that the CLI made and the config does not name is left alone, and
state the config names is adopted. A config that does not validate is
refused at start; later, the daemon keeps the last good one and reports the
error (ccload_config_valid, /readyz).

Everything is pinned under <bpffs>/ccload: SIGTERM and crashes leave every
CC and program running, and a restarted daemon adopts them without
registering anything again. --cleanup-on-exit removes everything on SIGTERM
instead, as 'ccload reset' does.

--metrics-addr serves Prometheus metrics at /metrics, /healthz (alive) and
/readyz (the last reconcile succeeded).`,
		Example: `  ccload daemon --config /etc/ccload/config.yaml
  ccload daemon --config config.yaml --dry-run
  ccload daemon --config config.yaml --metrics-addr 0.0.0.0:9810`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			opts.Host = a.host
			opts.LoaderOptions = a.loaderOptions()
			opts.Build = build
			logger := log.New(c.ErrOrStderr(), "", log.LstdFlags)
			opts.Logf = logger.Printf
			opts.LockWait = a.lockWait
			opts.Recover = func(h kernel.Host) error {
				done, err := recovery.Run(h)
				for _, d := range done {
					logger.Printf("recover: %s", d)
				}
				return err
			}
			opts.Collectors = []prometheus.Collector{metrics.NewCollector(a.host, metrics.WithErrorHandler(func(part string, err error) {
				logger.Printf("metrics: read %s: %v", part, err)
			}))}
			d := daemon.New(opts)
			if dryRun {
				pl, err := d.Plan()
				if err != nil {
					return fmt.Errorf("daemon --dry-run: %w", err)
				}
				if asJSON {
					return a.printJSON(pl)
				}
				if pl.Empty() {
					fmt.Fprintln(a.out, "nothing to do: this host matches", opts.ConfigPath)
					return nil
				}
				fmt.Fprintf(a.out, "the daemon would make %d changes (nothing was changed):\n", len(pl.Actions))
				for i, act := range pl.Actions {
					fmt.Fprintf(a.out, "%3d. %s\n", i+1, act)
				}
				return nil
			}
			if err := d.Run(c.Context()); err != nil {
				return fmt.Errorf("daemon: %w", err)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&opts.ConfigPath, "config", daemon.DefaultConfigPath, "the config file")
	f.StringVar(&opts.MetricsAddr, "metrics-addr", "127.0.0.1:9810", "where to serve /metrics, /healthz and /readyz (empty: nowhere)")
	f.BoolVar(&dryRun, "dry-run", false, "print what a reconcile would change, change nothing, and exit")
	f.BoolVar(&opts.CleanupOnExit, "cleanup-on-exit", false, "on SIGTERM, remove everything ccload owns (as ccload reset) instead of leaving it pinned")
	f.BoolVar(&asJSON, "json", false, "with --dry-run, print the plan as JSON")
	f.Uint32Var(&build, "build-version", 0, "load every object as this build, as a newer ccload would (tests of upgrades)")
	_ = f.MarkHidden("build-version")
	return c
}

func newResetCmd(a *app) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "reset",
		Short: "Remove everything ccload owns on this host",
		Long: `Remove everything ccload pinned under <bpffs>/ccload, in this network namespace:
every CC (the default goes back to cubic if it named one; sockets that use a
CC keep it until they close), INT tagging, every INT hop, On-Ramp on every
interface (with the fq root it installed), the clock map when no clock agent
runs, and the daemon's record of what it owns. A daemon that still runs puts
back what its config names at its next reconcile: stop it first.

Running it again after a failure finishes the job.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			if err := kernel.CheckCaps(); err != nil {
				return fmt.Errorf("reset: %w", err)
			}
			lock, err := pin.AcquireLock(a.host.PinRoot(), a.lockWait)
			if err != nil {
				return fmt.Errorf("reset: %w", err)
			}
			defer lock.Release()
			// What crashed commands left is ccload's too: the sweep
			// finishes or undoes it, and Reset removes the rest.
			if _, err := recovery.Run(a.host); err != nil {
				fmt.Fprintf(c.ErrOrStderr(), "note: recovering from earlier crashes: %v\n", err)
			}
			res, err := daemon.Reset(a.host, a.loaderOptions()...)
			if err != nil {
				return fmt.Errorf("reset (run it again to finish): %w", err)
			}
			if asJSON {
				return a.printJSON(res)
			}
			fmt.Fprintf(a.out, "removed %s\n", res)
			if res.ResetDefault != "" {
				fmt.Fprintf(a.out, "the default congestion control is %s again\n", res.ResetDefault)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
