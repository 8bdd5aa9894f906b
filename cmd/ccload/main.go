// Command ccload loads datacenter congestion controls, written in BPF,
// into the running Linux kernel, where any application can select them
// like a built-in one.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/spf13/cobra"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/telemetry/hop"
	"github.com/ccload/ccload/telemetry/sockops"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// app carries what every subcommand needs; it replaces package globals.
type app struct {
	host     kernel.Host
	legacy   bool
	lockWait time.Duration // how long a command that changes state waits for the lock (lock.go)
	out      io.Writer
}

// loader returns the CC loader, wired to INT's store for the CCs that
// read INT.
func (a *app) loader() *loader.Loader {
	opts := []loader.Option{loader.WithSharedMaps(a.int().Store())}
	if a.legacy {
		opts = append(opts, loader.WithRegistration(kernel.RegLegacy))
	}
	return loader.New(a.host, opts...)
}

// int returns INT tagging (the sockops program and its store).
func (a *app) int() *sockops.INT { return sockops.New(a.host) }

// hops returns the pinned INT hops.
func (a *app) hops() *hop.Pins { return hop.NewPins(a.host) }

// runContext is the context of a long-running command: it ends on Ctrl-C,
// SIGTERM or a write to a closed pipe, and after d when d > 0.
func runContext(c *cobra.Command, d time.Duration) (context.Context, context.CancelFunc) {
	// SIGPIPE: `ccload bench | head` must end the run and clean up its
	// netns and pins, not die on its next line of progress.
	ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM, syscall.SIGPIPE)
	if d <= 0 {
		return ctx, stop
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	return ctx, func() { cancel(); stop() }
}

// printJSONLine writes v as one line of JSON, for streams.
func (a *app) printJSONLine(v any) error {
	enc := json.NewEncoder(a.out)
	enc.SetEscapeHTML(false) // ">= 6.4" stays readable; the output is not HTML
	return enc.Encode(v)
}

func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes the CLI and returns the process exit code: 0 on success,
// 1 on failure, 2 on a usage error.
func run(args []string, stdout, stderr io.Writer) int {
	a := &app{host: kernel.DefaultHost(), out: stdout}
	root := newRootCmd(a)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return report(stderr, root.Execute())
}

// report prints err, if any, as the CLI shows errors, and returns the exit
// code: 0 for no error, 2 for a usage error, 1 for the rest. A failure
// carries its fix, and a verifier rejection its whole log.
func report(stderr io.Writer, err error) int {
	if err == nil {
		return 0
	}
	var uerr usageError
	if errors.As(err, &uerr) {
		fmt.Fprintf(stderr, "ccload: %v\nRun '%s --help' for usage.\n", err, uerr.cmd)
		return 2
	}
	fmt.Fprintf(stderr, "ccload: %v\n", err)
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		// The error's text has only the log's last lines.
		fmt.Fprintf(stderr, "verifier log:\n%+v\n", ve)
	}
	if fix := kernel.FixOf(err); fix != "" {
		fmt.Fprintf(stderr, "  fix: %s\n", fix)
	}
	return 1
}

// usageError is a mistake in the command line: run prints it with the
// command's --help line and exits 2.
type usageError struct {
	cmd string // the command's path, e.g. "ccload int enable"
	err error
}

// usage returns err as a usage error of the command c.
func usage(c *cobra.Command, err error) error {
	return usageError{cmd: c.CommandPath(), err: err}
}

func (u usageError) Error() string { return u.err.Error() }

func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "ccload",
		Short: "Load datacenter congestion controls (PowerTCP, DCTCP, ...) into Linux as BPF",
		Long: `ccload registers congestion controls written in BPF with the running kernel.
Once attached, a CC is picked like any built-in one:

  sysctl net.ipv4.tcp_congestion_control=theta_powertcp   # default for new sockets
  iperf3 -C theta_powertcp -c HOST                         # per socket (TCP_CONGESTION)

Attached CCs are pinned under /sys/fs/bpf/ccload and stay registered after
ccload exits, until 'ccload detach'.`,
		Example: `  ccload status
  ccload list
  ccload attach theta_powertcp --param base_rtt=20us --param gamma=0.9
  ccload set theta_powertcp gamma=0.8
  ccload detach theta_powertcp`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&a.host.BPFFS, "bpffs", a.host.BPFFS,
		"bpffs mount point; ccload pins under <bpffs>/ccload (mounted automatically when it is /sys/fs/bpf)")
	root.PersistentFlags().StringVar(&a.host.BTFPath, "kernel-btf", a.host.BTFPath,
		"kernel BTF to read features from")
	root.PersistentFlags().BoolVar(&a.legacy, "legacy-registration", false,
		"register through a struct_ops map update, as on kernels before 6.4, even when links exist")
	_ = root.PersistentFlags().MarkHidden("legacy-registration")
	root.PersistentFlags().DurationVar(&a.lockWait, "lock-wait", defaultLockWait,
		"how long a command that changes state waits for another ccload command, or the daemon, to finish")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usage(c, err)
	})
	root.AddCommand(newListCmd(a), newStatusCmd(a), newAttachCmd(a), newSetCmd(a),
		newDetachCmd(a), newINTCmd(a), newClockCmd(a), newOnRampCmd(a), newTraceCmd(a), newDemoCmd(a), newBenchCmd(a), newVersionCmd(a),
		newDaemonCmd(a), newResetCmd(a), newSpinCmd())
	lockCommands(root, a)
	return root
}

func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) != n {
			return usage(c, fmt.Errorf("%s expects %s, got %d arguments", c.Name(), what, len(args)))
		}
		return nil
	}
}

func newVersionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print ccload's version",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			fmt.Fprintln(a.out, "ccload", version)
			return nil
		},
	}
}
