package telemetry

import (
	"testing"
	"time"
)

func TestTimestampDelta(t *testing.T) {
	tests := []struct {
		name         string
		newer, older uint32
		want         uint32
	}{
		{"same", 5, 5, 0},
		{"forward", 2000, 1000, 1000},
		{"across the wrap", 0x000010, 0xFFFFF0, 0x20},
		{"just wrapped", 0, MaxTimestamp, 1},
		{"largest", MaxTimestamp, 0, MaxTimestamp},
		// A full wrap period is indistinguishable from no time at all.
		{"whole period", 7 + 1<<24, 7, 0},
		// Bits above 24 in the inputs do not matter.
		{"high bits ignored", 0xFF000010, 0x00FFFFF0, 0x20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := TimestampDelta(tt.newer, tt.older); got != tt.want {
				t.Fatalf("TimestampDelta(%#x, %#x) = %#x, want %#x", tt.newer, tt.older, got, tt.want)
			}
		})
	}
}

func TestTxBytesDelta(t *testing.T) {
	tests := []struct {
		name         string
		newer, older uint32
		want         uint64
	}{
		{"same", 9, 9, 0},
		{"forward", 12, 2, 10 * 128},
		{"across the wrap", 0x00003, 0xFFFFE, 5 * 128},
		{"just wrapped", 0, MaxTxBytes, 128},
		{"largest", MaxTxBytes, 0, (1<<20 - 1) * 128},
		{"high bits ignored", 0xFFF00003, 0x000FFFFE, 5 * 128},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := TxBytesDelta(tt.newer, tt.older); got != tt.want {
				t.Fatalf("TxBytesDelta(%#x, %#x) = %d, want %d", tt.newer, tt.older, got, tt.want)
			}
		})
	}
}

func TestQlenUnits(t *testing.T) {
	tests := []struct {
		bytes uint64
		want  uint16
	}{
		{0, 0},
		{79, 0},
		{80, 1},
		{159, 1},
		{8000, 100},
		{5_242_799, 0xFFFE},
		{5_242_800, 0xFFFF},
		{5_242_880, 0xFFFF},
		{1 << 40, 0xFFFF},
		{^uint64(0), 0xFFFF},
	}
	for _, tt := range tests {
		if got := QlenUnits(tt.bytes); got != tt.want {
			t.Errorf("QlenUnits(%d) = %#x, want %#x", tt.bytes, got, tt.want)
		}
		if got := QueueBytesFromUnits(tt.want); got > tt.bytes || (tt.want < MaxQlen && tt.bytes-got >= QlenUnit) {
			t.Errorf("QueueBytesFromUnits(QlenUnits(%d)) = %d, not the bytes rounded down to 80", tt.bytes, got)
		}
	}
}

func TestSampleGap(t *testing.T) {
	tests := []struct {
		rate uint64
		wrap time.Duration
		gap  time.Duration
	}{
		{0, 0, MaxSampleGap},
		{10e9, 107_374_182 * time.Nanosecond, MaxSampleGap},
		{50e9, 21_474_836 * time.Nanosecond, MaxSampleGap},
		{100e9, 10_737_418 * time.Nanosecond, 5_368_709 * time.Nanosecond},
		{800e9, 1_342_177 * time.Nanosecond, 671_088 * time.Nanosecond},
	}
	for _, tt := range tests {
		if got := TxBytesWrapPeriod(tt.rate); got != tt.wrap {
			t.Errorf("TxBytesWrapPeriod(%s) = %v, want %v", FormatRate(tt.rate), got, tt.wrap)
		}
		if got := SampleGapForRate(tt.rate); got != tt.gap {
			t.Errorf("SampleGapForRate(%s) = %v, want %v", FormatRate(tt.rate), got, tt.gap)
		}
	}
	// The timestamp wraps every 2^24 ns; MaxSampleGap must stay under half.
	if MaxSampleGap > (1<<TimestampBits)*time.Nanosecond/2 {
		t.Fatalf("MaxSampleGap %v is not under half the timestamp wrap period", MaxSampleGap)
	}
}
