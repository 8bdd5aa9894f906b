package e2e

// The crash tests of ccload's commands (issue 15 §4): a command killed
// with SIGKILL at any moment must leave nothing that the next command
// does not clean up. After the next command there must be no stage, no
// CC of ccload's registered without a complete pin set (0 orphan
// registrations), no pin set that is incomplete or not attached, no INT or
// hop program attached without its pins, and no INT store holder that
// holds nothing.
//
// The tests run the ccload binary, as users do, with --bpffs on a bpffs
// instance of their own, so that their pins never meet the user's.
// TestKillPoints kills each command at each of its kill points
// (pin.KillPoint: the steps of its staged sequence); TestKillRandom kills
// commands after a random delay; TestKillLock checks that commands
// serialise on the lock; TestKillOnRamp does TestKillPoints's work for
// On-Ramp, on kernels with sch_fq (the vmtests guests).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
	"github.com/ccload/ccload/internal/sharedmaps"
	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/onramp"
	"github.com/ccload/ccload/qdisc"
	"github.com/ccload/ccload/telemetry/hop"
	"github.com/ccload/ccload/testbed"
)

// The CCs the crash tests attach: one alone, one that shares the INT
// store with the INT sockops program.
const (
	killCC    = "theta_powertcp"
	killINTCC = "powertcp"
)

// Bounds of the crash tests.
const (
	commandTimeout = 30 * time.Second // one ccload run
	settleTime     = 2 * time.Second  // for the kernel's deferred releases
	randomKills    = 300              // kills that must land in TestKillRandom
	// Runs TestKillRandom may make for them. Up to about half the runs
	// finish before their kill (5 runs of the test: 27 to 52 %), so 600
	// left 300 kills to chance; 1200 leave them no doubt.
	randomTries  = 1200
	randomBudget = 300 * time.Second
)

// killEnv is the ccload binary, a bpffs of the test's own and a netns
// pair, whose first namespace has the interface the hops go on.
type killEnv struct {
	bin   string
	bpffs string
	host  kernel.Host // pins at <bpffs>/ccload, as the binary's --bpffs makes them
	pair  *testbed.Pair
	iface string // the veth of pair.A
	// sockopsBefore is how many INT sockops programs were attached to the
	// cgroup root before the test (the user's, if any).
	sockopsBefore int
}

func newKillEnv(t *testing.T) *killEnv {
	t.Helper()
	testutil.RequireKernelCC(t, killCC, killINTCC)
	e := &killEnv{bin: ccloadBinary(t), pair: testnet.NewPair(t), bpffs: t.TempDir()}
	e.iface = ifaceOf(t, e.pair.A)
	// A bpffs instance of our own: unmounting it at the end drops every
	// pin the test leaves, and what they hold with them.
	if err := unix.Mount("bpf", e.bpffs, "bpf", 0, "mode=0700"); err != nil {
		t.Fatalf("mount bpffs at %s: %v", e.bpffs, err)
	}
	e.host = kernel.DefaultHost()
	e.host.BPFFS = e.bpffs
	e.sockopsBefore = e.sockopsAttached(t)
	t.Cleanup(func() {
		// Unmounted even when reset stops the test.
		defer func() {
			if err := unix.Unmount(e.bpffs, 0); err != nil {
				t.Errorf("unmount %s: %v", e.bpffs, err)
			}
		}()
		e.reset(t)
	})
	return e
}

// ccloadBinary returns the ccload binary to run: the guest's own in the
// vmtests, else one built for this test.
func ccloadBinary(t *testing.T) string {
	t.Helper()
	if os.Getenv(testutil.InVMEnv) != "" {
		return "/bin/ccload"
	}
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		if goTool, err = exec.LookPath("go"); err != nil {
			t.Fatalf("no go tool to build ccload with: %v", err)
		}
	}
	bin := filepath.Join(t.TempDir(), "ccload")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goTool, "build", "-o", bin, "github.com/ccload/ccload/cmd/ccload").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ccload: %v\n%s", err, out)
	}
	return bin
}

// runResult is how one ccload run ended.
type runResult struct {
	code   int  // exit code; -1 when killed
	killed bool // by SIGKILL
	stdout string
	stderr string
	took   time.Duration
}

func (r runResult) String() string {
	if r.killed {
		return "killed by SIGKILL"
	}
	return fmt.Sprintf("exit %d: %s%s", r.code, r.stdout, r.stderr)
}

// command returns ccload with args, on the test's bpffs, in the pair's
// first netns when it acts on an interface (perInterface), with env added
// to the environment.
func (e *killEnv) command(ctx context.Context, env []string, args ...string) *exec.Cmd {
	inPair := perInterface(args)
	args = append([]string{"--bpffs", e.bpffs, "--lock-wait", "20s"}, args...)
	var cmd *exec.Cmd
	if inPair {
		cmd = e.pair.A.Command(ctx, e.bin, args...) // nsenter execs ccload: same process
	} else {
		cmd = exec.CommandContext(ctx, e.bin, args...)
	}
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// wait waits for cmd, started at start, and says how it ended.
func wait(cmd *exec.Cmd, start time.Time, stdout, stderr *strings.Builder) runResult {
	err := cmd.Wait()
	r := runResult{took: time.Since(start), stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			r.killed = true
		}
	default:
		r.code, r.stderr = -1, r.stderr+err.Error()
	}
	return r
}

// run runs ccload to its end.
func (e *killEnv) run(t *testing.T, env []string, args ...string) runResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := e.command(ctx, env, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start ccload %s: %v", strings.Join(args, " "), err)
	}
	return wait(cmd, start, &stdout, &stderr)
}

// mustRun runs ccload and fails the test unless it exits 0.
func (e *killEnv) mustRun(t *testing.T, args ...string) {
	t.Helper()
	if r := e.run(t, nil, args...); r.code != 0 || r.killed {
		t.Fatalf("ccload %s: %v", strings.Join(args, " "), r)
	}
}

// killCase is one command of the crash tests.
type killCase struct {
	name string     // how logs name it
	prep [][]string // the commands that make the state it starts from
	args []string   // run in the pair's first netns when perInterface
	// refusal is how the command refuses, run again, when its first run
	// finished its work before it was killed: exit 1 with this in stderr
	// ("" when it succeeds again).
	refusal string
	// atomic says that the command changes state in one kernel call:
	// it has no step to kill between.
	atomic bool
}

// killCases are the commands the crash tests kill: attach, set and
// detach of a CC (registered with a link, and as before 6.4), of one that
// uses the INT store too, INT's enable (first and again) and disable, and
// an INT hop's attach and removal, with ACK padding (two sides) and
// without.
func (e *killEnv) killCases() []killCase {
	hopOn := []string{"int", "hop", "--iface", e.iface, "--rate", "1gbit"}
	hopPad := append(slices.Clone(hopOn), "--ack-padding")
	hopOff := []string{"int", "hop", "--iface", e.iface, "--off"}
	intOn := []string{"int", "enable", "--peers", "198.18.0.0/15"}
	return []killCase{
		{name: "attach " + killCC, args: []string{"attach", killCC}},
		{name: "attach " + killCC + ", legacy registration", args: []string{"--legacy-registration", "attach", killCC}},
		{name: "attach " + killINTCC, args: []string{"attach", killINTCC}},
		{name: "attach " + killINTCC + " beside INT", prep: [][]string{intOn}, args: []string{"attach", killINTCC}},
		{name: "set", prep: [][]string{{"attach", killCC}}, args: []string{"set", killCC, "gamma=0.8"}, atomic: true},
		{name: "detach " + killCC, prep: [][]string{{"attach", killCC}}, args: []string{"detach", killCC}},
		{name: "detach " + killCC + ", legacy registration", prep: [][]string{{"--legacy-registration", "attach", killCC}}, args: []string{"detach", killCC}},
		{name: "detach " + killINTCC, prep: [][]string{{"attach", killINTCC}}, args: []string{"detach", killINTCC}},
		{name: "int enable", args: intOn},
		{name: "int enable again", prep: [][]string{intOn}, args: []string{"int", "enable", "--peers", "198.18.0.0/15,fd00::/8"}},
		{name: "int disable", prep: [][]string{intOn}, args: []string{"int", "disable"}},
		{name: "int disable beside " + killINTCC, prep: [][]string{intOn, {"attach", killINTCC}}, args: []string{"int", "disable"}},
		{name: "int hop", args: hopOn, refusal: "an INT hop is already attached to " + e.iface},
		{name: "int hop --ack-padding", args: hopPad, refusal: "an INT hop is already attached to " + e.iface},
		{name: "int hop --off", prep: [][]string{hopOn}, args: hopOff},
		{name: "int hop --off, ACK padding", prep: [][]string{hopPad}, args: hopOff},
	}
}

// prepare resets everything and makes the state c starts from.
func (e *killEnv) prepare(t *testing.T, c killCase) {
	t.Helper()
	e.reset(t)
	for _, p := range c.prep {
		e.mustRun(t, p...)
	}
}

// perInterface reports whether the command args acts on an interface:
// an INT hop, On-Ramp. It runs in the pair's first netns.
func perInterface(args []string) bool {
	return slices.Contains(args, "hop") || slices.Contains(args, "onramp")
}

// next runs the next command after a kill: c's command again, which
// must succeed, or refuse as c says it does once its work is done.
func (e *killEnv) next(t *testing.T, c killCase) []string {
	t.Helper()
	r := e.run(t, nil, c.args...)
	if r.code == 0 && !r.killed || c.refusal != "" && r.code == 1 && strings.Contains(r.stderr, c.refusal) {
		return nil
	}
	return []string{fmt.Sprintf("the next command, %s, failed: %v", c.name, r)}
}

// killTrace is what a run of a command with KillTraceEnv set shows.
type killTrace struct {
	points []string        // its kill points, in order
	at     []time.Duration // when it passed each, from its start
	took   time.Duration
}

// window returns when the run passed its first kill point, and a moment
// after the last: where its staged sequence ran.
func (tr killTrace) window() (from, to time.Duration) {
	if len(tr.points) == 0 {
		return 0, tr.took
	}
	from, last := tr.at[0], tr.at[len(tr.at)-1]
	return from, last + (tr.took-last)/2
}

// stampWriter keeps what a command writes, and when each kill point's
// line came.
type stampWriter struct {
	start time.Time
	mu    sync.Mutex
	buf   strings.Builder
	at    []time.Duration
}

func (w *stampWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for range strings.Count(string(p), "killpoint ") {
		w.at = append(w.at, time.Since(w.start))
	}
	return w.buf.Write(p)
}

// killPoints runs c once, listing the kill points it passes and when.
func (e *killEnv) killPoints(t *testing.T, c killCase) killTrace {
	t.Helper()
	e.prepare(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := e.command(ctx, []string{pin.KillTraceEnv + "=1"}, c.args...)
	var stdout strings.Builder
	stderr := &stampWriter{start: time.Now()}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start ccload %s: %v", c.name, err)
	}
	var tr killTrace
	err := cmd.Wait()
	tr.took = time.Since(stderr.start)
	if err != nil {
		t.Fatalf("%s: %v: %s%s", c.name, err, stdout.String(), stderr.buf.String())
	}
	i := 0
	for _, line := range strings.Split(stderr.buf.String(), "\n") {
		name, ok := strings.CutPrefix(line, "killpoint ")
		if !ok {
			continue
		}
		at := stderr.at[min(i, len(stderr.at)-1)]
		i++
		if slices.Contains(tr.points, name) {
			// KillAtEnv stops at the first one only.
			t.Errorf("%s passes kill point %s twice; only the first can be tested", c.name, name)
			continue
		}
		tr.points, tr.at = append(tr.points, name), append(tr.at, at)
	}
	return tr
}

// killTally counts what a crash test did, for its closing log line.
type killTally struct {
	points, kills, missed, finished, failures, settled int
}

// checkAfter checks the invariants, failing t with what is wrong, and
// counts the failure.
func (e *killEnv) checkAfter(t *testing.T, tally *killTally, what string, problems []string) {
	t.Helper()
	problems = append(problems, e.settledCheck(t, tally)...)
	if len(problems) > 0 {
		tally.failures++
		t.Errorf("after %s:\n  %s", what, strings.Join(problems, "\n  "))
	}
}

// settledCheck runs check until it passes or settleTime has gone: the
// kernel releases a link whose last reference was its pin a moment after
// the pin goes. It counts the checks that needed the wait.
func (e *killEnv) settledCheck(t *testing.T, tally *killTally) []string {
	t.Helper()
	deadline := time.Now().Add(settleTime)
	for first := true; ; first = false {
		problems := e.check(t)
		if len(problems) == 0 {
			if !first {
				tally.settled++
			}
			return nil
		}
		if time.Now().After(deadline) {
			return problems
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKillPoints kills each command at each of its kill points, then
// runs the same command again and checks that it succeeds and leaves no
// stale state.
func TestKillPoints(t *testing.T) {
	e := newKillEnv(t)
	tally := e.killAtEachPoint(t, e.killCases(), nil)
	t.Logf("kill points: %d commands, %d points enumerated, %d kills, %d points not reached, %d invariant failures (%d checks passed only after the kernel's deferred release)",
		len(e.killCases()), tally.points, tally.kills, tally.missed, tally.failures, tally.settled)
}

// killAtEachPoint lists the kill points of each case, and kills its
// command at each one, from the state its prep makes; then it runs the
// command again and checks the invariants, and those extra returns. It
// resets everything at the end.
func (e *killEnv) killAtEachPoint(t *testing.T, cases []killCase, extra func() []string) killTally {
	t.Helper()
	var tally killTally
	for _, c := range cases {
		points := e.killPoints(t, c).points
		if len(points) == 0 && !c.atomic {
			t.Errorf("%s passes no kill point", c.name)
		}
		t.Logf("%s: %d kill points: %s", c.name, len(points), strings.Join(points, " "))
		tally.points += len(points)
		for _, p := range points {
			e.prepare(t, c)
			r := e.run(t, []string{pin.KillAtEnv + "=" + p}, c.args...)
			if !r.killed {
				tally.missed++
				t.Errorf("%s with %s=%s was not killed: %v", c.name, pin.KillAtEnv, p, r)
				continue
			}
			tally.kills++
			problems := e.next(t, c)
			if extra != nil {
				problems = append(problems, extra()...)
			}
			e.checkAfter(t, &tally, fmt.Sprintf("%s killed at %s, then run again", c.name, p), problems)
		}
	}
	e.reset(t)
	return tally
}

// TestKillRandom kills commands after a random delay, at least
// randomKills times, and checks after the next command as TestKillPoints
// does. The delay is drawn from the length of a timed run, or from where
// that run passed its kill points. CCLOAD_KILL_SEED sets the seed.
func TestKillRandom(t *testing.T) {
	e := newKillEnv(t)
	cases := e.killCases()
	traces := make([]killTrace, len(cases))
	for i, c := range cases {
		traces[i] = e.killPoints(t, c)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CCLOAD_KILL_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("CCLOAD_KILL_SEED=%s: %v", s, err)
		}
	}
	t.Logf("seed %d (CCLOAD_KILL_SEED=%d repeats this run)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	var tally killTally
	perCase := make([]int, len(cases))
	// Where the kills landed: after which kill point of which command.
	landed := map[string]int{}
	deadline := time.Now().Add(randomBudget)
	tries := 0
	for ; tally.kills < randomKills && tries < randomTries && time.Now().Before(deadline); tries++ {
		i := rng.IntN(len(cases))
		c := cases[i]
		// Half the kills anywhere in a run; half where its staged
		// sequence runs, which is short beside loading its programs.
		from, to := time.Duration(0), traces[i].took
		if rng.IntN(2) == 1 {
			from, to = traces[i].window()
		}
		delay := from + time.Duration(rng.Int64N(int64(to-from)+1))
		e.prepare(t, c)
		r := e.killAfter(t, c, delay)
		if !r.killed {
			if r.code != 0 {
				t.Errorf("%s, to be killed after %v, failed by itself: %v", c.name, delay, r)
			}
			tally.finished++
			continue
		}
		tally.kills++
		perCase[i]++
		last := "start"
		for _, line := range strings.Split(r.stderr, "\n") {
			if p, ok := strings.CutPrefix(line, "killpoint "); ok {
				last = p
			}
		}
		landed[c.name+" after "+last]++
		e.checkAfter(t, &tally, fmt.Sprintf("%s killed after %v (its last kill point: %s), then run again", c.name, delay, last), e.next(t, c))
	}
	e.reset(t)
	var spread []string
	for i, c := range cases {
		spread = append(spread, fmt.Sprintf("%s %d", c.name, perCase[i]))
	}
	t.Logf("random kills: seed %d, %d runs, %d kills, %d runs finished before their kill, %d invariant failures (%d checks passed only after the kernel's deferred release); kills per command: %s",
		seed, tries, tally.kills, tally.finished, tally.failures, tally.settled, strings.Join(spread, ", "))
	where := make([]string, 0, len(landed))
	for k, n := range landed {
		where = append(where, fmt.Sprintf("%s: %d", k, n))
	}
	slices.Sort(where)
	t.Logf("the kills landed in %d distinct steps (\"after start\": before the command's first kill point): %s", len(landed), strings.Join(where, "; "))
	if tally.kills < randomKills {
		t.Errorf("%d random kills in %d runs, want %d", tally.kills, tries, randomKills)
	}
}

// killAfter starts c's command and SIGKILLs it after delay, unless it has
// finished by then.
func (e *killEnv) killAfter(t *testing.T, c killCase, delay time.Duration) runResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	// The trace tells where the kill landed.
	cmd := e.command(ctx, []string{pin.KillTraceEnv + "=1"}, c.args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start ccload %s: %v", c.name, err)
	}
	done := make(chan runResult, 1)
	go func() { done <- wait(cmd, start, &stdout, &stderr) }()
	select {
	case r := <-done:
		return r
	case <-time.After(delay):
	}
	_ = cmd.Process.Signal(syscall.SIGKILL) // our child, by its PID
	return <-done
}

// TestKillLock checks that ccload's commands serialise on the pin root's
// lock: a command waits while the lock is held and says so clearly when
// its wait ends, and commands started together all succeed and leave a
// consistent state.
func TestKillLock(t *testing.T) {
	e := newKillEnv(t)
	held, err := pin.AcquireLock(e.host.PinRoot(), 0)
	if err != nil {
		t.Fatal(err)
	}
	r := e.run(t, nil, "--lock-wait", "200ms", "attach", killCC)
	if r.code != 1 || !strings.Contains(r.stderr, "held the lock on "+e.host.PinRoot()) ||
		!strings.Contains(r.stderr, "fix: wait for it to finish, or wait longer (ccload --lock-wait)") {
		t.Errorf("attach while the lock is held: %v", r)
	}

	// A command that may wait does, and changes nothing meanwhile.
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := e.command(ctx, nil, "attach", killCC)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan runResult, 1)
	go func() { done <- wait(cmd, start, &stdout, &stderr) }()
	select {
	case r := <-done:
		t.Errorf("attach ended while the lock was held: %v", r)
	case <-time.After(500 * time.Millisecond):
	}
	if testutil.Registered(t, killCC) {
		t.Errorf("%s was registered while the lock was held", killCC)
	}
	held.Release()
	if r := <-done; r.code != 0 || !testutil.Registered(t, killCC) {
		t.Errorf("attach once the lock was released: %v", r)
	}

	// Commands started together: each finds the state the one before it
	// left, whatever their order, so every one succeeds.
	var tally killTally
	mix := [][]string{{"attach", killCC}, {"detach", killCC}, {"attach", killINTCC}, {"detach", killINTCC},
		{"int", "enable", "--peers", "198.18.0.0/15"}, {"int", "disable"}, {"attach", killCC}, {"detach", killINTCC}}
	for round := range 3 {
		var wg sync.WaitGroup
		results := make([]runResult, len(mix))
		for i, args := range mix {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = e.run(t, nil, args...)
			}()
		}
		wg.Wait()
		for i, r := range results {
			if r.code != 0 || r.killed {
				t.Errorf("round %d: ccload %s, run beside %d others: %v", round, strings.Join(mix[i], " "), len(mix)-1, r)
			}
		}
		e.checkAfter(t, &tally, fmt.Sprintf("round %d of %d commands at once", round, len(mix)), nil)
	}
}

// TestKillOnRamp kills `onramp enable` and `onramp disable` at each of
// their kill points, as TestKillPoints does the other commands, and runs
// the next command: the same one again, and after a killed enable also a
// disable; an enable that upgrades pins of another build is killed too.
// After the next command, On-Ramp is either fully enabled (attached, with
// its fq root and the sockops program, holders that match) or fully gone
// (no pins, no On-Ramp program alive, the root qdisc as it was). On-Ramp
// needs sch_fq: it runs in the vmtests guests.
//
// One enable passes the generic kill points of pin.Stage (stage-created,
// ...) once per stage it builds (the clock map's, the interface's, the
// sockops program's); CCLOAD_KILL_AT stops at the first, and On-Ramp's
// own points after each step of the later stages cover those.
func TestKillOnRamp(t *testing.T) {
	e := newKillEnv(t)
	rootBefore := e.rootQdisc(t)
	on := []string{"onramp", "enable", "--iface", e.iface, "--peers", "198.18.0.0/15"}
	off := []string{"onramp", "disable", "--iface", e.iface}
	if r := e.run(t, nil, on...); r.code != 0 {
		if strings.Contains(r.stderr, "CONFIG_NET_SCH_FQ") {
			testutil.SkipKernelLacks(t, "sch_fq (CONFIG_NET_SCH_FQ)")
		}
		t.Fatalf("onramp enable: %v", r)
	}
	e.mustRun(t, off...)
	// An upgrade: pins without object records are another build's (one
	// from before the records), which enable swaps in place.
	forgetBuild := func() {
		dirs, _ := os.ReadDir(filepath.Join(e.host.PinRoot(), "onramp"))
		for _, d := range dirs {
			_ = os.Remove(filepath.Join(e.host.PinRoot(), "onramp", d.Name(), "object"))
		}
	}
	cases := []struct {
		killCase
		setup func()   // run after prep
		next  []string // the command run after the kill
	}{
		{killCase{name: "onramp enable", args: on}, nil, on},
		{killCase{name: "onramp enable, then disable", args: on}, nil, off},
		{killCase{name: "onramp enable again", prep: [][]string{on}, args: append(slices.Clone(on[:len(on)-1]), "198.18.0.0/16,fd00::/8")}, nil, on},
		{killCase{name: "onramp enable, upgrading", prep: [][]string{on}, args: on}, forgetBuild, on},
		{killCase{name: "onramp disable", prep: [][]string{on}, args: off}, nil, off},
	}
	var tally killTally
	for _, c := range cases {
		points, repeated := e.onRampPoints(t, c.killCase, c.setup)
		t.Logf("%s: %d kill points: %s (passed more than once, killed at the first only: %s)",
			c.name, len(points), strings.Join(points, " "), strings.Join(repeated, " "))
		if len(points) == 0 {
			t.Errorf("%s passes no kill point", c.name)
		}
		tally.points += len(points)
		wantOn := c.next[1] == "enable"
		for _, p := range points {
			e.prepare(t, c.killCase)
			if c.setup != nil {
				c.setup()
			}
			r := e.run(t, []string{pin.KillAtEnv + "=" + p}, c.args...)
			if !r.killed {
				tally.missed++
				t.Errorf("%s with %s=%s was not killed: %v", c.name, pin.KillAtEnv, p, r)
				continue
			}
			tally.kills++
			var problems []string
			if r := e.run(t, nil, c.next...); r.code != 0 || r.killed {
				problems = append(problems, fmt.Sprintf("the next command, %s, failed: %v", strings.Join(c.next, " "), r))
			}
			problems = append(problems, e.onRampCheck(t, rootBefore, wantOn)...)
			e.checkAfter(t, &tally, fmt.Sprintf("%s killed at %s, then %s", c.name, p, strings.Join(c.next, " ")), problems)
		}
	}
	e.reset(t)
	t.Logf("On-Ramp kill points: %d commands, %d points enumerated, %d kills, %d points not reached, %d invariant failures (%d checks passed only after the kernel's deferred release)",
		len(cases), tally.points, tally.kills, tally.missed, tally.failures, tally.settled)
}

// onRampPoints runs c once from the state its prep (then setup, if not
// nil) makes, and returns the kill points it passes, in order, each once,
// and those it passes more than once.
func (e *killEnv) onRampPoints(t *testing.T, c killCase, setup func()) (points, repeated []string) {
	t.Helper()
	e.prepare(t, c)
	if setup != nil {
		setup()
	}
	r := e.run(t, []string{pin.KillTraceEnv + "=1"}, c.args...)
	if r.code != 0 || r.killed {
		t.Fatalf("%s: %v", c.name, r)
	}
	for _, line := range strings.Split(r.stderr, "\n") {
		name, ok := strings.CutPrefix(line, "killpoint ")
		switch {
		case !ok:
		case !slices.Contains(points, name):
			points = append(points, name)
		case !slices.Contains(repeated, name):
			repeated = append(repeated, name)
		}
	}
	return points, repeated
}

// rootQdisc says what the root qdisc of the pair's interface is.
func (e *killEnv) rootQdisc(t *testing.T) string {
	t.Helper()
	var kind string
	if err := e.pair.A.Do(func() (err error) { kind, err = fqOrNot(e.iface); return err }); err != nil {
		t.Fatalf("inspect the root qdisc of %s: %v", e.iface, err)
	}
	return kind
}

// fqOrNot says whether the root qdisc of iface, in the calling thread's
// netns, is fq (or mq of fqs): "fq" or "not fq".
func fqOrNot(iface string) (string, error) {
	_, fq, err := qdisc.InspectFQRoot(iface)
	if fq {
		return "fq", err
	}
	return "not fq", err
}

// onRampCheck checks On-Ramp's part of the invariants once the next
// command has run: with wantOn, On-Ramp runs on the pair's interface,
// complete (both programs attached, the fq root, the sockops program
// attached to the cgroup root once, the interface its only holder);
// without, nothing of it is left (no pins, no On-Ramp program alive in the
// kernel, the root qdisc as it was before the test).
func (e *killEnv) onRampCheck(t *testing.T, rootBefore string, wantOn bool) []string {
	t.Helper()
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	dir := filepath.Join(e.host.PinRoot(), "onramp")
	var sts []onramp.Status
	err := e.pair.A.Do(func() (err error) {
		if sts, err = onramp.New(e.host).Status(); err != nil {
			return err
		}
		now, err := fqOrNot(e.iface)
		switch {
		case err != nil:
			return err
		case wantOn && now != "fq":
			bad("On-Ramp is enabled on %s, whose root qdisc is not fq", e.iface)
		case !wantOn && now != rootBefore:
			bad("On-Ramp is disabled, and the root qdisc of %s is %s, %s before", e.iface, now, rootBefore)
		}
		if !wantOn {
			return nil
		}
		ifi, err := net.InterfaceByName(e.iface)
		if err != nil {
			return err
		}
		for _, side := range []struct {
			attach ebpf.AttachType
			prog   string
		}{{ebpf.AttachTCXEgress, "onramp_egress"}, {ebpf.AttachTCXIngress, "onramp_ingress"}} {
			n, err := programsAttached(link.QueryOptions{Target: ifi.Index, Attach: side.attach}, side.prog)
			if err == nil && n != 1 {
				bad("%d %s programs are attached to %s by TCX, want 1", n, side.prog, e.iface)
			}
		}
		return nil
	})
	if err != nil {
		bad("read On-Ramp's state: %v", err)
	}
	holders, _ := os.ReadDir(filepath.Join(dir, "holders"))
	sockops := e.programsOnCgroupRoot(t, "onramp_sockops")
	if wantOn {
		switch {
		case len(sts) != 1:
			bad("want On-Ramp on %s, status lists %d interfaces: %+v", e.iface, len(sts), sts)
		case !sts[0].Attached:
			bad("On-Ramp on %s is pinned at %s but not attached: %v", sts[0].Iface, sts[0].PinDir, sts[0].Notes)
		case sts[0].Qdisc == nil:
			bad("On-Ramp on %s has no fq root: %v", sts[0].Iface, sts[0].Notes)
		case sts[0].UpgradeAvailable:
			bad("On-Ramp on %s runs another build than the binary's", sts[0].Iface)
		}
		if len(sts) == 1 && (len(holders) != 1 || holders[0].Name() != filepath.Base(sts[0].PinDir)) {
			bad("the holders of the sockops program are %v, want only %s", names(holders), filepath.Base(sts[0].PinDir))
		}
		if sockops != 1 {
			bad("%d onramp_sockops programs are attached to the cgroup root, want 1", sockops)
		}
		return problems
	}
	if len(sts) > 0 {
		bad("On-Ramp is disabled, and status lists %+v", sts)
	}
	if left, _ := os.ReadDir(dir); len(left) > 0 {
		bad("On-Ramp is disabled, and %v are left in %s", names(left), dir)
	}
	if sockops != 0 {
		bad("On-Ramp is disabled, and %d onramp_sockops programs are attached to the cgroup root", sockops)
	}
	// The kernel frees a program a moment after its last reference.
	alive := onramp.ProgramsAlive()
	for deadline := time.Now().Add(settleTime); len(alive) > 0 && time.Now().Before(deadline); alive = onramp.ProgramsAlive() {
		time.Sleep(20 * time.Millisecond)
	}
	if len(alive) > 0 {
		bad("On-Ramp is disabled, and the kernel still runs %v", alive)
	}
	return problems
}

// programsOnCgroupRoot counts the programs called name attached to the
// cgroup root as sockops programs.
func (e *killEnv) programsOnCgroupRoot(t *testing.T, name string) int {
	t.Helper()
	cg, err := kernel.Cgroup2Root()
	if err != nil {
		t.Fatalf("find the cgroup2 root: %v", err)
	}
	f, err := os.Open(cg)
	if err != nil {
		t.Fatalf("open %s: %v", cg, err)
	}
	defer f.Close()
	n, err := programsAttached(link.QueryOptions{Target: int(f.Fd()), Attach: ebpf.AttachCGroupSockOps}, name)
	if err != nil {
		t.Fatalf("list the sockops programs of %s: %v", cg, err)
	}
	return n
}

// reset removes everything the commands made, through the commands, and
// fails t if anything is left.
func (e *killEnv) reset(t *testing.T) {
	t.Helper()
	root := e.host.PinRoot()
	for _, cc := range []string{killCC, killINTCC} {
		if kernel.Exists(filepath.Join(root, cc)) || testutil.Registered(t, cc) {
			e.mustRun(t, "detach", cc)
		}
	}
	if kernel.Exists(filepath.Join(root, "int")) {
		e.mustRun(t, "int", "disable")
	}
	if hops, _ := os.ReadDir(filepath.Join(root, "hop")); len(hops) > 0 {
		e.mustRun(t, "int", "hop", "--iface", e.iface, "--off")
	}
	if kernel.Exists(filepath.Join(root, "onramp")) {
		e.mustRun(t, "onramp", "disable", "--iface", e.iface)
	}
	entries, _ := os.ReadDir(root)
	for _, en := range entries {
		if en.Name() == "hop" || en.Name() == "clock" {
			continue // empty, or the clock map of the pair's netns
		}
		t.Fatalf("%s is left in %s after every detach and disable", en.Name(), root)
	}
}

// check returns what is wrong with the state the commands left: the
// invariants of the crash tests.
func (e *killEnv) check(t *testing.T) []string {
	t.Helper()
	root := e.host.PinRoot()
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	// No stage: every one belonged to a command that is gone.
	for _, dir := range []string{root, filepath.Join(root, "clock")} {
		entries, _ := os.ReadDir(dir)
		for _, en := range entries {
			if strings.HasPrefix(en.Name(), "staging-") {
				bad("stage %s is left", filepath.Join(dir, en.Name()))
			}
		}
	}

	// CCs: a pin directory is complete and registered, and a CC of ours
	// is registered only with its pins.
	for _, cc := range []string{killCC, killINTCC} {
		dir := filepath.Join(root, cc)
		reg := testutil.Registered(t, cc)
		switch {
		case kernel.Exists(dir):
			if !kernel.Exists(filepath.Join(dir, "link")) && !kernel.Exists(filepath.Join(dir, "ops")) {
				bad("%s has no registration pinned (link or ops)", dir)
			}
			for _, m := range []string{"params", "stats"} {
				if !kernel.Exists(filepath.Join(dir, m)) {
					bad("%s lacks its %s map", dir, m)
				}
			}
			if !reg {
				bad("%s is pinned but not registered", cc)
			}
		case reg:
			bad("orphan registration: %s is registered, and not pinned", cc)
		}
	}

	// INT: complete pins, and its program attached only with them.
	intDir := filepath.Join(root, "int")
	intOn := kernel.Exists(intDir)
	if intOn {
		for _, p := range []string{"link", "config", "peers_v4", "peers_v6", "stats"} {
			if !kernel.Exists(filepath.Join(intDir, p)) {
				bad("%s lacks %s", intDir, p)
			}
		}
	}
	want := e.sockopsBefore
	if intOn {
		want++
	}
	if n := e.sockopsAttached(t); n != want {
		bad("%d INT sockops programs are attached to the cgroup root, want %d (%d before the test, INT enabled: %v)", n, want, e.sockopsBefore, intOn)
	}

	// The shared maps (the INT store, On-Ramp's holds and room): held
	// only by what is pinned, and by all of that.
	holders, _ := os.ReadDir(filepath.Join(root, "shared", "holders"))
	held := names(holders)
	if kernel.Exists(filepath.Join(root, "shared")) {
		if !slices.ContainsFunc(sharedmaps.Names(), func(m string) bool { return kernel.Exists(filepath.Join(root, "shared", m)) }) {
			bad("the shared maps' directory is left without a map")
		}
		if len(held) == 0 {
			bad("shared maps are pinned, and nothing holds them")
		}
	}
	for _, h := range held {
		owner := filepath.Join(root, h)
		if h == "int" {
			owner = intDir
		}
		if !kernel.Exists(owner) {
			bad("%s holds the shared maps, and is not pinned", h)
		}
	}
	for owner, h := range map[string]string{
		intDir: "int", filepath.Join(root, killINTCC): killINTCC, filepath.Join(root, killCC): killCC,
		filepath.Join(root, "onramp"): "onramp",
	} {
		if kernel.Exists(owner) && !slices.Contains(held, h) {
			bad("%s is pinned, and not among the shared maps' holders %v", h, held)
		}
	}

	// Hops: each complete and attached, and no hop program without pins.
	problems = append(problems, e.checkHops(t)...)
	return problems
}

// checkHops checks the hops of the pair's first netns, the only ones the
// tests make.
func (e *killEnv) checkHops(t *testing.T) []string {
	t.Helper()
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	dirs, _ := os.ReadDir(filepath.Join(e.host.PinRoot(), "hop"))
	err := e.pair.A.Do(func() error {
		hops, err := hop.NewPins(e.host).List()
		if err != nil {
			return err
		}
		if len(hops) != len(dirs) {
			bad("%d hop directories %v, and %d hops in the test's netns", len(dirs), names(dirs), len(hops))
		}
		padded := 0
		for _, h := range hops {
			if !h.Attached {
				bad("the hop %s is not attached: %v", h.PinDir, h.Notes)
			}
			pins := []string{"hop_config", "hop_flows", "hop_queue", "hop_stats", "tc_egress"}
			if h.ACKPadding {
				pins = append(pins, "tc_ingress")
				padded++
			}
			for _, p := range pins {
				if !kernel.Exists(filepath.Join(h.PinDir, p)) {
					bad("%s lacks %s", h.PinDir, p)
				}
			}
		}
		ifi, err := net.InterfaceByName(e.iface)
		if err != nil {
			return err
		}
		for _, side := range []struct {
			attach ebpf.AttachType
			prog   string
			want   int
		}{{ebpf.AttachTCXEgress, "int_hop", len(hops)}, {ebpf.AttachTCXIngress, "int_hop_ack", padded}} {
			n, err := programsAttached(link.QueryOptions{Target: ifi.Index, Attach: side.attach}, side.prog)
			if err != nil {
				continue // no TCX: the hops use clsact, and their pins tell
			}
			if n != side.want {
				bad("%d %s programs are attached to %s, want %d", n, side.prog, e.iface, side.want)
			}
		}
		return nil
	})
	if err != nil {
		bad("inspect the hops: %v", err)
	}
	return problems
}

// sockopsAttached counts the INT sockops programs attached to the cgroup
// root.
func (e *killEnv) sockopsAttached(t *testing.T) int {
	t.Helper()
	cg, err := kernel.Cgroup2Root()
	if err != nil {
		t.Fatalf("find the cgroup2 root: %v", err)
	}
	f, err := os.Open(cg)
	if err != nil {
		t.Fatalf("open %s: %v", cg, err)
	}
	defer f.Close()
	n, err := programsAttached(link.QueryOptions{Target: int(f.Fd()), Attach: ebpf.AttachCGroupSockOps}, "int_sockops")
	if err != nil {
		t.Fatalf("list the sockops programs of %s: %v", cg, err)
	}
	return n
}

// programsAttached counts the programs called name that q finds.
func programsAttached(q link.QueryOptions, name string) (int, error) {
	res, err := link.QueryPrograms(q)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range res.Programs {
		prog, err := ebpf.NewProgramFromID(p.ID)
		if err != nil {
			continue
		}
		info, err := prog.Info()
		prog.Close()
		if err == nil && info.Name == name {
			n++
		}
	}
	return n, nil
}

// names lists the names of entries.
func names(entries []os.DirEntry) []string {
	out := []string{}
	for _, en := range entries {
		out = append(out, en.Name())
	}
	return out
}
