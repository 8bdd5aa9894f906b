// Command vmtests boots real Debian kernels under QEMU and runs ccload's
// kernel-facing Go tests inside them, so that every CI run checks the
// kernels users run, not only the host's.
//
//	go run ./vmtests --kernel 6.1 --kernel 6.12
//
// With --bench it runs one `ccload bench` in each guest instead of the
// tests, for what the host's kernel lacks (the kernel's dctcp, fq_codel):
//
//	go run ./vmtests --kernel 6.12 --bench '--scenario longflow --cc dctcp,bpf_dctcp --rate 100mbit --marker fq_codel'
//
// The guest's results.json and plots land in --bench-out/<kernel release>.
// Under TCG the guest is far slower than the host: compare CCs within one
// guest run, not with the host's figures.
//
// With --host-skips FILE (the host's test run as `go test -json` events)
// it first checks that its list of guest tests holds every test the host
// skipped because its kernel lacks a feature, and at the end that each of
// them passed in every guest: a test that skips on the host and is left
// out of the list would otherwise run nowhere.
//
// For each kernel it downloads the Debian cloud kernel package (once; the
// cache survives between runs), builds an initramfs with busybox, static
// test binaries, the ccload binary and the needed modules, boots it (KVM
// when it works, TCG otherwise), and reads each test's result from the
// serial console. It exits 0 only when every test passed on every kernel:
// a failure, a skip, a hang or a kernel that cannot be fetched or booted
// is an error. A guest whose kernel panics, or that has not started /init
// within --boot-timeout under TCG, is booted again, up to maxBoots times in
// all (the emulator now and then breaks a guest); the last boot's result
// stands.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// guestPackages are the test packages run in every guest, with the tests
// they run there. Benchmarks of speed stay on the host: TCG timing says
// nothing about performance.
func guestPackages() []testPackage {
	return []testPackage{
		{name: "loader", path: "loader", tests: "^(" + strings.Join([]string{
			"TestAttachDetachLifecycle", "TestAttachUpdatesParamsWhenAttached", "TestAttachErrors",
			"TestNotAttachedErrors", "TestStatusChecks", "TestAttachDefault",
			"TestSelectCongControl", "TestParamLayoutMatchesBTF", "TestObjectMapNames",
			"TestUpgradeInPlace", "TestUpgradeOtherNetnsDefault", "TestUpgradeKilled", "TestSharedMapsOfCCs",
		}, "|") + ")$"},
		{name: "sockops", path: "telemetry/sockops", tests: "^TestEnableDisable$"},
		{name: "hop", path: "telemetry/hop", tests: "^(TestHopOnCraftedPackets|TestHopOnSplitHeaders)$"},
		{name: "e2e", path: "e2e", tests: "^(" + strings.Join([]string{
			"TestSelectAndTransfer", "TestDCTCPFallsBackWithoutECN", "TestSysctlInitNetns",
			"TestDetachWithLiveSockets", "TestSetReachesLiveSockets",
			"TestINTEndToEnd", "TestINTTagNthEchoesOnce", "TestINTScope", "TestINTMalformedFromNetwork", "TestDualStackServerEchoesINT",
			"TestDCTCPMatchesKernel", "TestRXTimestampsThroughFQ", "TestClockAgentKeepsStampsOutOfFQ",
			"TestOnRampIncast", "TestOnRampPauseHoldsFlow", "TestOnRampUnderEveryCC",
			"TestUpgradeUnderTraffic", "TestDaemonRestartUnderTraffic",
			"TestKillOnRamp", "TestOnRampUpgradeInPlace", "TestOnRampUpgradeAcrossLayouts", "TestOnRampObserve", "TestOnRampRoomOnlyWhenDue",
		}, "|") + ")$"},
		{name: "ccload", path: "cmd/ccload", tests: "^(TestOnRampCLI|TestOnRampObserveCLI|TestDaemon|TestDaemonBadConfig|TestDaemonOnRamp|TestDaemonOnRampObserve)$"},
		{name: "onramp", path: "onramp", tests: "^(TestDataPath|TestRecover|TestUpgradeInPlace)$"},
		{name: "clocksync", path: "clocksync", tests: "^(TestScrubClearsOnlyReceiveStamps|TestScrubReplacesFilterOfDeadAgent|TestClockMapReadByBPF|TestRestartIDsMatchesStampsAgain)$"},
		{name: "testbed", path: "testbed", tests: "^TestDumbbellECNMarking$"},
		{name: "bench", path: "bench", tests: "^(TestProbeECN|TestOnRampScenarioQuick)$"},
		{name: "perack", path: "bench/perack", tests: "^TestArithmeticState$"},
		{name: "qdisc", path: "qdisc", tests: "^(" + strings.Join([]string{
			"TestFQEDTDelay", "TestFQFlowMaxRate", "TestFQCloseRemovesEverything", "TestFQRefusesForeignRoot",
			"TestAttachCloseRemovesEverything", "TestAttachClsactSharing", "TestAttachErrors",
			"TestEDTDelayConfig", "TestEnsureFQRoot", "TestFQRootMissingInterface", "TestFQRootJSON", "TestProbeFQ",
		}, "|") + ")$"},
	}
}

type kernelFlags []string

func (k *kernelFlags) String() string     { return strings.Join(*k, ",") }
func (k *kernelFlags) Set(v string) error { *k = append(*k, v); return nil }

type options struct {
	kernels      []string
	only         []string // pkg=regexp overrides of guestPackages
	cache        string
	accel        string
	timeout      time.Duration
	bootTimeout  time.Duration // TCG only: how long a guest may take to start /init
	jsonOut      string
	updateReadme string
	verbose      bool
	bench        []string // ccload bench's arguments (--bench); no tests then
	hostSkips    string   // the host's `go test -json` events (--host-skips)
	benchOut     string
}

func main() {
	var o options
	var ks kernelFlags
	flag.Var(&ks, "kernel", "kernel series to boot: 6.1 or 6.12 (repeatable)")
	flag.StringVar(&o.cache, "cache", defaultCache(), "download and build cache (kept between runs)")
	flag.StringVar(&o.accel, "accel", "auto", "auto (KVM if it boots, else TCG), kvm or tcg")
	flag.DurationVar(&o.timeout, "timeout", defaultGuestTimeout, "per-guest deadline; a guest still running then has hung")
	flag.DurationVar(&o.bootTimeout, "boot-timeout", 3*time.Minute, "under TCG, how long a guest may take to start /init before it is killed and booted once more")
	flag.StringVar(&o.jsonOut, "json", "", "write the results as JSON to this file")
	flag.StringVar(&o.updateReadme, "update-readme", "", "rewrite the supported-kernels table in this README")
	flag.BoolVar(&o.verbose, "v", false, "copy every guest's console to stdout")
	var only kernelFlags
	flag.Var(&only, "only", "run only PKG's tests matching REGEXP in the guest, as PKG=REGEXP (repeatable; PKG is a directory of the module)")
	flag.StringVar(&o.hostSkips, "host-skips", "", "the host's test run as `go test -json` events (gotestsum --jsonfile FILE): every test that skipped there because the host's kernel lacks a feature must be in the guests' list and pass in every guest")
	var benchLine string
	flag.StringVar(&benchLine, "bench", "", "run `ccload bench ARGS` in each guest instead of the tests (ARGS split at white space; no --out)")
	flag.StringVar(&o.benchOut, "bench-out", "vmtests-bench", "with --bench: the guests' results.json and plots go to DIR/<kernel release>")
	flag.Parse()
	o.kernels = ks
	o.only = only
	if benchLine != "" {
		args, err := benchArgs(benchLine)
		if err != nil {
			fmt.Fprintf(os.Stderr, "vmtests: %v\n", err)
			os.Exit(2)
		}
		if len(only) > 0 || o.updateReadme != "" || o.hostSkips != "" {
			fmt.Fprintln(os.Stderr, "vmtests: --bench runs no tests; leave out --only, --update-readme and --host-skips")
			os.Exit(2)
		}
		o.bench = args
	}
	if len(o.kernels) == 0 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: go run ./vmtests --kernel 6.1 --kernel 6.12 [--accel auto|kvm|tcg] [--json FILE] [--host-skips FILE] [--bench 'BENCH ARGS' [--bench-out DIR]]")
		os.Exit(2)
	}
	// Every tool first: a fresh machine should learn what to install now,
	// not after minutes of downloads.
	if err := prepareHostTools(); err != nil {
		fmt.Fprintf(os.Stderr, "vmtests: %v\n", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, o))
}

func defaultCache() string {
	if d := os.Getenv("CCLOAD_VMTEST_CACHE"); d != "" {
		return d
	}
	return "/var/cache/ccload-vmtests"
}

func run(ctx context.Context, o options) int {
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Printf("vmtests: "+format+"\n", args...)
	}
	var specs []kernelSpec
	for _, s := range o.kernels {
		k, err := lookupKernel(s)
		if err != nil {
			logf("%v", err)
			return 2
		}
		specs = append(specs, k)
	}
	if err := os.MkdirAll(o.cache, 0o755); err != nil {
		logf("cache: %v", err)
		return 1
	}
	root, err := moduleRoot()
	if err != nil {
		logf("%v", err)
		return 1
	}
	work, err := os.MkdirTemp("", "ccload-vmtests-")
	if err != nil {
		logf("%v", err)
		return 1
	}
	defer os.RemoveAll(work)

	pkgs := guestPackages()
	if o.bench != nil {
		pkgs = nil
	}
	if len(o.only) > 0 {
		pkgs = nil
		for _, o := range o.only {
			path, regex, ok := strings.Cut(o, "=")
			if !ok || path == "" {
				logf("--only %q: want PKG=REGEXP", o)
				return 2
			}
			pkgs = append(pkgs, testPackage{name: strings.ReplaceAll(path, "/", "_"), path: path, tests: regex})
		}
	}
	var skips []hostSkip
	if o.hostSkips != "" {
		if skips, err = readHostSkipsFile(o.hostSkips, root); err != nil {
			logf("--host-skips: %v", err)
			return 2
		}
		var missing []hostSkip
		skips, missing, err = placeInGuests(pkgs, skips)
		if err != nil {
			logf("--host-skips: %v", err)
			return 2
		}
		if len(missing) > 0 {
			logf("%d test(s) skipped on the host because its kernel lacks a feature, and no guest runs them; add each to guestPackages in vmtests/main.go:", len(missing))
			for _, s := range missing {
				logf("  %s", s)
			}
			return 1
		}
		logf("the guests run all %d test(s) the host skipped for a kernel feature", len(skips))
	}
	logs := filepath.Join(o.cache, "logs", fmt.Sprintf("%s-%d", time.Now().Format("20060102-150405"), os.Getpid()))
	if err := os.MkdirAll(logs, 0o755); err != nil {
		logf("%v", err)
		return 1
	}
	logf("building static test binaries")
	if err := buildBinaries(ctx, root, work, pkgs); err != nil {
		logf("build: %v", err)
		return 1
	}

	var results []kernelResult
	for _, spec := range specs {
		r := runKernel(ctx, o, spec, work, logs, pkgs, logf)
		results = append(results, r)
	}

	if o.bench != nil {
		return reportBench(os.Stdout, results, time.Since(start), logf)
	}
	printTable(os.Stdout, results)
	total := time.Since(start).Round(time.Second)
	logf("total %v on %d kernels", total, len(results))
	if o.jsonOut != "" {
		b, _ := json.MarshalIndent(results, "", "  ")
		if err := os.WriteFile(o.jsonOut, b, 0o644); err != nil {
			logf("write %s: %v", o.jsonOut, err)
			return 1
		}
	}
	if o.updateReadme != "" {
		if err := updateReadme(o.updateReadme, results, total); err != nil {
			logf("update %s: %v", o.updateReadme, err)
			return 1
		}
	}
	// The closing line: test counts over every guest.
	var pass, fail, skip int
	code := 0
	for _, r := range results {
		for _, p := range r.Packages {
			pass, fail, skip = pass+p.count("pass"), fail+p.count("fail"), skip+p.count("skip")
		}
		if !r.ok() {
			code = 1
			if len(r.Packages) == 0 {
				fail++ // a guest that never ran its tests is a failure too
			}
		}
	}
	if o.hostSkips != "" {
		if bad := unpassed(skips, results); len(bad) > 0 {
			code = 1
			logf("%d of the tests the host skipped for a kernel feature did not pass in a guest:", len(bad))
			for _, b := range bad {
				logf("  %s", b)
			}
		} else {
			logf("all %d test(s) the host skipped for a kernel feature passed in every guest", len(skips))
		}
	}
	fmt.Printf("vmtests: %d passed, %d failed, %d skipped\n", pass, fail, skip)
	return code
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run vmtests from inside the ccload module")
		}
		dir = parent
	}
}

// runKernel fetches, packs and boots one kernel and collects its results.
func runKernel(ctx context.Context, o options, spec kernelSpec, work, logs string, pkgs []testPackage, logf func(string, ...any)) kernelResult {
	r := kernelResult{Series: spec.series}
	t0 := time.Now()
	fail := func(err error) kernelResult {
		r.Error = err.Error()
		r.Seconds = time.Since(t0).Seconds()
		logf("kernel %s: %v", spec.series, err)
		return r
	}
	k, err := fetchKernel(ctx, o.cache, spec, logf)
	if err != nil {
		return fail(err)
	}
	r.Package, r.Release = k.pkg, k.release
	initrd := filepath.Join(work, "initrd-"+spec.series+".gz")
	if err := buildInitramfs(ctx, k, work, pkgs, o.bench, initrd); err != nil {
		return fail(fmt.Errorf("initramfs: %w", err))
	}

	logPath := filepath.Join(logs, "console-"+spec.series+".log")
	r.ConsoleLogLoc = logPath
	logFile, err := os.Create(logPath)
	if err != nil {
		return fail(err)
	}
	defer logFile.Close()
	var console io.Writer = logFile
	if o.verbose {
		console = io.MultiWriter(logFile, os.Stdout)
	}

	accel := o.accel
	if accel == "auto" {
		accel = "tcg"
		known, works := kvmVerdict(o.cache)
		if _, err := os.Stat("/dev/kvm"); err == nil && (!known || works) {
			logf("kernel %s: trying KVM", k.release)
			text, initAfter, err := bootVM(ctx, k, initrd, "kvm", o.timeout, 45*time.Second, console)
			if !errors.Is(err, errNoBoot) {
				saveKVMVerdict(o.cache, true)
				r.Accel = "kvm"
				logInitAfter(k, initAfter, logf)
				return finish(r, o, t0, text, err, logf)
			}
			saveKVMVerdict(o.cache, false)
			logf("kernel %s: KVM does not boot guests here; using TCG", k.release)
		}
	}
	r.Accel = accel
	bootTimeout := time.Duration(0)
	if accel == "tcg" {
		bootTimeout = o.bootTimeout
	}
	logf("kernel %s: booting under %s (console log: %s)", k.release, accel, logPath)
	text, initAfter, err := bootVM(ctx, k, initrd, accel, o.timeout, bootTimeout, console)
	for boot := 1; boot < maxBoots; boot++ {
		tag, what := bootFailure(text, err)
		if tag == "" || ctx.Err() != nil {
			break
		}
		// A guest that panics, that never reaches /init, or whose CPUs
		// stay stuck (errLockup) is booted again, up to maxBoots in
		// all: under TCG the emulator itself now and then breaks a
		// guest. Seen in this project's runs: a double fault in the
		// slab allocator; an "Oops: int3" in __netif_receive_skb_core, a jump
		// label caught mid-patch, in 3 of the 6.12 guest boots in
		// /var/cache/ccload-vmtests/logs by 2026-11-26, under three
		// different tests; and a 6.1 guest that printed nothing after
		// the boot loader for 13 minutes; on 2026-11-28, both CPUs of a
		// 6.1 guest stuck for minutes in kworkers during
		// TestRXTimestampsThroughFQ/bridge, which had passed in every
		// run before. On 2026-11-29, 6 of 42 boots of the 6.12 guest
		// panicked (a double fault in kmem_cache_alloc_node, whose saved
		// EFLAGS held bits of RAX, or a fault in sched_clock_cpu), four
		// of them running code from before that day's changes, and one
		// run's second boot panicked too. A panic or lockup our programs
		// cause comes again on every boot and still fails the run.
		saved := filepath.Join(logs, fmt.Sprintf("console-%s-%s%d.log", spec.series, tag, boot))
		if werr := os.WriteFile(saved, []byte(text), 0o644); werr != nil {
			return fail(fmt.Errorf("save the console of the failed boot: %w", werr))
		}
		logf("kernel %s: boot %d %s (console: %s); booting it again", k.release, boot, what, saved)
		r.Notes = append(r.Notes, fmt.Sprintf("boot %d %s (%s); the result is a later boot's", boot, what, saved))
		text, initAfter, err = bootVM(ctx, k, initrd, accel, o.timeout, bootTimeout, console)
	}
	logInitAfter(k, initAfter, logf)
	return finish(r, o, t0, text, err, logf)
}

// defaultGuestTimeout is how long a guest may run before it is taken as
// hung. The tests take one TCG guest 6 to 9 minutes on most days; in the
// fresh-clone run of 2026-12-07, on a host slower than usual, the 6.1 guest
// took 1,084 s, nine tenths of the 20 minutes this was before.
const defaultGuestTimeout = 30 * time.Minute

// maxBoots is how many times a guest is booted when its boots fail as the
// emulator now and then makes them fail (bootFailure). At the rate seen
// on 2026-11-29, about one boot of the 6.12 guest in seven, a run failed
// that way once in about fifty with two boots, and fails once in about
// 350 with three; a failure our programs cause fails every boot.
const maxBoots = 3

// logInitAfter says how long the guest took to start /init, if it did.
func logInitAfter(k *kernel, after time.Duration, logf func(string, ...any)) {
	if after > 0 {
		logf("kernel %s: /init started after %.0fs", k.release, after.Seconds())
	}
}

// bootFailure says why a failed boot is worth one more try: tag names the
// saved console ("panic" or "noboot") and what says what happened. Both
// are "" for anything else, a success included.
func bootFailure(text string, err error) (tag, what string) {
	switch {
	case err == nil:
		return "", ""
	case strings.Contains(text, "Kernel panic"):
		return "panic", "panicked"
	case errors.Is(err, errNoBoot):
		return "noboot", "did not reach /init"
	case errors.Is(err, errLockup):
		return "lockup", "locked up (a CPU stuck for minutes)"
	}
	return "", ""
}

func finish(r kernelResult, o options, t0 time.Time, text string, err error, logf func(string, ...any)) kernelResult {
	r.Seconds = time.Since(t0).Seconds()
	parseConsole(text, &r)
	if err != nil {
		r.Error = err.Error()
	}
	for _, m := range r.InsmodFailed {
		if r.Error == "" {
			r.Error = "insmod failed: " + m
		}
	}
	r = collectBench(r, o, text, logf)
	logf("kernel %s: %s", r.Release, map[bool]string{true: "ok", false: "FAILED"}[r.ok()])
	return r
}

func printTable(w io.Writer, results []kernelResult) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nKERNEL\tACCEL\tPACKAGE\tPASS\tFAIL\tSKIP\tRESULT\tTIME")
	for _, r := range results {
		if len(r.Packages) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\terror: %s\t%.0fs\n", orSeries(r), r.Accel, r.Error, r.Seconds)
			continue
		}
		for _, p := range r.Packages {
			res := "ok"
			if !r.ok() {
				res = "FAIL"
				if r.Error != "" {
					res += ": " + r.Error
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%.0fs\n", orSeries(r), r.Accel, p.Package,
				p.count("pass"), p.count("fail"), p.count("skip"), res, r.Seconds)
		}
	}
	tw.Flush()
	for _, r := range results {
		for _, n := range r.Notes {
			fmt.Fprintf(w, "  %s: note: %s\n", orSeries(r), n)
		}
		for _, p := range r.Packages {
			for _, t := range p.Tests {
				if t.Status != "pass" {
					fmt.Fprintf(w, "  %s %s %s: %s: %s\n", orSeries(r), p.Package, strings.ToUpper(t.Status), t.Name, t.Reason)
				}
			}
			if !p.Finished {
				fmt.Fprintf(w, "  %s %s: did not finish (see %s)\n", orSeries(r), p.Package, r.ConsoleLogLoc)
			}
		}
	}
}

func orSeries(r kernelResult) string {
	if r.Release != "" {
		return r.Release
	}
	return r.Series
}
