package bench

import (
	"maps"
	"strings"
	"testing"

	"github.com/ccload/ccload/loader"
)

func TestParseCCParams(t *testing.T) {
	tests := []struct {
		name  string
		specs []string
		want  map[string]map[string]string
		err   string
	}{
		{name: "none", want: map[string]map[string]string{}},
		{name: "one", specs: []string{"theta_powertcp:beta=600B"},
			want: map[string]map[string]string{"theta_powertcp": {"beta": "600B"}}},
		{name: "two CCs, two params", specs: []string{"theta_powertcp:beta=600B", "hpcc:eta=0.9", "theta_powertcp:gamma=0.8"},
			want: map[string]map[string]string{"theta_powertcp": {"beta": "600B", "gamma": "0.8"}, "hpcc": {"eta": "0.9"}}},
		{name: "value with an equals sign", specs: []string{"x:a=b=c"}, want: map[string]map[string]string{"x": {"a": "b=c"}}},
		{name: "no CC", specs: []string{"beta=600B"}, err: "want CC:NAME=VALUE"},
		{name: "no value", specs: []string{"theta_powertcp:beta"}, err: "want CC:NAME=VALUE"},
		{name: "empty value", specs: []string{"theta_powertcp:beta="}, err: "want CC:NAME=VALUE"},
		{name: "empty CC", specs: []string{":beta=1"}, err: "want CC:NAME=VALUE"},
		{name: "twice", specs: []string{"theta_powertcp:beta=1", "theta_powertcp:beta=2"}, err: "theta_powertcp's beta is given twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseCCParams(tt.specs)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseCCParams(%q) error %v, want one containing %q", tt.specs, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseCCParams(%q): %v", tt.specs, err)
			}
			if !maps.EqualFunc(got, tt.want, maps.Equal) {
				t.Errorf("ParseCCParams(%q) = %v, want %v", tt.specs, got, tt.want)
			}
		})
	}
}

func TestCheckCCParams(t *testing.T) {
	beta := map[string]string{"beta": "600B"}
	tests := []struct {
		name     string
		user     map[string]map[string]string
		attached map[string]bool
		err      []string
	}{
		{name: "none"},
		{name: "a CC of the run", user: map[string]map[string]string{"theta_powertcp": beta}},
		{name: "not in --cc", user: map[string]map[string]string{"hpcc": beta}, err: []string{"--cc-param for hpcc", "not in --cc (cubic,theta_powertcp)"}},
		{name: "a kernel CC", user: map[string]map[string]string{"cubic": beta}, err: []string{"--cc-param for cubic", "only ccload's CCs"}},
		{name: "attached already", user: map[string]map[string]string{"theta_powertcp": beta}, attached: map[string]bool{"theta_powertcp": true},
			err: []string{"attached already", "ccload set theta_powertcp"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkCCParams(tt.user, []string{"cubic", "theta_powertcp"}, tt.attached)
			if len(tt.err) == 0 {
				if err != nil {
					t.Fatalf("checkCCParams: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("checkCCParams passed, want an error containing %q", tt.err)
			}
			for _, w := range tt.err {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("checkCCParams error %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestWithCCParams(t *testing.T) {
	theta, err := loader.Lookup("theta_powertcp")
	if err != nil {
		t.Fatal(err)
	}
	hpcc, err := loader.Lookup("hpcc")
	if err != nil {
		t.Fatal(err)
	}
	own := map[string]string{"host_bw": "100mbit"}
	base := func(cc *loader.CC) map[string]string { return own }
	user := map[string]map[string]string{"theta_powertcp": {"beta": "600B", "host_bw": "1gbit"}}
	tests := []struct {
		name string
		base func(*loader.CC) map[string]string
		cc   *loader.CC
		want map[string]string
	}{
		{name: "the user's over the bench's", base: base, cc: theta, want: map[string]string{"beta": "600B", "host_bw": "1gbit"}},
		{name: "the bench's alone", base: base, cc: hpcc, want: map[string]string{"host_bw": "100mbit"}},
		{name: "the user's alone", cc: theta, want: map[string]string{"beta": "600B", "host_bw": "1gbit"}},
		{name: "neither", cc: hpcc, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := withCCParams(tt.base, user)(tt.cc)
			if !maps.Equal(got, tt.want) {
				t.Errorf("params of %s = %v, want %v", tt.cc.Name, got, tt.want)
			}
		})
	}
	if len(own) != 1 || own["host_bw"] != "100mbit" {
		t.Errorf("withCCParams changed the bench's own parameters: %v", own)
	}
}
