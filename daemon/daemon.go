package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ccload/ccload/clocksync"
	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
	"github.com/ccload/ccload/loader"
)

// Options configure a Daemon.
type Options struct {
	// Host is where the daemon acts: its pin root and network namespace.
	Host kernel.Host
	// ConfigPath is the config file; it is read again on SIGHUP and when
	// its contents change.
	ConfigPath string
	// MetricsAddr is where /metrics, /healthz and /readyz are served; ""
	// serves nothing.
	MetricsAddr string
	// CleanupOnExit removes everything ccload owns when the daemon stops,
	// as `ccload reset` does. Without it, every pin stays, and so does
	// every CC, INT program, hop and On-Ramp program.
	CleanupOnExit bool
	// Collectors are registered beside the daemon's own metrics.
	Collectors []prometheus.Collector
	// LockWait bounds how long a reconcile waits for another ccload
	// command to finish; 0 means 30 s.
	LockWait time.Duration
	// Recover, when set, runs under the lock before each reconcile, to
	// clean up what a crashed ccload command left behind.
	Recover func(kernel.Host) error
	// WatchInterval is how often the config file is checked for changes;
	// 0 means 2 s.
	WatchInterval time.Duration
	// LoaderOptions are passed to the CC loader (tests force the legacy
	// registration with them).
	LoaderOptions []loader.Option
	// Build, when not 0, loads every object as that build, as a newer
	// ccload would: tests of in-place upgrades.
	Build uint32
	// Logf receives the daemon's log lines; nil discards them.
	Logf func(format string, args ...any)
}

// Daemon holds a host to its config.
type Daemon struct {
	opts  Options
	parts *parts

	registry   *prometheus.Registry
	runs       prometheus.Counter
	failures   prometheus.Counter
	actions    *prometheus.CounterVec
	lastOK     prometheus.Gauge
	configGood prometheus.Gauge

	mu       sync.Mutex // guards the fields below
	ready    bool
	lastErr  error
	desired  *Desired
	confHash [32]byte
	clock    *clockRun
}

// New makes a Daemon. It reads nothing yet.
func New(opts Options) *Daemon {
	if opts.LockWait == 0 {
		opts.LockWait = 30 * time.Second
	}
	if opts.WatchInterval == 0 {
		opts.WatchInterval = 2 * time.Second
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	d := &Daemon{opts: opts, parts: newParts(opts.Host, opts.Build, opts.LoaderOptions...), registry: prometheus.NewRegistry()}
	d.runs = prometheus.NewCounter(prometheus.CounterOpts{Name: "ccload_reconcile_runs_total",
		Help: "Reconcile passes the daemon has run."})
	d.failures = prometheus.NewCounter(prometheus.CounterOpts{Name: "ccload_reconcile_errors_total",
		Help: "Reconcile passes that ended with an error (a bad config, or an action that failed)."})
	d.actions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ccload_reconcile_actions_total",
		Help: "Changes made by reconcile passes, by kind (attach, set, detach, default, int-enable, ...)."}, []string{"kind"})
	d.lastOK = prometheus.NewGauge(prometheus.GaugeOpts{Name: "ccload_reconcile_last_success_timestamp_seconds",
		Help: "Unix time of the last reconcile pass that ended without an error."})
	d.configGood = prometheus.NewGauge(prometheus.GaugeOpts{Name: "ccload_config_valid",
		Help: "1 when the config file last read was valid, 0 when the daemon keeps an older one."})
	d.registry.MustRegister(d.runs, d.failures, d.actions, d.lastOK, d.configGood)
	for _, c := range opts.Collectors {
		d.registry.MustRegister(c)
	}
	return d
}

// Registry is the daemon's metrics registry.
func (d *Daemon) Registry() *prometheus.Registry { return d.registry }

// Plan reads the config and returns what a reconcile would change,
// changing nothing: `ccload daemon --dry-run`.
func (d *Daemon) Plan() (*Plan, error) {
	_, desired, err := LoadConfig(d.opts.ConfigPath)
	if err != nil {
		return nil, err
	}
	owned, err := readOwned(d.opts.Host)
	if err != nil {
		return nil, err
	}
	return d.parts.plan(desired, owned)
}

// loadConfig reads the config file when it changed since the last read.
// A config that does not validate is reported and the previous one is
// kept; there is none the first time, which is an error.
func (d *Daemon) loadConfig(force bool) (*Desired, error) {
	data, err := os.ReadFile(d.opts.ConfigPath)
	d.mu.Lock()
	prev, prevHash := d.desired, d.confHash
	d.mu.Unlock()
	if err != nil {
		d.configGood.Set(0)
		if prev != nil {
			return prev, fmt.Errorf("read config (keeping the last good one): %w", err)
		}
		return nil, fmt.Errorf("read config: %w", err)
	}
	h := sha256.Sum256(data)
	if !force && prev != nil && h == prevHash {
		return prev, nil
	}
	_, desired, err := ParseConfig(data, d.opts.ConfigPath)
	if err != nil {
		d.configGood.Set(0)
		if prev != nil {
			return prev, fmt.Errorf("keeping the last good config: %w", err)
		}
		return nil, err
	}
	d.configGood.Set(1)
	d.mu.Lock()
	d.desired, d.confHash = desired, h
	d.mu.Unlock()
	if prev != nil {
		d.opts.Logf("config %s changed", d.opts.ConfigPath)
	}
	return desired, nil
}

// Reconcile runs one pass: read the config, take the lock, recover from
// crashed commands, plan, apply, record what the daemon owns, and adjust
// the clock agent.
func (d *Daemon) Reconcile(ctx context.Context) error {
	d.runs.Inc()
	err := d.reconcile(ctx)
	d.mu.Lock()
	d.lastErr = err
	if err == nil {
		d.ready = true
	} else {
		d.ready = false
	}
	d.mu.Unlock()
	if err != nil {
		d.failures.Inc()
		d.opts.Logf("reconcile: %v", err)
		return err
	}
	d.lastOK.SetToCurrentTime()
	return nil
}

func (d *Daemon) reconcile(ctx context.Context) error {
	desired, cfgErr := d.loadConfig(false)
	if desired == nil {
		return cfgErr
	}
	host := d.opts.Host
	if _, err := pin.EnsureLasting(host, "the daemon's CCs and programs",
		"run the daemon in the host's mount namespace, or mount the host's /sys/fs/bpf into its container"); err != nil {
		return err
	}
	lock, err := pin.AcquireLock(host.PinRoot(), d.opts.LockWait)
	if err != nil {
		return err
	}
	defer lock.Release()
	if d.opts.Recover != nil {
		if err := d.opts.Recover(host); err != nil {
			d.opts.Logf("recover: %v", err)
		}
	}
	owned, err := readOwned(host)
	if err != nil {
		return err
	}
	pl, err := d.parts.plan(desired, owned)
	if err != nil {
		return err
	}
	applyErr := d.parts.apply(pl, d.opts.Logf)
	for _, a := range pl.Actions {
		d.actions.WithLabelValues(a.Kind).Inc()
	}
	// What the daemon failed to remove stays its own, so that the next
	// pass tries again.
	rec := pl.Owned
	if applyErr != nil {
		rec = mergeOwned(rec, owned)
	}
	if err := writeOwned(host, rec); err != nil {
		applyErr = errors.Join(applyErr, err)
	}
	if err := d.setClock(ctx, desired.Clock); err != nil {
		applyErr = errors.Join(applyErr, err)
	}
	return errors.Join(cfgErr, applyErr)
}

// mergeOwned is the union of a and b.
func mergeOwned(a, b Owned) Owned {
	union := func(x, y []string) []string {
		out := append([]string(nil), x...)
		for _, s := range y {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
		return out
	}
	a.CCs = union(a.CCs, b.CCs)
	a.Hops = union(a.Hops, b.Hops)
	a.OnRamp = union(a.OnRamp, b.OnRamp)
	a.INT = a.INT || b.INT
	if a.Default == "" {
		a.Default = b.Default
	}
	return a
}

// clockRun is the clock agent running inside the daemon.
type clockRun struct {
	cfg    clocksync.Config
	cancel context.CancelFunc
	done   chan struct{}
}

// setClock starts, restarts or stops the clock agent to match cfg.
func (d *Daemon) setClock(ctx context.Context, cfg *clocksync.Config) error {
	d.mu.Lock()
	cur := d.clock
	d.mu.Unlock()
	if cur != nil && cfg != nil && sameClock(cur.cfg, *cfg) {
		select {
		case <-cur.done:
			// It stopped on its own: start it again below.
		default:
			return nil
		}
	}
	if cur != nil {
		cur.cancel()
		<-cur.done
		d.mu.Lock()
		d.clock = nil
		d.mu.Unlock()
	}
	if cfg == nil {
		return nil
	}
	offsets, err := clocksync.OpenForAgent(d.opts.Host)
	if err != nil {
		return fmt.Errorf("start the clock agent: %w", err)
	}
	c := *cfg
	c.Offsets = offsets
	c.Logf = func(f string, args ...any) { d.opts.Logf("clock: "+f, args...) }
	agent, err := clocksync.New(c)
	if err != nil {
		offsets.Close()
		return fmt.Errorf("start the clock agent: %w", err)
	}
	actx, cancel := context.WithCancel(ctx)
	run := &clockRun{cfg: *cfg, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(run.done)
		defer offsets.Close()
		defer agent.Close()
		if err := agent.Run(actx); err != nil && actx.Err() == nil {
			d.opts.Logf("clock agent stopped: %v", err)
		}
	}()
	d.mu.Lock()
	d.clock = run
	d.mu.Unlock()
	d.opts.Logf("clock agent on UDP %s", cfg.Listen)
	return nil
}

func sameClock(a, b clocksync.Config) bool {
	return fmt.Sprint(a.Peers) == fmt.Sprint(b.Peers) && a.Listen == b.Listen && a.MaxPeers == b.MaxPeers &&
		a.ProbeRate == b.ProbeRate && a.Window == b.Window
}

// Ready reports whether the last reconcile succeeded, and its error.
func (d *Daemon) Ready() (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ready, d.lastErr
}

// The daemon's HTTP paths, which the DaemonSet's probes and Prometheus use.
const (
	MetricsPath = "/metrics"
	HealthzPath = "/healthz"
	ReadyzPath  = "/readyz"
)

// Handler serves /metrics, /healthz (the process is alive) and /readyz
// (the last reconcile succeeded).
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(MetricsPath, promhttp.HandlerFor(d.registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc(HealthzPath, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc(ReadyzPath, func(w http.ResponseWriter, r *http.Request) {
		ok, err := d.Ready()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			if err == nil {
				err = errors.New("not reconciled yet")
			}
			fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// Run serves the endpoints and reconciles until ctx ends or SIGTERM or
// SIGINT arrives: at start, every interval, on SIGHUP and when the config
// file changes. It returns nil on a clean stop. The first reconcile's
// config error is returned at once: a daemon started with a broken config
// should fail to start, not wait.
func (d *Daemon) Run(ctx context.Context) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	if _, err := d.loadConfig(true); err != nil {
		return err
	}
	var srv *http.Server
	if d.opts.MetricsAddr != "" {
		ln, err := net.Listen("tcp", d.opts.MetricsAddr)
		if err != nil {
			return fmt.Errorf("serve metrics on %s: %w", d.opts.MetricsAddr, err)
		}
		srv = &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		d.opts.Logf("serving /metrics, /healthz and /readyz on %s", ln.Addr())
	}

	_ = d.Reconcile(ctx)
	d.mu.Lock()
	interval := d.desired.Interval
	d.mu.Unlock()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	watch := time.NewTicker(d.opts.WatchInterval)
	defer watch.Stop()
	lastData, _ := os.ReadFile(d.opts.ConfigPath)
	for {
		select {
		case <-ctx.Done():
			return d.shutdown(srv)
		case <-hup:
			d.opts.Logf("SIGHUP: reconciling")
			if _, err := d.loadConfig(true); err != nil {
				d.opts.Logf("%v", err)
			}
		case <-tick.C:
		case <-watch.C:
			data, err := os.ReadFile(d.opts.ConfigPath)
			if err != nil || bytes.Equal(data, lastData) {
				continue
			}
			lastData = data
		}
		_ = d.Reconcile(ctx)
		d.mu.Lock()
		if d.desired.Interval != interval {
			interval = d.desired.Interval
			tick.Reset(interval)
		}
		d.mu.Unlock()
	}
}

// shutdown stops the clock agent and the server, and with CleanupOnExit
// removes ccload's state. Everything else stays pinned.
func (d *Daemon) shutdown(srv *http.Server) error {
	_ = d.setClock(context.Background(), nil)
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = srv.Shutdown(sctx)
		cancel()
	}
	if !d.opts.CleanupOnExit {
		d.opts.Logf("stopping; everything stays pinned")
		return nil
	}
	lock, err := pin.AcquireLock(d.opts.Host.PinRoot(), d.opts.LockWait)
	if err != nil {
		return fmt.Errorf("clean up on exit: %w", err)
	}
	defer lock.Release()
	res, err := Reset(d.opts.Host, d.opts.LoaderOptions...)
	if err != nil {
		return fmt.Errorf("clean up on exit: %w", err)
	}
	d.opts.Logf("stopping; removed %s", res)
	return nil
}
