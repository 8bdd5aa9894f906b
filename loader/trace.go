package loader

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/kernel"
)

// TraceEvent is what a congestion control saw and did on one ACK
// (struct cc_trace_event in bpf/include/ccload.h).
type TraceEvent struct {
	Time       time.Time     `json:"time"`
	Flow       string        `json:"flow"` // local -> remote
	SndCwnd    uint32        `json:"snd_cwnd"`
	CwndBytes  uint64        `json:"cwnd_bytes"`
	Signal     float64       `json:"signal"` // normalised power Γ (PowerTCP) or U (HPCC)
	QlenBytes  uint32        `json:"qlen_bytes"`
	RTT        time.Duration `json:"rtt_ns"`
	PacingMbps uint32        `json:"pacing_mbps"`
	Mode       string        `json:"mode"` // "rtt" or "int"
}

// traceRecord is struct cc_trace_event of bpf/include/ccload.h, as bpf2go
// wrote it from theta_powertcp's object; every CC that traces emits it.
type traceRecord = thetaPowertcpCcTraceEvent

// traceModes names TRACE_MODE_* of bpf/include/ccload.h.
var traceModes = map[uint32]string{1: "rtt", 2: "int"}

func decodeTraceEvent(b []byte, boot time.Time) (TraceEvent, error) {
	var r traceRecord
	if len(b) < binary.Size(r) {
		return TraceEvent{}, fmt.Errorf("trace record of %d bytes, want %d", len(b), binary.Size(r))
	}
	if _, err := binary.Decode(b, binary.NativeEndian, &r); err != nil {
		return TraceEvent{}, fmt.Errorf("decode trace record: %w", err)
	}
	e := TraceEvent{
		Time:       boot.Add(time.Duration(r.TsNs)),
		SndCwnd:    r.SndCwnd,
		CwndBytes:  r.CwndBytes,
		Signal:     float64(r.Signal) / fpOne,
		QlenBytes:  r.QlenBytes,
		RTT:        time.Duration(r.RttUs) * time.Microsecond,
		PacingMbps: r.PacingMbps,
		Mode:       traceModes[r.Mode],
	}
	saddr, daddr := networkOrderAddr(r.Saddr), networkOrderAddr(r.Daddr)
	if saddr.IsUnspecified() { // IPv6 sockets: ports only
		e.Flow = fmt.Sprintf(":%d -> :%d", r.Sport, r.Dport)
	} else {
		e.Flow = fmt.Sprintf("%s -> %s", netip.AddrPortFrom(saddr, r.Sport), netip.AddrPortFrom(daddr, r.Dport))
	}
	return e, nil
}

// networkOrderAddr turns an IPv4 address that the kernel keeps in network
// order, and that was read as a native-endian integer, back into an address.
func networkOrderAddr(v uint32) netip.Addr {
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// monotonicBoot is the wall-clock time of CLOCK_MONOTONIC zero, to turn
// bpf_ktime_get_ns() into times.
func monotonicBoot() time.Time {
	now := time.Now()
	mono, err := monotonicNow()
	if err != nil {
		return now
	}
	return now.Add(-mono)
}

// Tracer reads the per-ACK records of one attached CC. Tracing is on in
// the kernel from OpenTrace until Close; one tracer at a time gets the
// records.
type Tracer struct {
	name   string
	events *ebpf.Map
	on     *ebpf.Map
	rd     *ringbuf.Reader
}

// OpenTrace switches tracing of the attached CC name on. It fails, with
// nothing switched on, when name is not attached or keeps no trace, so a
// caller can check that before it prints anything.
func (l *Loader) OpenTrace(name string) (_ *Tracer, err error) {
	cc, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	dir := l.PinDir(cc.Name)
	t := &Tracer{name: cc.Name}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	t.events, err = ebpf.LoadPinnedMap(filepath.Join(dir, mapEvents), nil)
	if errors.Is(err, os.ErrNotExist) {
		if !kernel.Exists(dir) {
			return nil, kernel.NewError(kernel.KindNotAttached, "attach it first: ccload attach "+name, nil, "%s is not attached", name)
		}
		return nil, kernel.NewError(kernel.KindBadParam, "this CC keeps no trace (theta_powertcp, powertcp and hpcc do), or it was attached by an older ccload: detach and attach it again",
			nil, "%s has no trace buffer", name)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s trace buffer: %w", name, err)
	}
	if t.on, err = ebpf.LoadPinnedMap(filepath.Join(dir, mapTraceOn), nil); err != nil {
		return nil, fmt.Errorf("open %s trace switch: %w", name, err)
	}
	if t.rd, err = ringbuf.NewReader(t.events); err != nil {
		return nil, fmt.Errorf("read %s trace buffer: %w", name, err)
	}
	if err := t.on.Put(uint32(0), uint32(1)); err != nil {
		return nil, fmt.Errorf("switch %s tracing on: %w", name, err)
	}
	return t, nil
}

// Run streams the records to fn until ctx ends or fn returns an error.
func (t *Tracer) Run(ctx context.Context, fn func(TraceEvent) error) error {
	stop := context.AfterFunc(ctx, func() { t.rd.Close() })
	defer stop()
	boot := monotonicBoot()
	for {
		rec, err := t.rd.Read()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, ringbuf.ErrClosed) {
				return nil
			}
			return fmt.Errorf("read %s trace: %w", t.name, err)
		}
		e, err := decodeTraceEvent(rec.RawSample, boot)
		if err != nil {
			return err
		}
		if err := fn(e); err != nil {
			return err
		}
	}
}

// Close switches tracing off and releases the buffer.
func (t *Tracer) Close() error {
	var err error
	if t.on != nil {
		err = t.on.Put(uint32(0), uint32(0))
		t.on.Close()
	}
	if t.rd != nil {
		t.rd.Close()
	}
	if t.events != nil {
		t.events.Close()
	}
	if err != nil {
		return fmt.Errorf("switch %s tracing off: %w", t.name, err)
	}
	return nil
}

func monotonicNow() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, err
	}
	return time.Duration(ts.Nano()), nil
}
