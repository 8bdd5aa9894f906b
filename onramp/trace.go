package onramp

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/ccload/ccload/internal/tracebuf"
)

// TraceEvent is what the sender's control saw and did on one echo
// (struct onramp_trace_event of bpf/include/onramp.h).
type TraceEvent struct {
	Time time.Time `json:"time"`
	// Flow is "local -> remote".
	Flow string `json:"flow"`
	// OWD is the echoed one-way delay O (0 with NoClock).
	OWD time.Duration `json:"owd_ns"`
	// PLast is P_LastPktRTT: pause asserted since the echoed packet left.
	PLast time.Duration `json:"p_last_ns"`
	// Beta is β after this echo.
	Beta float64 `json:"beta"`
	// Threshold is the T this echo was compared against.
	Threshold time.Duration `json:"threshold_ns"`
	// Pause is the pause this echo added (in observe mode, flagged
	// observed: the pause it would have added, and did not); PausedFor
	// how long from now the flow is held (t_next - now, 0 when it is not).
	Pause     time.Duration `json:"pause_ns"`
	PausedFor time.Duration `json:"paused_for_ns"`
	// RTT is the echoed packet's round trip, on this host's clock.
	RTT time.Duration `json:"rtt_ns"`
	// Flags: paused, clamped, beta (β measured), stale, no_clock (the
	// receiver had no offset for this host), observed (observe mode: the
	// echo asked for Pause, which was not asserted), coarse_clock
	// (ignored: this host's clock error for the peer is over T/2).
	Flags []string `json:"flags,omitempty"`
}

// traceFlags names ONRAMP_TRACE_* of bpf/include/onramp.h, by bit.
var traceFlags = []string{"paused", "clamped", "beta", "stale", "no_clock", "observed", "coarse_clock"}

// flowString is "local -> remote" of a flow key.
func flowString(k onrampOnrampFlowKey) string {
	addr := func(w [4]uint32) netip.Addr {
		var b [16]byte
		for i, v := range w {
			binary.NativeEndian.PutUint32(b[4*i:], v)
		}
		if k.V6 == 0 {
			return netip.AddrFrom4([4]byte(b[:4]))
		}
		return netip.AddrFrom16(b)
	}
	port := func(p uint16) uint16 { return p>>8 | p<<8 } // network order, read natively (little endian)
	return fmt.Sprintf("%s -> %s", netip.AddrPortFrom(addr(k.Local), port(k.Lport)), netip.AddrPortFrom(addr(k.Remote), port(k.Rport)))
}

func decodeTrace(b []byte, boot time.Time) (TraceEvent, error) {
	var r onrampOnrampTraceEvent
	if len(b) < binary.Size(r) {
		return TraceEvent{}, fmt.Errorf("On-Ramp trace record of %d bytes, want %d", len(b), binary.Size(r))
	}
	if _, err := binary.Decode(b, binary.NativeEndian, &r); err != nil {
		return TraceEvent{}, fmt.Errorf("decode On-Ramp trace record: %w", err)
	}
	e := TraceEvent{
		Time: boot.Add(time.Duration(r.TsNs)), Flow: flowString(r.Flow),
		OWD: time.Duration(r.OwdNs), PLast: time.Duration(r.P_lastNs), Beta: float64(r.Beta) / fpOne,
		Threshold: time.Duration(r.ThresholdNs), Pause: time.Duration(r.PauseNs), RTT: time.Duration(r.RttNs),
	}
	if r.T_next > r.TsNs {
		e.PausedFor = time.Duration(r.T_next - r.TsNs)
	}
	for i, name := range traceFlags {
		if r.Flags&(1<<i) != 0 {
			e.Flags = append(e.Flags, name)
		}
	}
	if r.OwdNs == NoClock {
		e.OWD = 0
	}
	return e, nil
}

// String is one line of `ccload trace onramp`.
func (e TraceEvent) String() string {
	return fmt.Sprintf("%s %s owd=%v p_last=%v beta=%.3f T=%v pause=%v t_next=+%v rtt=%v %s",
		e.Time.Format("15:04:05.000000"), e.Flow, e.OWD, e.PLast, e.Beta, e.Threshold, e.Pause, e.PausedFor, e.RTT,
		strings.Join(e.Flags, ","))
}

// Tracer reads the per-echo records of On-Ramp on one interface. Tracing
// is on from OpenTrace until Close; one tracer at a time gets the records.
type Tracer struct {
	rd *tracebuf.Reader
}

// OpenTrace switches tracing on for On-Ramp on iface ("" is the only
// interface with On-Ramp in this network namespace).
func (o *OnRamp) OpenTrace(iface string) (*Tracer, error) {
	k, err := o.instanceFor(iface)
	if err != nil {
		return nil, err
	}
	dir := o.dir(k)
	rd, err := tracebuf.Open(filepath.Join(dir, onrampMapOnrampTrace), filepath.Join(dir, onrampMapOnrampTraceOn), "On-Ramp's")
	if err != nil {
		return nil, fmt.Errorf("on %s: %w", k.Name, err)
	}
	return &Tracer{rd: rd}, nil
}

// Run streams the records to fn until ctx ends or fn returns an error.
func (t *Tracer) Run(ctx context.Context, fn func(TraceEvent) error) error {
	return t.rd.Run(ctx, func(raw []byte, boot time.Time) error {
		e, err := decodeTrace(raw, boot)
		if err != nil {
			return err
		}
		return fn(e)
	})
}

// Close switches tracing off and releases the buffer.
func (t *Tracer) Close() error { return t.rd.Close() }
