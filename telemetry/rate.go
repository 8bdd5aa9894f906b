package telemetry

import (
	"fmt"
	"strconv"
	"strings"
)

// maxRateCode is the highest rate code that names a rate; 13 to 15 are
// reserved.
const maxRateCode = 12

// rateTable maps rate codes to link rates in bit/s. Index 0 is the empty
// slot, indices above maxRateCode are reserved. It is returned by value, so
// no caller can change it.
func rateTable() [maxRateCode + 1]uint64 {
	return [...]uint64{
		0,
		100_000_000,
		1_000_000_000,
		2_500_000_000,
		5_000_000_000,
		10_000_000_000,
		25_000_000_000,
		40_000_000_000,
		50_000_000_000,
		100_000_000_000,
		200_000_000_000,
		400_000_000_000,
		800_000_000_000,
	}
}

// SupportedRates returns the link rates that have a rate code, in bit/s,
// lowest first. The slice is new on every call.
func SupportedRates() []uint64 {
	t := rateTable()
	return append([]uint64(nil), t[1:]...)
}

// RateCode returns the 4-bit code of a link rate in bit/s. Only the exact
// rates of [SupportedRates] have a code; any other rate is an error wrapping
// [ErrUnsupportedRate] that lists them.
func RateCode(bps uint64) (uint8, error) {
	t := rateTable()
	for code := 1; code < len(t); code++ {
		if t[code] == bps {
			return uint8(code), nil
		}
	}
	return 0, fmt.Errorf("%w %s (supported: %s)", ErrUnsupportedRate, FormatRate(bps), supportedList())
}

// RateFromCode returns the link rate in bit/s of a rate code. Code 0 (the
// empty slot), the reserved codes 13 to 15 and codes wider than 4 bits are
// errors.
func RateFromCode(code uint8) (uint64, error) {
	switch {
	case code == 0:
		return 0, fmt.Errorf("rate code 0 marks an empty slot, not a rate")
	case code <= maxRateCode:
		return rateTable()[code], nil
	case code <= 15:
		return 0, fmt.Errorf("rate code %d is reserved", code)
	default:
		return 0, fmt.Errorf("rate code %d does not fit in 4 bits", code)
	}
}

// FormatRate formats a rate in bit/s with the largest unit (Gbit/s, Mbit/s,
// kbit/s) that keeps it readable, for example "2.5Gbit/s".
func FormatRate(bps uint64) string {
	units := [...]struct {
		div  uint64
		name string
	}{{1e9, "Gbit/s"}, {1e6, "Mbit/s"}, {1e3, "kbit/s"}}
	for _, u := range units {
		if bps >= u.div {
			return strconv.FormatFloat(float64(bps)/float64(u.div), 'f', -1, 64) + u.name
		}
	}
	return strconv.FormatUint(bps, 10) + "bit/s"
}

// supportedList returns the supported rates as "100Mbit/s, 1Gbit/s, ...".
func supportedList() string {
	rates := SupportedRates()
	names := make([]string, len(rates))
	for i, r := range rates {
		names[i] = FormatRate(r)
	}
	return strings.Join(names, ", ")
}
