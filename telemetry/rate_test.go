package telemetry

import (
	"errors"
	"strings"
	"testing"
)

func TestRateCodes(t *testing.T) {
	// The normative table of docs/int-option.md, written out again here so
	// that a change to rateTable has to change the test as well.
	tests := []struct {
		code uint8
		bps  uint64
	}{
		{1, 100e6},
		{2, 1e9},
		{3, 2.5e9},
		{4, 5e9},
		{5, 10e9},
		{6, 25e9},
		{7, 40e9},
		{8, 50e9},
		{9, 100e9},
		{10, 200e9},
		{11, 400e9},
		{12, 800e9},
	}
	if got := len(SupportedRates()); got != len(tests) {
		t.Fatalf("SupportedRates has %d rates, want %d", got, len(tests))
	}
	for _, tt := range tests {
		t.Run(FormatRate(tt.bps), func(t *testing.T) {
			code, err := RateCode(tt.bps)
			if err != nil || code != tt.code {
				t.Fatalf("RateCode(%d) = %d, %v; want %d", tt.bps, code, err, tt.code)
			}
			bps, err := RateFromCode(tt.code)
			if err != nil || bps != tt.bps {
				t.Fatalf("RateFromCode(%d) = %d, %v; want %d", tt.code, bps, err, tt.bps)
			}
		})
	}
}

func TestRateCodeUnsupported(t *testing.T) {
	for _, bps := range []uint64{0, 1, 99_999_999, 100_000_001, 3e9, 20e9, 1.6e12, ^uint64(0)} {
		code, err := RateCode(bps)
		if err == nil {
			t.Errorf("RateCode(%d) = %d, want an error", bps, code)
			continue
		}
		if !errors.Is(err, ErrUnsupportedRate) {
			t.Errorf("RateCode(%d): %v does not wrap ErrUnsupportedRate", bps, err)
		}
		for _, want := range []string{"100Mbit/s", "1Gbit/s", "2.5Gbit/s", "25Gbit/s", "800Gbit/s"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("RateCode(%d): %q does not list %s", bps, err, want)
			}
		}
	}
}

func TestRateFromCodeInvalid(t *testing.T) {
	tests := []struct {
		code uint8
		want string
	}{
		{0, "empty"},
		{13, "reserved"},
		{14, "reserved"},
		{15, "reserved"},
		{16, "4 bits"},
		{255, "4 bits"},
	}
	for _, tt := range tests {
		bps, err := RateFromCode(tt.code)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("RateFromCode(%d) = %d, %v; want an error about %q", tt.code, bps, err, tt.want)
		}
	}
}

func TestFormatRate(t *testing.T) {
	tests := []struct {
		bps  uint64
		want string
	}{
		{0, "0bit/s"},
		{999, "999bit/s"},
		{64_000, "64kbit/s"},
		{100e6, "100Mbit/s"},
		{2.5e9, "2.5Gbit/s"},
		{800e9, "800Gbit/s"},
	}
	for _, tt := range tests {
		if got := FormatRate(tt.bps); got != tt.want {
			t.Errorf("FormatRate(%d) = %q, want %q", tt.bps, got, tt.want)
		}
	}
}

func TestSupportedRatesIsACopy(t *testing.T) {
	SupportedRates()[0] = 42
	if got := SupportedRates()[0]; got != 100e6 {
		t.Fatalf("SupportedRates()[0] = %d after a caller wrote to it", got)
	}
}
