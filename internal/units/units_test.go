package units

import "testing"

func TestParseBandwidth(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{"10gbit", 10_000_000_000, false},
		{"25G", 25_000_000_000, false},
		{"100mbit", 100_000_000, false},
		{"1.5kbit", 1500, false},
		{"800bit", 800, false},
		{"10", 0, true},     // no unit
		{"10gbps", 0, true}, // bits or bytes?
		{"-1gbit", 0, true},
		{"fastgbit", 0, true},
		{"2000tbit", 0, true}, // too large
	}
	for _, tt := range tests {
		got, err := ParseBandwidth(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseBandwidth(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestFormatBandwidthRoundTrip(t *testing.T) {
	for _, v := range []uint64{1, 999, 1000, 1_000_000, 2_500_000_000, 100_000_000_000} {
		s := FormatBandwidth(v)
		back, err := ParseBandwidth(s)
		if err != nil || back != v {
			t.Errorf("ParseBandwidth(FormatBandwidth(%d) = %q) = %d, %v", v, s, back, err)
		}
	}
}

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{"1500", 1500, false},
		{"64KB", 64_000, false},
		{"64KiB", 65_536, false},
		{"1MiB", 1 << 20, false},
		{"1.5k", 1500, false},
		{"lots", 0, true},
		{"-5", 0, true},
		{"2TiB", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseBytes(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseDurationUS(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{"0", 0, false},
		{"20us", 20, false},
		{"1.5ms", 1500, false},
		{"20", 0, true}, // no unit
		{"500ns", 0, true},
		{"-1ms", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseDurationUS(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseDurationUS(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseFraction(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{"0.9", 900, false},
		{"90%", 900, false},
		{"1", 1000, false},
		{"x", 0, true},
		{"-0.1", 0, true},
		{"1/16", 63, false},
		{"1/4", 250, false},
		{"1/0", 0, true},
		{"a/2", 0, true},
		{"-1/2", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseFraction(tt.in, 1000)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseFraction(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}
