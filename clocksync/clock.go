package clocksync

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Clock is the agent's time source: what its own clock reads now, and what
// it read when the kernel took a socket timestamp. Both are nanoseconds on
// the clock base of the data path, CLOCK_TAI (bpf_ktime_get_tai_ns), as
// bpf/include/clock.h specifies. The agent reads time only through a Clock,
// which makes it the test seam for clocks that disagree: Skewed.
type Clock interface {
	// Now returns the clock's reading now.
	Now() int64
	// FromKernel converts a kernel socket timestamp (SO_TIMESTAMPING's
	// software stamps are CLOCK_REALTIME) to the clock's reading at that
	// moment.
	FromKernel(t time.Time) int64
}

// SystemClock is the host's CLOCK_TAI. Kernel timestamps are
// CLOCK_REALTIME, which differs from TAI by the kernel's TAI offset (the
// leap seconds; 0 where no one set it). That offset is read with adjtimex
// at most once per refresh interval, so the conversion costs no system
// call per packet. This is the one place where the agent converts between
// the two.
type SystemClock struct {
	taiSeconds  atomic.Int64
	refreshedAt atomic.Int64 // CLOCK_MONOTONIC ns of the last read
}

// taiRefresh is how often SystemClock rereads the TAI offset.
const taiRefresh = time.Second

// NewSystemClock returns the host's clock, having read its TAI offset.
func NewSystemClock() (*SystemClock, error) {
	c := &SystemClock{}
	if err := c.refresh(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *SystemClock) refresh() error {
	var tx unix.Timex
	if _, err := unix.Adjtimex(&tx); err != nil {
		return fmt.Errorf("read the kernel's TAI offset (adjtimex): %w", err)
	}
	c.taiSeconds.Store(int64(tx.Tai))
	c.refreshedAt.Store(monotonicNow())
	return nil
}

func monotonicNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// Now reads CLOCK_TAI.
func (c *SystemClock) Now() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_TAI, &ts)
	return ts.Nano()
}

// FromKernel converts a CLOCK_REALTIME timestamp to CLOCK_TAI.
func (c *SystemClock) FromKernel(t time.Time) int64 {
	if monotonicNow()-c.refreshedAt.Load() > int64(taiRefresh) {
		// On failure keep the last offset: it changes only at a leap
		// second.
		_ = c.refresh()
	}
	return t.UnixNano() + c.taiSeconds.Load()*int64(time.Second)
}

// Skewed is a clock that runs off its base by a fixed offset and a drift:
// it reads base + Offset + Drift·(base − Origin). It stands for another
// host's clock in tests and in the clock bench, where every agent runs on
// one kernel and so shares one real clock.
type Skewed struct {
	// Base is the real clock.
	Base Clock
	// Offset is added to every reading, in ns.
	Offset int64
	// Drift is the rate error, dimensionless (20e-6 is 20 ppm fast).
	Drift float64
	// Origin is the base reading at which the drift has added nothing.
	Origin int64
}

func (s Skewed) skew(base int64) int64 {
	return base + s.Offset + int64(math.Round(s.Drift*float64(base-s.Origin)))
}

// Now reads the skewed clock.
func (s Skewed) Now() int64 { return s.skew(s.Base.Now()) }

// FromKernel converts a kernel timestamp to the skewed clock.
func (s Skewed) FromKernel(t time.Time) int64 { return s.skew(s.Base.FromKernel(t)) }

// OffsetAt is the true offset of clock b relative to clock a (b minus a)
// when a reads at, for tests and the bench that know both skews. Both must
// share one base.
func OffsetAt(a, b Skewed, at int64) float64 {
	// Invert a's skew, at = base + a.Offset + a.Drift·x with x = base −
	// a.Origin, in differences: a float64 holds an absolute time of ns
	// since 1970 only to 256 ns.
	x := float64(at-a.Origin-a.Offset) / (1 + a.Drift)
	return float64(b.Offset-a.Offset) + b.Drift*(x+float64(a.Origin-b.Origin)) - a.Drift*x
}

// DriftOf is the true drift of clock b relative to clock a: the slope of
// OffsetAt in a's time.
func DriftOf(a, b Skewed) float64 { return (1+b.Drift)/(1+a.Drift) - 1 }
