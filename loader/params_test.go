package loader

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/ccload/ccload/internal/kernel"
)

func TestParamParse(t *testing.T) {
	gamma := ParamSpec{Name: "gamma", Unit: UnitFraction, Scale: fpOne, Min: fpOne / 100, Max: fpOne}
	rtt := ParamSpec{Name: "base_rtt", Unit: UnitDuration, Min: 1, Max: 1 << 24, Zero: "track"}
	bw := ParamSpec{Name: "host_bw", Unit: UnitBandwidth, Min: 1e6, Max: 1.6e12}
	size := ParamSpec{Name: "beta", Unit: UnitBytes, Min: 1, Max: 1 << 30, Zero: "auto"}
	count := ParamSpec{Name: "shift_g", Unit: UnitCount, Min: 0, Max: 10}

	tests := []struct {
		spec    ParamSpec
		in      string
		want    uint64
		wantErr bool
	}{
		{gamma, "0.9", 58982, false},
		{gamma, "90%", 58982, false},
		{gamma, "1", fpOne, false},
		{gamma, "1.5", 0, true},
		{gamma, "0", 0, true},
		{gamma, "-0.1", 0, true},
		{gamma, "abc", 0, true},
		{gamma, "NaN", 0, true},
		{gamma, "", 0, true},
		{rtt, "20us", 20, false},
		{rtt, "20µs", 20, false},
		{rtt, "1.5ms", 1500, false},
		{rtt, "0", 0, false},
		{rtt, "20", 0, true},
		{rtt, "20xs", 0, true},
		{rtt, "500ns", 0, true},
		{rtt, "-5us", 0, true},
		{rtt, "1h", 0, true},
		{bw, "10gbit", 10e9, false},
		{bw, "25G", 25e9, false},
		{bw, "100mbit", 100e6, false},
		{bw, "1.5Gbit", 1.5e9, false},
		{bw, "10Gbps", 0, true},
		{bw, "10", 0, true},
		{bw, "1kbit", 0, true},
		{bw, "2tbit", 0, true},
		{size, "1500", 1500, false},
		{size, "64KB", 64000, false},
		{size, "64KiB", 65536, false},
		{size, "1MiB", 1 << 20, false},
		{size, "0", 0, false},
		{size, "2GiB", 0, true},
		{size, "lots", 0, true},
		{count, "4", 4, false},
		{count, "11", 0, true},
		{count, "4.5", 0, true},
		{count, "-1", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.spec.Name+"="+tt.in, func(t *testing.T) {
			got, err := tt.spec.Parse(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Parse(%q) = %d, want an error", tt.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("Parse(%q) = %d, want %d", tt.in, got, tt.want)
			}
		})
	}
}

func TestParamFormatRoundTrip(t *testing.T) {
	for _, cc := range Builtin() {
		for _, p := range cc.Params {
			for _, v := range []uint64{p.Min, p.Max} {
				if v == 0 && p.Zero != "" {
					continue
				}
				text := p.Format(v)
				back, err := p.Parse(text)
				if err != nil {
					t.Errorf("%s.%s: Format(%d) = %q does not parse: %v", cc.Name, p.Name, v, text, err)
					continue
				}
				// Fractions are shown to 4 decimals; allow that rounding.
				diff := int64(back) - int64(v)
				if diff < 0 {
					diff = -diff
				}
				if p.Unit != UnitFraction && diff != 0 || diff > int64(p.Scale/10000+1) {
					t.Errorf("%s.%s: %d -> %q -> %d", cc.Name, p.Name, v, text, back)
				}
			}
		}
	}
}

func TestParseAssignments(t *testing.T) {
	tests := []struct {
		in      []string
		want    map[string]string
		wantErr bool
	}{
		{[]string{"gamma=0.9"}, map[string]string{"gamma": "0.9"}, false},
		{[]string{"gamma=0.9,base_rtt=20us", "beta=3KB"}, map[string]string{"gamma": "0.9", "base_rtt": "20us", "beta": "3KB"}, false},
		{[]string{"gamma"}, nil, true},
		{[]string{"=1"}, nil, true},
		{[]string{"gamma=1", "gamma=2"}, nil, true},
	}
	for _, tt := range tests {
		got, err := ParseAssignments(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseAssignments(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if tt.wantErr {
			if !kernel.IsKind(err, kernel.KindBadParam) {
				t.Errorf("ParseAssignments(%q) error kind: %v", tt.in, err)
			}
			continue
		}
		if len(got) != len(tt.want) {
			t.Errorf("ParseAssignments(%q) = %v, want %v", tt.in, got, tt.want)
		}
		for k, v := range tt.want {
			if got[k] != v {
				t.Errorf("ParseAssignments(%q)[%s] = %q, want %q", tt.in, k, got[k], v)
			}
		}
	}
}

func TestResolveParams(t *testing.T) {
	cc, err := Lookup("theta_powertcp")
	if err != nil {
		t.Fatal(err)
	}
	auto := func(p ParamSpec) (uint64, string, error) { return 25e9, "auto note", nil }

	resolve := func(given map[string]string, cur map[string]uint64) (map[string]uint64, []string, error) {
		checked, err := parseGiven(cc.Params, given)
		if err != nil {
			return nil, nil, err
		}
		return resolveParams(cc.Params, checked, cur, auto)
	}

	vals, notes, err := resolve(map[string]string{"gamma": "0.5"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if vals["gamma"] != fpOne/2 || vals["host_bw"] != 25e9 || vals["expected_flows"] != 10 || vals["base_rtt"] != 0 {
		t.Fatalf("unexpected values %v", vals)
	}
	if len(notes) != 1 {
		t.Fatalf("notes = %v, want the auto note", notes)
	}

	// Values not given keep the current ones; auto is not re-resolved.
	cur := map[string]uint64{"gamma": 1000, "base_rtt": 20, "host_bw": 1e9, "expected_flows": 3, "beta": 0}
	vals, _, err = resolve(map[string]string{"base_rtt": "30us"}, cur)
	if err != nil {
		t.Fatal(err)
	}
	if vals["gamma"] != 1000 || vals["base_rtt"] != 30 || vals["host_bw"] != 1e9 {
		t.Fatalf("unexpected values %v", vals)
	}

	for _, bad := range []map[string]string{
		{"gama": "0.9"},
		{"gamma": "2"},
		{"base_rtt": "20"},
	} {
		if _, _, err := resolve(bad, nil); !kernel.IsKind(err, kernel.KindBadParam) || kernel.FixOf(err) == "" {
			t.Errorf("parseGiven(%v) = %v, want a bad-parameter error with a fix", bad, err)
		}
	}
}

func TestParamLayoutMatchesBTF(t *testing.T) {
	for _, cc := range Builtin() {
		spec, err := cc.load()
		if err != nil {
			t.Fatal(err)
		}
		l, err := newParamLayout(spec.Maps[mapParams].Value, cc.Params, cc.derived)
		if err != nil {
			t.Fatalf("%s: %v", cc.Name, err)
		}
		buf := make([]byte, l.size)
		for i, p := range cc.Params {
			if err := l.put(buf, p.Name, uint64(i+1)); err != nil {
				t.Fatal(err)
			}
		}
		for i, p := range cc.Params {
			if got := l.get(buf, p.Name); got != uint64(i+1) {
				t.Errorf("%s.%s: read back %d, want %d (fields overlap?)", cc.Name, p.Name, got, i+1)
			}
		}
	}
}

func TestSelectCongControl(t *testing.T) {
	for _, args := range []int{2, 4} {
		cc, _ := Lookup("theta_powertcp")
		spec, err := cc.load()
		if err != nil {
			t.Fatal(err)
		}
		if err := selectCongControl(spec, args); err != nil {
			t.Fatal(err)
		}
		attached := map[string]string{}
		for name, p := range spec.Programs {
			if p.AttachTo == "tcp_congestion_ops:cong_control" {
				attached[name] = p.AttachTo
			}
		}
		want := "theta_powertcp_cong_control"
		if args == 2 {
			want = "theta_powertcp_cong_control_legacy"
		}
		if len(attached) != 1 || attached[want] == "" {
			t.Errorf("args=%d: cong_control programs %v, want only %s", args, attached, want)
		}
	}
}

func TestLookupUnknown(t *testing.T) {
	_, err := Lookup("powertcp_nope")
	if !kernel.IsKind(err, kernel.KindUnknownCC) {
		t.Fatalf("Lookup: %v, want unknown-CC error", err)
	}
	if kernel.FixOf(err) == "" {
		t.Fatal("unknown-CC error has no fix")
	}
}

func TestParamsString(t *testing.T) {
	for _, tc := range []struct {
		in   map[string]string
		want string
	}{
		{nil, ""},
		{map[string]string{"gamma": "0.9"}, "gamma=0.9"},
		{map[string]string{"host_bw": "1gbit", "beta": "0", "gamma": "0.9"}, "beta=0 gamma=0.9 host_bw=1gbit"},
	} {
		if got := ParamsString(tc.in); got != tc.want {
			t.Errorf("ParamsString(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestObjectMapNames checks that every CC object names its maps as the
// loader expects (mapParams, mapStats, ...; see registry.go), and has its
// struct_ops map under cc.opsMap.
func TestObjectMapNames(t *testing.T) {
	for _, cc := range Builtin() {
		spec, err := cc.load()
		if err != nil {
			t.Fatal(err)
		}
		want := []string{cc.opsMap, mapParams, mapStats}
		if cc.Name != "bpf_dctcp" {
			want = append(want, mapEvents, mapTraceOn)
		}
		if cc.UsesINT {
			want = append(want, mapINTStore)
		}
		for _, name := range want {
			if _, ok := spec.Maps[name]; !ok {
				t.Errorf("%s: object has no map %q", cc.Name, name)
			}
		}
		if ops := spec.Maps[cc.opsMap]; ops != nil && ops.Type != ebpf.StructOpsMap {
			t.Errorf("%s: map %q is a %v, want a struct_ops map", cc.Name, cc.opsMap, ops.Type)
		}
	}
}

// TestDecodeTraceEvent checks the decoding of a trace record laid out as
// struct cc_trace_event (bpf/include/ccload.h).
func TestDecodeTraceEvent(t *testing.T) {
	rec := traceRecord{TsNs: 1500, SndCwnd: 10, CwndBytes: 14480, Signal: fpOne / 2, QlenBytes: 3000,
		RttUs: 42, PacingMbps: 950, Mode: 2, Sport: 40000, Dport: 5201}
	rec.Saddr = binary.NativeEndian.Uint32([]byte{198, 18, 0, 1})
	rec.Daddr = binary.NativeEndian.Uint32([]byte{198, 18, 10, 1})
	raw, err := binary.Append(nil, binary.NativeEndian, rec)
	if err != nil {
		t.Fatal(err)
	}
	boot := time.Unix(1000, 0)
	e, err := decodeTraceEvent(raw, boot)
	if err != nil {
		t.Fatal(err)
	}
	want := TraceEvent{Time: boot.Add(1500), Flow: "198.18.0.1:40000 -> 198.18.10.1:5201", SndCwnd: 10, CwndBytes: 14480,
		Signal: 0.5, QlenBytes: 3000, RTT: 42 * time.Microsecond, PacingMbps: 950, Mode: "int"}
	if e != want {
		t.Errorf("decodeTraceEvent = %+v, want %+v", e, want)
	}
	if _, err := decodeTraceEvent(raw[:10], boot); err == nil {
		t.Error("a short record decoded without an error")
	}
}

// TestDerivePower checks the values the loader precomputes for PowerTCP's
// per-ACK path against the quantities they stand for.
func TestDerivePower(t *testing.T) {
	for _, tc := range []struct {
		bw, flows        uint64
		bdp500us         uint64 // host_bw·500µs, bytes
		beta500us        uint64 // host_bw·500µs/flows, bytes
		burst64KiBMicros uint64 // a 64 KiB burst at host_bw, µs
	}{
		{1_000_000_000, 10, 62_500, 6_250, 524},
		{10_000_000_000, 10, 625_000, 62_500, 52},
		{100_000_000_000, 1, 6_250_000, 6_250_000, 5},
		{1_000_000, 1, 62, 62, 524_288},
		{1_600_000_000_000, 1 << 20, 100_000_000, 95, 0},
	} {
		d := derivePower(map[string]uint64{"host_bw": tc.bw, "expected_flows": tc.flows})
		bdp := d["host_Bpus_fp"] * 500 >> 16
		beta := d["beta_Bpus_fp"] * 500 >> 16
		burst := (64 << 10) * d["us_per_B_recip"] >> recipShift
		if bdp != tc.bdp500us || beta != tc.beta500us || burst != tc.burst64KiBMicros {
			t.Errorf("host_bw %d, %d flows: BDP %d B, β %d B, burst %d µs; want %d, %d, %d",
				tc.bw, tc.flows, bdp, beta, burst, tc.bdp500us, tc.beta500us, tc.burst64KiBMicros)
		}
	}
}
