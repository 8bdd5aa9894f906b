package loader

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/tracebuf"
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

// Tracer reads the per-ACK records of one attached CC. Tracing is on in
// the kernel from OpenTrace until Close; one tracer at a time gets the
// records.
type Tracer struct {
	rd *tracebuf.Reader
}

// OpenTrace switches tracing of the attached CC name on. It fails, with
// nothing switched on, when name is not attached or keeps no trace, so a
// caller can check that before it prints anything.
func (l *Loader) OpenTrace(name string) (*Tracer, error) {
	cc, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	dir := l.PinDir(cc.Name)
	if !kernel.Exists(filepath.Join(dir, mapEvents)) {
		if !kernel.Exists(dir) {
			return nil, kernel.NewError(kernel.KindNotAttached, "attach it first: ccload attach "+name, nil, "%s is not attached", name)
		}
		return nil, kernel.NewError(kernel.KindBadParam, "this CC keeps no trace (theta_powertcp, powertcp and hpcc do), or it was attached by an older ccload: detach and attach it again",
			nil, "%s has no trace buffer", name)
	}
	rd, err := tracebuf.Open(filepath.Join(dir, mapEvents), filepath.Join(dir, mapTraceOn), cc.Name)
	if err != nil {
		return nil, err
	}
	return &Tracer{rd: rd}, nil
}

// Run streams the records to fn until ctx ends or fn returns an error.
func (t *Tracer) Run(ctx context.Context, fn func(TraceEvent) error) error {
	return t.rd.Run(ctx, func(raw []byte, boot time.Time) error {
		e, err := decodeTraceEvent(raw, boot)
		if err != nil {
			return err
		}
		return fn(e)
	})
}

// Close switches tracing off and releases the buffer.
func (t *Tracer) Close() error { return t.rd.Close() }
