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

const traceEventSize = 56 // sizeof(struct cc_trace_event)

func decodeTraceEvent(b []byte, boot time.Time) (TraceEvent, error) {
	if len(b) < traceEventSize {
		return TraceEvent{}, fmt.Errorf("trace record of %d bytes, want %d", len(b), traceEventSize)
	}
	le := binary.NativeEndian
	saddr := netip.AddrFrom4([4]byte(b[8:12]))
	daddr := netip.AddrFrom4([4]byte(b[12:16]))
	e := TraceEvent{
		Time:       boot.Add(time.Duration(le.Uint64(b[0:]))),
		Flow:       fmt.Sprintf("%s -> %s", netip.AddrPortFrom(saddr, le.Uint16(b[16:])), netip.AddrPortFrom(daddr, le.Uint16(b[18:]))),
		SndCwnd:    le.Uint32(b[20:]),
		CwndBytes:  le.Uint64(b[24:]),
		Signal:     float64(int64(le.Uint64(b[32:]))) / fpOne,
		QlenBytes:  le.Uint32(b[40:]),
		RTT:        time.Duration(le.Uint32(b[44:])) * time.Microsecond,
		PacingMbps: le.Uint32(b[48:]),
		Mode:       map[uint32]string{1: "rtt", 2: "int"}[le.Uint32(b[52:])],
	}
	if saddr.IsUnspecified() { // IPv6 sockets: ports only
		e.Flow = fmt.Sprintf(":%d -> :%d", le.Uint16(b[16:]), le.Uint16(b[18:]))
	}
	return e, nil
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

// Trace streams the per-ACK records of an attached CC to fn until ctx
// ends or fn returns an error. Tracing is switched on in the kernel only
// while Trace runs; one tracer at a time gets the records.
func (l *Loader) Trace(ctx context.Context, name string, fn func(TraceEvent) error) error {
	cc, err := Lookup(name)
	if err != nil {
		return err
	}
	dir := l.PinDir(cc.Name)
	events, err := ebpf.LoadPinnedMap(filepath.Join(dir, "events"), nil)
	if errors.Is(err, os.ErrNotExist) {
		if !exists(dir) {
			return newError(KindNotAttached, "attach it first: ccload attach "+name, nil, "%s is not attached", name)
		}
		return newError(KindLoad, "this CC keeps no trace (theta_powertcp, powertcp and hpcc do), or it was attached by an older ccload: detach and attach it again",
			nil, "%s has no trace buffer", name)
	}
	if err != nil {
		return fmt.Errorf("open %s trace buffer: %w", name, err)
	}
	defer events.Close()
	on, err := ebpf.LoadPinnedMap(filepath.Join(dir, "trace_on"), nil)
	if err != nil {
		return fmt.Errorf("open %s trace switch: %w", name, err)
	}
	defer on.Close()
	rd, err := ringbuf.NewReader(events)
	if err != nil {
		return fmt.Errorf("read %s trace buffer: %w", name, err)
	}
	defer rd.Close()
	if err := on.Put(uint32(0), uint32(1)); err != nil {
		return fmt.Errorf("switch %s tracing on: %w", name, err)
	}
	defer on.Put(uint32(0), uint32(0))

	stop := context.AfterFunc(ctx, func() { rd.Close() })
	defer stop()
	boot := monotonicBoot()
	for {
		rec, err := rd.Read()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, ringbuf.ErrClosed) {
				return nil
			}
			return fmt.Errorf("read %s trace: %w", name, err)
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

func monotonicNow() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, err
	}
	return time.Duration(ts.Nano()), nil
}
