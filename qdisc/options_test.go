package qdisc

import (
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

func TestFQConfigOptions(t *testing.T) {
	u32 := func(v uint32) *uint32 { return &v }
	tests := []struct {
		name    string
		cfg     FQConfig
		limit   *uint32
		flow    *uint32
		horizon *uint32 // µs
		maxRate *uint32 // bytes/s
		err     string
	}{
		{name: "defaults"},
		{name: "limits", cfg: FQConfig{Limit: 20000, FlowLimit: 1000}, limit: u32(20000), flow: u32(1000)},
		{name: "horizon", cfg: FQConfig{Horizon: 2 * time.Second}, horizon: u32(2_000_000)},
		{name: "horizon rounds down to µs", cfg: FQConfig{Horizon: 1500 * time.Nanosecond}, horizon: u32(1)},
		{name: "horizon below resolution", cfg: FQConfig{Horizon: 999 * time.Nanosecond}, err: "below fq's resolution"},
		{name: "negative horizon", cfg: FQConfig{Horizon: -time.Second}, err: "negative"},
		{name: "horizon too large", cfg: FQConfig{Horizon: 2 * time.Hour}, err: "exceeds"},
		{name: "flow max rate", cfg: FQConfig{FlowMaxRateBps: 100_000_000}, maxRate: u32(12_500_000)},
		{name: "flow max rate at fq's largest", cfg: FQConfig{FlowMaxRateBps: 8 * (1<<32 - 2)}, maxRate: u32(1<<32 - 2)},
		{name: "flow max rate above fq's largest", cfg: FQConfig{FlowMaxRateBps: 8 * (1<<32 - 1)}, err: "give 8 bit/s to"},
		{name: "flow max rate below a byte per second", cfg: FQConfig{FlowMaxRateBps: 7}, err: "give 8 bit/s to"},
	}
	eq := func(a, b *uint32) bool { return (a == nil && b == nil) || (a != nil && b != nil && *a == *b) }
	show := func(p *uint32) any {
		if p == nil {
			return nil
		}
		return *p
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.cfg.options()
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("options() error = %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.HorizonDrop == nil || *got.HorizonDrop != 1 {
				t.Errorf("options() sets horizon drop to %v, want 1", got.HorizonDrop)
			}
			if !eq(got.PLimit, tt.limit) || !eq(got.FlowPLimit, tt.flow) || !eq(got.Horizon, tt.horizon) || !eq(got.FlowMaxRate, tt.maxRate) {
				t.Errorf("options() = limit %v, flow limit %v, horizon %v, flow max rate %v; want %v, %v, %v, %v",
					show(got.PLimit), show(got.FlowPLimit), show(got.Horizon), show(got.FlowMaxRate),
					show(tt.limit), show(tt.flow), show(tt.horizon), show(tt.maxRate))
			}
		})
	}
}

func TestHandleString(t *testing.T) {
	tests := []struct {
		h    uint32
		want string
	}{
		{0xffffffff, "root"},
		{fqHandle, "cc0f:"},
		{clsactHandle, "ffff:"},
		{clsactParent, "ffff:fff1"},
		{clsactFilterParent(Ingress), "ffff:fff2"},
		{clsactFilterParent(Egress), "ffff:fff3"},
		{0, "0:"},
		{0x10010, "1:10"},
	}
	for _, tt := range tests {
		if got := handleString(tt.h); got != tt.want {
			t.Errorf("handleString(%#x) = %q, want %q", tt.h, got, tt.want)
		}
	}
}

func TestEnumStrings(t *testing.T) {
	tests := []struct {
		v    interface{ String() string }
		want string
	}{
		{Egress, "egress"},
		{Ingress, "ingress"},
		{Direction(7), "Direction(7)"},
		{MethodAuto, "auto"},
		{MethodTCX, "tcx"},
		{MethodClsact, "clsact"},
		{Method(9), "Method(9)"},
	}
	for _, tt := range tests {
		if got := tt.v.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
	if Egress.tcxAttachType() != ebpf.AttachTCXEgress || Ingress.tcxAttachType() != ebpf.AttachTCXIngress {
		t.Error("tcxAttachType maps the directions wrongly")
	}
}

func TestAttachOptionsValidate(t *testing.T) {
	// Validation happens before any program or interface is touched, so
	// an unloaded program value is enough for the type check.
	tests := []struct {
		name string
		opts AttachOptions
		prog *ebpf.Program
		err  string
	}{
		{name: "no program", err: "no program"},
		{name: "bad direction", opts: AttachOptions{Direction: 3}, err: "invalid direction"},
		{name: "bad method", opts: AttachOptions{Method: -1}, err: "invalid method"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Attach("lo", tt.prog, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("Attach() error = %v, want one containing %q", err, tt.err)
			}
		})
	}
}
