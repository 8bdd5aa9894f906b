// Package tracebuf reads the trace records that ccload's BPF programs
// write to a pinned ring buffer while a pinned switch map says so: the
// CCs' per-ACK records (`ccload trace NAME`) and On-Ramp's per-echo ones
// (`ccload trace onramp`). It owns the switch, the reader and the clock
// the records' times are on; the records' layouts stay with their owners.
package tracebuf

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// Reader reads one ring buffer. Tracing is on from Open until Close; one
// reader at a time gets the records.
type Reader struct {
	what   string
	events *ebpf.Map
	on     *ebpf.Map
	rd     *ringbuf.Reader
}

// Open opens the ring buffer pinned at eventsPath and the switch (a
// one-entry u32 array) pinned at onPath, and switches tracing on. what
// names the trace in errors. On failure nothing is left switched on.
func Open(eventsPath, onPath, what string) (_ *Reader, err error) {
	r := &Reader{what: what}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	if r.events, err = ebpf.LoadPinnedMap(eventsPath, nil); err != nil {
		return nil, fmt.Errorf("open %s trace buffer: %w", what, err)
	}
	if r.on, err = ebpf.LoadPinnedMap(onPath, nil); err != nil {
		return nil, fmt.Errorf("open %s trace switch: %w", what, err)
	}
	if r.rd, err = ringbuf.NewReader(r.events); err != nil {
		return nil, fmt.Errorf("read %s trace buffer: %w", what, err)
	}
	if err := r.on.Put(uint32(0), uint32(1)); err != nil {
		return nil, fmt.Errorf("switch %s tracing on: %w", what, err)
	}
	return r, nil
}

// Run passes each record's bytes to fn, with the wall-clock time of
// CLOCK_MONOTONIC zero (to turn bpf_ktime_get_ns() into times), until ctx
// ends or fn returns an error.
func (r *Reader) Run(ctx context.Context, fn func(raw []byte, boot time.Time) error) error {
	stop := context.AfterFunc(ctx, func() { r.rd.Close() })
	defer stop()
	boot := MonotonicBoot()
	for {
		rec, err := r.rd.Read()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, ringbuf.ErrClosed) {
				return nil
			}
			return fmt.Errorf("read %s trace: %w", r.what, err)
		}
		if err := fn(rec.RawSample, boot); err != nil {
			return err
		}
	}
}

// Close switches tracing off and releases the buffer.
func (r *Reader) Close() error {
	var err error
	if r.on != nil {
		err = r.on.Put(uint32(0), uint32(0))
		r.on.Close()
	}
	if r.rd != nil {
		r.rd.Close()
	}
	if r.events != nil {
		r.events.Close()
	}
	if err != nil {
		return fmt.Errorf("switch %s tracing off: %w", r.what, err)
	}
	return nil
}

// MonotonicNow reads CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns().
func MonotonicNow() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, err
	}
	return time.Duration(ts.Nano()), nil
}

// MonotonicBoot is the wall-clock time of CLOCK_MONOTONIC zero.
func MonotonicBoot() time.Time {
	now := time.Now()
	mono, err := MonotonicNow()
	if err != nil {
		return now
	}
	return now.Add(-mono)
}
