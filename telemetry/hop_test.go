package telemetry

import (
	"errors"
	"testing"
)

func TestEncodeHop(t *testing.T) {
	// The fields are 4, 24, 20 and 16 bits wide, all multiples of a nibble,
	// so the hex word is the fields' hex digits side by side:
	// rate code (1 digit), timestamp (6), txBytes (5), qlen (4).
	tests := []struct {
		name string
		hop  Hop
		want uint64
	}{
		{"smallest", Hop{RateBps: 100e6}, 0x1_000000_00000_0000},
		{"largest", Hop{RateBps: 800e9, Timestamp: MaxTimestamp, TxBytes: MaxTxBytes, Qlen: MaxQlen}, 0xC_FFFFFF_FFFFF_FFFF},
		{"nibbles", Hop{RateBps: 10e9, Timestamp: 0x123456, TxBytes: 0xABCDE, Qlen: 0x0102}, 0x5_123456_ABCDE_0102},
		{"timestamp lsb", Hop{RateBps: 1e9, Timestamp: 1}, 0x2_000001_00000_0000},
		{"txBytes lsb", Hop{RateBps: 1e9, TxBytes: 1}, 0x2_000000_00001_0000},
		{"qlen lsb", Hop{RateBps: 1e9, Qlen: 1}, 0x2_000000_00000_0001},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := EncodeHop(tt.hop)
			if err != nil || w != tt.want {
				t.Fatalf("EncodeHop(%+v) = %#016x, %v; want %#016x", tt.hop, w, err, tt.want)
			}
			h, err := DecodeHop(w)
			if err != nil || h != tt.hop {
				t.Fatalf("DecodeHop(%#016x) = %+v, %v; want %+v", w, h, err, tt.hop)
			}
		})
	}
}

func TestEncodeHopInvalid(t *testing.T) {
	tests := []struct {
		name string
		hop  Hop
	}{
		{"zero rate", Hop{}},
		{"odd rate", Hop{RateBps: 3e9}},
		{"timestamp over 24 bits", Hop{RateBps: 1e9, Timestamp: MaxTimestamp + 1}},
		{"txBytes over 20 bits", Hop{RateBps: 1e9, TxBytes: MaxTxBytes + 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if w, err := EncodeHop(tt.hop); err == nil {
				t.Fatalf("EncodeHop(%+v) = %#016x, want an error", tt.hop, w)
			}
		})
	}
}

func TestDecodeHopInvalid(t *testing.T) {
	tests := []struct {
		name      string
		word      uint64
		malformed bool
	}{
		{"empty", 0, false},
		{"empty with timestamp bits", 0x0_000001_00000_0000, true},
		{"empty with qlen bits", 0x0_000000_00000_0001, true},
		{"reserved 13", 0xD_000000_00000_0000, true},
		{"reserved 14", 0xE_123456_12345_1234, true},
		{"reserved 15", 0xF_FFFFFF_FFFFF_FFFF, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := DecodeHop(tt.word)
			if err == nil {
				t.Fatalf("DecodeHop(%#016x) = %+v, want an error", tt.word, h)
			}
			if got := errors.Is(err, ErrMalformed); got != tt.malformed {
				t.Fatalf("DecodeHop(%#016x): errors.Is(%v, ErrMalformed) = %v, want %v", tt.word, err, got, tt.malformed)
			}
		})
	}
}

func TestHopQueueBytes(t *testing.T) {
	h := Hop{RateBps: 1e9, Qlen: 100}
	if got := h.QueueBytes(); got != 8000 {
		t.Fatalf("QueueBytes() = %d, want 8000", got)
	}
	if got := (Hop{Qlen: MaxQlen}).QueueBytes(); got != 5_242_800 {
		t.Fatalf("QueueBytes() at saturation = %d, want 5242800", got)
	}
}
