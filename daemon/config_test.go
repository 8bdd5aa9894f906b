package daemon

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ccload/ccload/internal/kernel"
)

func TestParseConfig(t *testing.T) {
	good := `# a host of the fleet
ccs:
  - name: theta_powertcp
    params:
      base_rtt: 20us
      host_bw: auto
  - name: bpf_dctcp
default: theta_powertcp
int:
  peers: [198.18.0.0/15, "fd00::/8"]
  slots: 1
  tag: nth=4
hops:
  - iface: eth1
    rate: 10gbit
    ecn-threshold: 30KB
onramp:
  - iface: eth0
    peers: [198.18.0.0/15]
    threshold: auto
    gain: 1/16
    max-pause: 1ms
    observe: true
    stamp-every-packet: true
clock:
  peers: [198.18.0.0/24]
  port: 3190
reconcile-interval: 10s
`
	_, d, err := ParseConfig([]byte(good), "good.yaml")
	if err != nil {
		t.Fatalf("a good config is refused: %v", err)
	}
	if len(d.CCs) != 2 || d.CCs[0].Params["base_rtt"] != "20us" || d.Default != "theta_powertcp" {
		t.Errorf("CCs %+v, default %q", d.CCs, d.Default)
	}
	if d.INT == nil || d.INT.Slots != 1 || d.INT.Every != 4 || len(d.INT.Peers) != 2 {
		t.Errorf("INT %+v", d.INT)
	}
	if len(d.Hops) != 1 || d.Hops[0].RateBps != 10_000_000_000 || d.Hops[0].ECNThreshold != 30_000 || d.Hops[0].BufferBytes != 1<<20 {
		t.Errorf("hops %+v", d.Hops)
	}
	if len(d.OnRamp) != 1 || !d.OnRamp[0].AutoThreshold || d.OnRamp[0].MaxPause != time.Millisecond || d.OnRamp[0].Gain != 1.0/16 || !d.OnRamp[0].Observe ||
		!d.OnRamp[0].StampEveryPacket {
		t.Errorf("On-Ramp %+v", d.OnRamp)
	}
	if d.Clock == nil || d.Clock.Listen.Port() != 3190 || d.Interval != 10*time.Second {
		t.Errorf("clock %+v, interval %v", d.Clock, d.Interval)
	}

	if _, d, err := ParseConfig(nil, "empty.yaml"); err != nil || len(d.CCs) != 0 || d.INT != nil || d.Interval != DefaultInterval {
		t.Errorf("an empty config: %+v, %v", d, err)
	}

	bad := []struct {
		name, yaml string
		line       int
		want       []string
	}{
		{"unknown key", "ccs:\n  - name: theta_powertcp\n    parms: {}\n", 3, []string{"parms"}},
		{"repeated key", "default: cubic\ndefault: reno\n", 2, []string{`"default" already defined`}},
		{"unknown CC", "ccs:\n  - name: vegas2\n", 2, []string{"ccs[0].name", "unknown congestion control"}},
		{"CC twice", "ccs:\n  - name: hpcc\n  - name: hpcc\n", 3, []string{"ccs[1].name", "already listed at ccs[0]"}},
		{"bad param", "ccs:\n  - name: theta_powertcp\n    params:\n      gamma: 0.5\n      base_rtt: 20xs\n", 5, []string{"ccs[0].params.base_rtt", "20xs"}},
		{"unknown param", "ccs:\n  - name: hpcc\n    params:\n      gama: 1\n", 4, []string{"ccs[0].params.gama", "unknown parameter"}},
		{"default not listed", "default: theta_powertcp\n", 1, []string{"default", "list it under ccs"}},
		{"INT without peers", "int:\n  slots: 2\n", 1, []string{"int.peers", "missing"}},
		{"INT bad prefix", "int:\n  peers: [10.0.0.0/33]\n", 2, []string{"int.peers", "10.0.0.0/33"}},
		{"INT slots", "int:\n  peers: [10.0.0.0/8]\n  slots: 9\n", 3, []string{"int.slots", "9 hop slots"}},
		{"INT tag", "int:\n  peers: [10.0.0.0/8]\n  tag: some\n", 3, []string{"int.tag", "nth=N"}},
		{"hop rate", "hops:\n  - iface: eth1\n    rate: 3gbit\n", 3, []string{"hops[0].rate", "supported"}},
		{"hop without rate", "hops:\n  - iface: eth1\n", 2, []string{"hops[0].rate", "missing"}},
		{"two hops on one interface", "hops:\n  - iface: eth1\n    rate: 1gbit\n  - iface: eth1\n    rate: 1gbit\n", 4, []string{"hops[1].iface", "one hop per interface"}},
		{"On-Ramp gain", "onramp:\n  - iface: eth0\n    peers: [10.0.0.0/8]\n    gain: 2\n", 2, []string{"onramp[0]", "gain 2 is out of range"}},
		{"On-Ramp threshold", "onramp:\n  - iface: eth0\n    peers: [10.0.0.0/8]\n    threshold: soon\n", 4, []string{"onramp[0].threshold", "auto"}},
		{"clock without peers", "clock:\n  port: 1\n", 1, []string{"clock.peers", "missing"}},
		{"interval", "reconcile-interval: 5ms\n", 1, []string{"reconcile-interval", "between 1s and 1h"}},
		{"not YAML", "ccs: [\n", 1, []string{"bad.yaml:"}},
		{"wrong type", "ccs: theta_powertcp\n", 1, []string{"cannot unmarshal"}},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ParseConfig([]byte(tt.yaml), "bad.yaml")
			if err == nil {
				t.Fatalf("accepted:\n%s", tt.yaml)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is not a ConfigError", err)
			}
			if ce.Line != tt.line {
				t.Errorf("line %d, want %d: %v", ce.Line, tt.line, err)
			}
			if tt.name == "unknown CC" && !strings.Contains(kernel.FixOf(err), "theta_powertcp") {
				t.Errorf("the fix %q does not list the CCs", kernel.FixOf(err))
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestParamDrift(t *testing.T) {
	tests := []struct {
		name      string
		want, cur map[string]string
		drift     []string
	}{
		{"equal", map[string]string{"gamma": "0.9"}, map[string]string{"gamma": "0.9", "base_rtt": "0", "expected_flows": "10", "beta": "0", "onramp_holds": "0", "host_bw": "1gbit"}, nil},
		{"same value written differently", map[string]string{"base_rtt": "0.02ms"}, map[string]string{"gamma": "0.9", "base_rtt": "20us", "expected_flows": "10", "beta": "0", "onramp_holds": "0", "host_bw": "1gbit"}, []string{}},
		{"named param drifted", map[string]string{"gamma": "0.8"}, map[string]string{"gamma": "0.9", "base_rtt": "0", "expected_flows": "10", "beta": "0", "onramp_holds": "0"}, []string{"gamma"}},
		{"unnamed param off its default", nil, map[string]string{"gamma": "0.5", "base_rtt": "0", "expected_flows": "10", "beta": "0", "onramp_holds": "0"}, []string{"gamma"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := paramDrift("theta_powertcp", tt.want, tt.cur)
			if err != nil {
				t.Fatal(err)
			}
			if tt.name == "same value written differently" {
				delete(got, "base_rtt")
			}
			if len(got) != len(tt.drift) {
				t.Fatalf("drift %v, want %v", got, tt.drift)
			}
			for _, k := range tt.drift {
				if _, ok := got[k]; !ok {
					t.Errorf("drift %v lacks %s", got, k)
				}
			}
		})
	}
}
