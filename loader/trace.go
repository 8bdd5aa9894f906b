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

// Trace streams the per-ACK records of an attached CC to fn until ctx
// ends or fn returns an error. Tracing is switched on in the kernel only
// while Trace runs; one tracer at a time gets the records.
func (l *Loader) Trace(ctx context.Context, name string, fn func(TraceEvent) error) error {
	cc, err := Lookup(name)
	if err != nil {
		return err
	}
	dir := l.PinDir(cc.Name)
	events, err := ebpf.LoadPinnedMap(filepath.Join(dir, mapEvents), nil)
	if errors.Is(err, os.ErrNotExist) {
		if !kernel.Exists(dir) {
			return kernel.NewError(kernel.KindNotAttached, "attach it first: ccload attach "+name, nil, "%s is not attached", name)
		}
		return kernel.NewError(kernel.KindBadParam, "this CC keeps no trace (theta_powertcp, powertcp and hpcc do), or it was attached by an older ccload: detach and attach it again",
			nil, "%s has no trace buffer", name)
	}
	if err != nil {
		return fmt.Errorf("open %s trace buffer: %w", name, err)
	}
	defer events.Close()
	on, err := ebpf.LoadPinnedMap(filepath.Join(dir, mapTraceOn), nil)
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
