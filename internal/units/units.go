// Package units parses and prints the quantities users type into ccload:
// bandwidths in bits per second (10gbit), sizes in bytes (64KiB), durations
// in microseconds (20us) and fractions (0.9 or 90%). The CLI, the bench and
// the CC parameters all read them here, so one spelling works everywhere.
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ParseFraction parses a ratio such as 0.9, 90% or 1/16 and returns it
// times scale, rounded.
func ParseFraction(s string, scale uint64) (uint64, error) {
	if num, den, ok := strings.Cut(s, "/"); ok {
		n, err1 := strconv.ParseFloat(num, 64)
		d, err2 := strconv.ParseFloat(den, 64)
		if err1 != nil || err2 != nil || d == 0 || math.IsNaN(n/d) || math.IsInf(n/d, 0) {
			return 0, fmt.Errorf("%q is not a ratio (write 1/16, 0.0625 or 6.25%%)", s)
		}
		s = strconv.FormatFloat(n/d, 'g', -1, 64)
	}
	pct := strings.HasSuffix(s, "%")
	f, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not a number (write 0.9 or 90%%)", s)
	}
	if pct {
		f /= 100
	}
	if f < 0 {
		return 0, fmt.Errorf("%q is negative", s)
	}
	if f > 1e6 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return uint64(math.Round(f * float64(scale))), nil
}

// ParseDurationUS parses a duration with a unit (20us, 1.5ms, 1s; a bare
// 0 is allowed) into whole microseconds.
func ParseDurationUS(s string) (uint64, error) {
	if s == "0" {
		return 0, nil
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return 0, fmt.Errorf("%q needs a unit: write %sus or %sms", s, s, s)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (write 20us, 1.5ms or 1s)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative", s)
	}
	if d%time.Microsecond != 0 {
		return 0, fmt.Errorf("%q is finer than a microsecond, the kernel's RTT resolution", s)
	}
	return uint64(d / time.Microsecond), nil
}

var bandwidthUnits = []struct {
	suffix string
	mult   float64
}{
	{"tbit", 1e12}, {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1},
	{"t", 1e12}, {"g", 1e9}, {"m", 1e6}, {"k", 1e3},
}

// ParseBandwidth parses a rate in bits per second: 10gbit, 100mbit, 25G.
// Units in bytes per second ("bps") are refused as ambiguous.
func ParseBandwidth(s string) (uint64, error) {
	l := strings.ToLower(s)
	if strings.HasSuffix(l, "bps") || strings.HasSuffix(l, "b/s") {
		return 0, fmt.Errorf("%q is ambiguous (bits or bytes?): write it in bits, e.g. 10gbit", s)
	}
	mult := 0.0
	num := l
	for _, u := range bandwidthUnits {
		if strings.HasSuffix(l, u.suffix) {
			mult, num = u.mult, strings.TrimSuffix(l, u.suffix)
			break
		}
	}
	if mult == 0 {
		return 0, fmt.Errorf("%q needs a unit: write 10gbit, 100mbit or 25G (bits per second)", s)
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("%q is not a bandwidth (write 10gbit, 100mbit or 25G)", s)
	}
	if f*mult > 1e15 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return uint64(math.Round(f * mult)), nil
}

// FormatBandwidth renders bits per second the way ParseBandwidth reads them.
func FormatBandwidth(v uint64) string {
	for _, u := range bandwidthUnits[:4] {
		if float64(v) >= u.mult {
			return strconv.FormatFloat(float64(v)/u.mult, 'f', -1, 64) + u.suffix
		}
	}
	return strconv.FormatUint(v, 10) + "bit"
}

var byteUnits = []struct {
	suffix string
	mult   uint64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30},
	{"kb", 1000}, {"mb", 1000 * 1000}, {"gb", 1000 * 1000 * 1000},
	{"k", 1000}, {"m", 1000 * 1000}, {"g", 1000 * 1000 * 1000}, {"b", 1},
}

// ParseBytes parses a size: 1500, 64KB (10^3), 64KiB (2^10), 1MiB.
func ParseBytes(s string) (uint64, error) {
	l := strings.ToLower(s)
	mult := uint64(1)
	num := l
	for _, u := range byteUnits {
		if strings.HasSuffix(l, u.suffix) {
			mult, num = u.mult, strings.TrimSuffix(l, u.suffix)
			break
		}
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("%q is not a size (write 1500, 64KB or 1MiB)", s)
	}
	if f*float64(mult) > 1<<40 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return uint64(math.Round(f * float64(mult))), nil
}
