package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/tracebuf"
	"github.com/ccload/ccload/testbed"
)

// The clock benchmark's reference is ptp4l from Debian's linuxptp (checked
// with 3.1.1). Both ends use software timestamps, which veth supports
// (`ethtool -T` lists software-transmit and software-receive), and
// free_running 1, so neither ever adjusts CLOCK_REALTIME, which every netns
// host shares. With one kernel clock on both sides the true offset is 0
// and every offset the slave reports is its error.
//
// Multicast does not cross the router netns, so the slave finds the master
// in a unicast_master_table and negotiates unicast Announce, Sync and
// Delay_Resp, which the master grants because of unicast_listen.
//
// A free-running slave never locks: its servo state stays s0 and the port
// stays UNCALIBRATED. It still measures, and it prints one "master offset"
// line per frequency-estimation interval (freq_est_interval, at least 0,
// i.e. 1 s), each the offset of the Sync that closed the interval, computed
// with the filtered path delay. summary_interval equal to logSyncInterval
// makes it print every such line rather than an rms summary.
const (
	// ptp4lLogSyncInterval is log2 of the Sync and Delay_Req interval:
	// 16 of each per second.
	ptp4lLogSyncInterval = -4
	// ptp4lLogAnnounceInterval is log2 of the Announce interval. A quarter
	// of a second lets the master take its role and the slave qualify it
	// within about 2 s of starting.
	ptp4lLogAnnounceInterval = -2
	// ptp4lMasterAnnounceTimeout is how many Announce intervals the master
	// listens before it becomes master (ptp4l's default, 3).
	ptp4lMasterAnnounceTimeout = 3
	// ptp4lSlaveAnnounceTimeout is how many Announce intervals without an
	// Announce the slave tolerates before it drops the master: 2 s, so that
	// a busy machine does not make it start over.
	ptp4lSlaveAnnounceTimeout = 8
	// ptp4lMasterTable is the id of the slave's unicast_master_table.
	ptp4lMasterTable = 1
)

const (
	// ptp4lReadyTimeout bounds how long StartPTP4L waits for each process
	// to initialise its port.
	ptp4lReadyTimeout = 10 * time.Second
	// ptp4lStopTimeout is how long a process gets to exit after SIGTERM,
	// and then after SIGKILL.
	ptp4lStopTimeout = 3 * time.Second
	// ptp4lTailLines is how many of a process's last lines of stdout and
	// of stderr an error quotes.
	ptp4lTailLines = 10
	// ptp4lReadyLine is what ptp4l prints once its port is initialised.
	ptp4lReadyLine = "INITIALIZING to LISTENING on INIT_COMPLETE"
)

// ptp4lInstallFix is the fix for a missing ptp4l, which the CLI prints
// on its fix: line.
const ptp4lInstallFix = "install Debian's linuxptp: apt-get install linuxptp"

// PTPSample is one line of the ptp4l slave's servo output.
type PTPSample struct {
	// At is the time of the line since the slave started, to the
	// millisecond ptp4l prints.
	At time.Duration
	// OffsetNs is the "master offset" in ns: the slave's clock minus the
	// master's, as ptp4l reports it.
	OffsetNs int64
	// PathDelayNs is the "path delay" in ns, the filtered one-way delay.
	PathDelayNs int64
	// State is the servo state: s0 (unlocked), s1 (clock stepped), s2
	// (locked). A free-running slave stays in s0.
	State string
}

// PTP4L is a running ptp4l master/slave pair on two testbed hosts.
type PTP4L struct {
	ctx       context.Context
	dir       string        // the temp dir with the configs and UNIX sockets
	slaveMono time.Duration // CLOCK_MONOTONIC just before the slave started
	master    *ptp4lProc
	slave     *ptp4lProc

	mu      sync.Mutex
	samples []PTPSample

	stopOnce sync.Once
	stopErr  error
}

// StartPTP4L starts ptp4l as a unicast UDPv4 master on master (interface
// masterIface, address masterAddr) and a slave on slave (interface
// slaveIface) that takes masterAddr from its unicast_master_table. Both use
// software timestamping and free_running 1, so nothing steps or slews the
// shared clock, and print their state to stdout, the slave one servo line a
// second (see PTPSample). The config files, and the UNIX sockets ptp4l
// opens, are in a temp dir that Stop removes. The processes run inside the
// hosts' netns (testbed.Host.Command).
//
// StartPTP4L returns once both ports have initialised; the slave's first
// sample follows about 3 s later, once it has qualified the master and
// been granted Sync. When ptp4l is not installed it fails with a
// *kernel.Error whose Fix says to install linuxptp; when a process exits
// or does not initialise, the error quotes its last lines of output. When ctx is done the processes get
// SIGTERM, and SIGKILL if they outlive it by a few seconds; Stop must still
// be called.
func StartPTP4L(ctx context.Context, master *testbed.Host, masterIface string, masterAddr netip.Addr, slave *testbed.Host, slaveIface string) (_ *PTP4L, err error) {
	masterAddr = masterAddr.Unmap()
	if !masterAddr.Is4() {
		return nil, fmt.Errorf("start ptp4l: master address %s is not IPv4; the runner uses the UDPv4 transport", masterAddr)
	}
	bin, err := ptp4lPath()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ccload-ptp4l-")
	if err != nil {
		return nil, fmt.Errorf("start ptp4l: %w", err)
	}
	p := &PTP4L{ctx: ctx, dir: dir}
	defer func() {
		if err != nil {
			if cerr := p.shutdown(false); cerr != nil {
				err = fmt.Errorf("%w\n(and while cleaning up: %v)", err, cerr)
			}
		}
	}()

	masterCfg := filepath.Join(dir, "master.cfg")
	slaveCfg := filepath.Join(dir, "slave.cfg")
	if err := os.WriteFile(masterCfg, []byte(ptp4lMasterConfig(masterIface, filepath.Join(dir, "master.sock"))), 0o644); err != nil {
		return nil, fmt.Errorf("start ptp4l: %w", err)
	}
	if err := os.WriteFile(slaveCfg, []byte(ptp4lSlaveConfig(slaveIface, masterAddr, filepath.Join(dir, "slave.sock"))), 0o644); err != nil {
		return nil, fmt.Errorf("start ptp4l: %w", err)
	}

	if p.master, err = startPTP4LProc(ctx, "master", master, bin, masterCfg, nil); err != nil {
		return nil, err
	}
	if err := p.master.waitReady(ctx); err != nil {
		return nil, err
	}
	// CLOCK_MONOTONIC is the clock of the times ptp4l prints in its brackets.
	if p.slaveMono, err = tracebuf.MonotonicNow(); err != nil {
		return nil, fmt.Errorf("start ptp4l slave: read CLOCK_MONOTONIC: %w", err)
	}
	if p.slave, err = startPTP4LProc(ctx, "slave", slave, bin, slaveCfg, p.addLine); err != nil {
		return nil, err
	}
	if err := p.slave.waitReady(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// ptp4lDirs are where Debian installs ptp4l, searched after $PATH: root's
// PATH has /usr/sbin, a user's (under sudo, say) may not.
var ptp4lDirs = []string{"/usr/sbin", "/sbin"}

// ptp4lPath finds the ptp4l binary.
func ptp4lPath() (string, error) {
	if path, err := exec.LookPath("ptp4l"); err == nil {
		return path, nil
	}
	for _, dir := range ptp4lDirs {
		path := filepath.Join(dir, "ptp4l")
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
	}
	return "", kernel.NewError(kernel.KindUnknown, ptp4lInstallFix, nil,
		"ptp4l is not installed: Debian's linuxptp provides it, and it is not in $PATH or in %s", strings.Join(ptp4lDirs, " or "))
}

// ptp4lGlobalConfig is the [global] section both ends share; sock is the
// UNIX socket ptp4l listens on for pmc, which must differ between the two
// processes because they share the file system.
func ptp4lGlobalConfig(sock string) string {
	var b strings.Builder
	b.WriteString("[global]\n")
	for _, kv := range [][2]string{
		{"time_stamping", "software"},
		{"free_running", "1"},
		{"network_transport", "UDPv4"},
		{"delay_mechanism", "E2E"},
		{"inhibit_multicast_service", "1"},
		{"logSyncInterval", strconv.Itoa(ptp4lLogSyncInterval)},
		{"logMinDelayReqInterval", strconv.Itoa(ptp4lLogSyncInterval)},
		{"logAnnounceInterval", strconv.Itoa(ptp4lLogAnnounceInterval)},
		{"freq_est_interval", "0"},
		{"summary_interval", strconv.Itoa(ptp4lLogSyncInterval)},
		{"verbose", "1"},
		{"use_syslog", "0"},
		{"uds_address", sock},
	} {
		fmt.Fprintf(&b, "%-26s %s\n", kv[0], kv[1])
	}
	return b.String()
}

// ptp4lMasterConfig is the master's config: it never becomes a slave and
// grants the unicast contracts the slave asks for.
func ptp4lMasterConfig(iface, sock string) string {
	return ptp4lGlobalConfig(sock) +
		fmt.Sprintf("%-26s %d\n", "announceReceiptTimeout", ptp4lMasterAnnounceTimeout) +
		fmt.Sprintf("[%s]\n", iface) +
		fmt.Sprintf("%-26s %s\n", "masterOnly", "1") +
		fmt.Sprintf("%-26s %s\n", "unicast_listen", "1")
}

// ptp4lSlaveConfig is the slave's config: it never becomes a master and
// asks master for unicast service.
func ptp4lSlaveConfig(iface string, master netip.Addr, sock string) string {
	return ptp4lGlobalConfig(sock) +
		fmt.Sprintf("%-26s %d\n", "announceReceiptTimeout", ptp4lSlaveAnnounceTimeout) +
		fmt.Sprintf("%-26s %s\n", "slaveOnly", "1") +
		"[unicast_master_table]\n" +
		fmt.Sprintf("%-26s %d\n", "table_id", ptp4lMasterTable) +
		fmt.Sprintf("%-26s %d\n", "logQueryInterval", ptp4lLogAnnounceInterval) +
		fmt.Sprintf("%-26s %s\n", "UDPv4", master) +
		fmt.Sprintf("[%s]\n", iface) +
		fmt.Sprintf("%-26s %d\n", "unicast_master_table", ptp4lMasterTable)
}

// addLine records line of the slave's stdout if it is a servo line.
func (p *PTP4L) addLine(line string) {
	s, ok := parsePTP4LLine(line)
	if !ok {
		return
	}
	s.At -= p.slaveMono
	p.mu.Lock()
	p.samples = append(p.samples, s)
	p.mu.Unlock()
}

// Samples returns the slave's samples so far, oldest first. It is safe to
// call while ptp4l runs.
func (p *PTP4L) Samples() []PTPSample {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]PTPSample(nil), p.samples...)
}

// Stop ends the slave and then the master (SIGTERM, then SIGKILL after a
// few seconds), removes the temp dir, and returns the samples. The error
// says which process failed in a way other than by being stopped (exited
// before Stop, exited with an error, or had to be killed) and quotes its
// last lines of stderr and stdout. Stop is idempotent.
func (p *PTP4L) Stop() ([]PTPSample, error) {
	p.stopOnce.Do(func() { p.stopErr = p.shutdown(true) })
	return p.Samples(), p.stopErr
}

// shutdown halts both processes and removes the temp dir. With report, it
// also returns how a process failed before it was halted; without (after
// a failed start, whose error says that already) only what went wrong in
// halting and cleaning up.
func (p *PTP4L) shutdown(report bool) error {
	var errs []error
	for _, proc := range []*ptp4lProc{p.slave, p.master} {
		if proc == nil {
			continue
		}
		running, err := proc.halt()
		switch {
		case err != nil:
			errs = append(errs, err)
		case !report:
		case p.ctx.Err() != nil && (!running || proc.waitErr != nil):
			// Ended, or made to fail, by ctx: os/exec sends SIGTERM
			// (cmd.Cancel) and then returns ctx's error from Wait.
			errs = append(errs, fmt.Errorf("ptp4l %s in netns %s: %w", proc.role, proc.host.Name, p.ctx.Err()))
		case !running:
			errs = append(errs, fmt.Errorf("ptp4l %s in netns %s exited before Stop: %v%s", proc.role, proc.host.Name, proc.exitStatus(), proc.output()))
		case proc.waitErr != nil && !stoppedBySIGTERM(proc.waitErr):
			errs = append(errs, fmt.Errorf("ptp4l %s in netns %s failed: %v%s", proc.role, proc.host.Name, proc.waitErr, proc.output()))
		}
	}
	if err := os.RemoveAll(p.dir); err != nil {
		errs = append(errs, fmt.Errorf("remove ptp4l temp dir: %w", err))
	}
	return errors.Join(errs...)
}

// ptp4lProc is one ptp4l process.
type ptp4lProc struct {
	role   string // "master" or "slave"
	host   *testbed.Host
	cmd    *exec.Cmd
	stdout *lineTail
	stderr *lineTail
	ready  chan struct{} // closed when the port has initialised
	done   chan struct{} // closed when the process has exited and been reaped
	// waitErr is cmd.Wait's result, valid once done is closed.
	waitErr error
}

// startPTP4LProc starts ptp4l -f cfg in host's netns. onLine, if not nil,
// gets every line of its stdout.
func startPTP4LProc(ctx context.Context, role string, host *testbed.Host, bin, cfg string, onLine func(string)) (*ptp4lProc, error) {
	p := &ptp4lProc{role: role, host: host, ready: make(chan struct{}), done: make(chan struct{})}
	var readyOnce sync.Once
	p.stdout = newLineTail(func(line string) {
		if strings.Contains(line, ptp4lReadyLine) {
			readyOnce.Do(func() { close(p.ready) })
		}
		if onLine != nil {
			onLine(line)
		}
	})
	p.stderr = newLineTail(nil)

	p.cmd = host.Command(ctx, bin, "-f", cfg)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	// nsenter execs ptp4l without forking, so the signal reaches ptp4l.
	p.cmd.Cancel = func() error { return p.cmd.Process.Signal(syscall.SIGTERM) }
	p.cmd.WaitDelay = ptp4lStopTimeout
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start ptp4l %s in netns %s: %w", role, host.Name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		p.stdout.flush()
		p.stderr.flush()
		close(p.done)
	}()
	return p, nil
}

// waitReady waits until the process has initialised its port. It fails if
// the process exits first, or does not get there in ptp4lReadyTimeout.
func (p *ptp4lProc) waitReady(ctx context.Context) error {
	timer := time.NewTimer(ptp4lReadyTimeout)
	defer timer.Stop()
	select {
	case <-p.ready:
		return nil
	case <-p.done:
		return fmt.Errorf("ptp4l %s in netns %s exited while starting: %v%s", p.role, p.host.Name, p.exitStatus(), p.output())
	case <-timer.C:
		return fmt.Errorf("ptp4l %s in netns %s did not initialise its port within %v%s", p.role, p.host.Name, ptp4lReadyTimeout, p.output())
	case <-ctx.Done():
		return fmt.Errorf("start ptp4l %s in netns %s: %w", p.role, p.host.Name, ctx.Err())
	}
}

// halt ends the process if it still runs: SIGTERM, then SIGKILL if it has
// not exited ptp4lStopTimeout later. running reports whether it still ran
// when halt was called. The error says that it had to be killed, or that
// even SIGKILL did not end it; then done may never close.
func (p *ptp4lProc) halt() (running bool, err error) {
	select {
	case <-p.done:
		return false, nil
	default:
	}

	// Signal fails only once the process has been reaped, and then done
	// is about to close.
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(ptp4lStopTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return true, nil
	case <-timer.C:
	}

	_ = p.cmd.Process.Kill()
	timer.Reset(ptp4lStopTimeout)
	select {
	case <-p.done:
		return true, fmt.Errorf("ptp4l %s in netns %s ignored SIGTERM for %v and was killed%s", p.role, p.host.Name, ptp4lStopTimeout, p.output())
	case <-timer.C:
		return true, fmt.Errorf("ptp4l %s in netns %s (pid %d) did not exit after SIGKILL%s", p.role, p.host.Name, p.cmd.Process.Pid, p.output())
	}
}

// exitStatus describes how the process ended, after done is closed.
func (p *ptp4lProc) exitStatus() string {
	if p.waitErr == nil {
		return "exit status 0"
	}
	return p.waitErr.Error()
}

// stoppedBySIGTERM reports whether err says the process died of SIGTERM,
// which is a stop, not a failure. (ptp4l catches SIGTERM and exits 0.)
func stoppedBySIGTERM(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM
}

// output quotes the process's last lines of stderr and stdout, for errors.
func (p *ptp4lProc) output() string {
	var b strings.Builder
	for _, s := range []struct {
		name string
		tail *lineTail
	}{{"stderr", p.stderr}, {"stdout", p.stdout}} {
		lines := s.tail.lines()
		if len(lines) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\nlast lines of its %s:", s.name)
		for _, l := range lines {
			b.WriteString("\n\t" + l)
		}
	}
	return b.String()
}

// lineTail is an io.Writer for a process's output: it splits what it is
// given into lines, passes each complete line to onLine and keeps the last
// ptp4lTailLines lines.
type lineTail struct {
	onLine func(string)

	mu      sync.Mutex
	partial []byte
	tail    []string
}

// newLineTail returns a lineTail that calls onLine, if not nil, for every
// line.
func newLineTail(onLine func(string)) *lineTail {
	return &lineTail{onLine: onLine}
}

// Write implements io.Writer.
func (t *lineTail) Write(b []byte) (int, error) {
	t.mu.Lock()
	t.partial = append(t.partial, b...)
	var lines []string
	for {
		i := bytes.IndexByte(t.partial, '\n')
		if i < 0 {
			break
		}
		lines = append(lines, strings.TrimRight(string(t.partial[:i]), "\r"))
		t.partial = t.partial[i+1:]
	}
	t.keep(lines...)
	t.mu.Unlock()
	t.emit(lines)
	return len(b), nil
}

// flush passes on a last line that did not end in a newline. It is called
// once the process has exited and its output has been copied.
func (t *lineTail) flush() {
	t.mu.Lock()
	var lines []string
	if len(t.partial) > 0 {
		lines = []string{string(t.partial)}
		t.partial = nil
	}
	t.keep(lines...)
	t.mu.Unlock()
	t.emit(lines)
}

// keep appends lines to the tail, dropping the oldest beyond
// ptp4lTailLines. t.mu must be held.
func (t *lineTail) keep(lines ...string) {
	t.tail = append(t.tail, lines...)
	if n := len(t.tail) - ptp4lTailLines; n > 0 {
		t.tail = append(t.tail[:0], t.tail[n:]...)
	}
}

// emit calls onLine for lines, outside t.mu.
func (t *lineTail) emit(lines []string) {
	if t.onLine == nil {
		return
	}
	for _, l := range lines {
		t.onLine(l)
	}
}

// lines returns the last lines kept.
func (t *lineTail) lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.tail...)
}

// parsePTP4LLine parses one servo line of ptp4l's verbose output, such as
//
//	ptp4l[38307.503]: master offset     -10546 s0 freq    +230 path delay     14201
//
// (with a message_tag, the tag stands between the colon and "master"). At
// is the bracketed time, CLOCK_MONOTONIC in seconds with milliseconds.
// Other lines, including the rms summaries ptp4l prints when
// summary_interval spans several updates, are not samples: ok is false.
func parsePTP4LLine(line string) (s PTPSample, ok bool) {
	open := strings.IndexByte(line, '[')
	closing := strings.Index(line, "]: ")
	if open < 0 || closing < open {
		return PTPSample{}, false
	}
	at, ok := parsePTP4LTime(line[open+1 : closing])
	if !ok {
		return PTPSample{}, false
	}
	f := strings.Fields(line[closing+len("]: "):])
	i := 0
	for i+1 < len(f) && (f[i] != "master" || f[i+1] != "offset") {
		i++
	}
	// master offset N sK freq F path delay D
	f = f[i:]
	if len(f) != 9 || f[0] != "master" || f[1] != "offset" || f[4] != "freq" || f[6] != "path" || f[7] != "delay" {
		return PTPSample{}, false
	}
	offset, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return PTPSample{}, false
	}
	if len(f[3]) < 2 || f[3][0] != 's' {
		return PTPSample{}, false
	}
	if _, err := strconv.ParseUint(f[3][1:], 10, 8); err != nil {
		return PTPSample{}, false
	}
	if _, err := strconv.ParseFloat(f[5], 64); err != nil {
		return PTPSample{}, false
	}
	delay, err := strconv.ParseInt(f[8], 10, 64)
	if err != nil {
		return PTPSample{}, false
	}
	return PTPSample{At: at, OffsetNs: offset, PathDelayNs: delay, State: f[3]}, true
}

// parsePTP4LTime parses ptp4l's "seconds.milliseconds" time stamp.
func parsePTP4LTime(s string) (time.Duration, bool) {
	secs, frac, ok := strings.Cut(s, ".")
	if !ok || len(frac) != 3 {
		return 0, false
	}
	sec, err := strconv.ParseUint(secs, 10, 32)
	if err != nil {
		return 0, false
	}
	ms, err := strconv.ParseUint(frac, 10, 16)
	if err != nil {
		return 0, false
	}
	return time.Duration(sec)*time.Second + time.Duration(ms)*time.Millisecond, true
}
