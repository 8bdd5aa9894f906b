package testbed

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPairFlows(t *testing.T) {
	baseline := initVeths(t)
	p := newTestPair(t)
	names := netnsNames(p.A, p.B)

	const size = 8 << 20
	tests := []struct {
		name string
		dst  netip.Addr
	}{
		{"ipv4", p.B.Addr},
		{"ipv6", p.B.Addr6},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := startTestSink(t, p.B, netip.AddrPortFrom(tt.dst, 0))
			cfg := FlowConfig{CC: "cubic", Bytes: size, Seed: uint64(i) + 1, Timeout: 10 * time.Second}

			res, err := SendFlow(testContext(t), p.A, sink.Addr, cfg)
			if err != nil {
				t.Fatalf("SendFlow: %v", err)
			}
			if res.CC != "cubic" {
				t.Errorf("FlowResult.CC = %q, want cubic", res.CC)
			}
			if res.Bytes != size {
				t.Errorf("FlowResult.Bytes = %d, want %d", res.Bytes, size)
			}
			if res.Info == nil || res.Info.Rtt == 0 {
				t.Errorf("FlowResult.Info = %+v, want a TCP_INFO snapshot with an RTT", res.Info)
			}

			results := sink.Results()
			if len(results) != 1 {
				t.Fatalf("sink has %d results, want 1", len(results))
			}
			r := results[0]
			if !r.OK || r.Bytes != size || r.Declared != size || r.Seed != cfg.Seed {
				t.Errorf("sink result = %+v, want OK with %d bytes and seed %d", r, size, cfg.Seed)
			}
			if r.Remote.Addr() != p.A.Addr && r.Remote.Addr() != p.A.Addr6 {
				t.Errorf("sink saw remote %s, want one of A's addresses", r.Remote)
			}
			t.Logf("%s: %d bytes in %v = %.2f Gbit/s, rtt %dus, cc %s",
				tt.name, res.Bytes, res.Duration, res.Throughput/1e9, res.Info.Rtt, res.CC)
		})
	}

	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	assertTornDown(t, names, baseline)
}

func TestHostDo(t *testing.T) {
	p := newTestPair(t)

	// ifnames must not call t.Fatal: inside Do it runs on another goroutine.
	ifnames := func() ([]string, error) {
		ifs, err := net.Interfaces()
		if err != nil {
			return nil, err
		}
		var names []string
		for _, i := range ifs {
			names = append(names, i.Name)
		}
		return names, nil
	}

	var inside []string
	err := p.A.Do(func() error {
		var err error
		inside, err = ifnames()
		return err
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if !slices.ContainsFunc(inside, ourIfname.MatchString) {
		t.Errorf("interfaces inside %s = %v, want our veth end", p.A.Name, inside)
	}
	outside, err := ifnames()
	if err != nil {
		t.Fatalf("list interfaces: %v", err)
	}
	if slices.ContainsFunc(outside, ourIfname.MatchString) {
		t.Errorf("interfaces outside %s include ours after Do returned: %v", p.A.Name, outside)
	}

	// A panic inside fn reaches the caller, and the host stays usable.
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Errorf("recovered %v, want boom", v)
			}
		}()
		_ = p.A.Do(func() error { panic("boom") })
	}()
	if err := p.A.Do(func() error { return nil }); err != nil {
		t.Errorf("Do after panic: %v", err)
	}

	out, err := p.B.Command(testContext(t), "ip", "-o", "addr", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("Command: %v: %s", err, out)
	}
	for _, a := range []netip.Addr{p.B.Addr, p.B.Addr6} {
		if !strings.Contains(string(out), a.String()) {
			t.Errorf("`ip addr` in %s does not show %s:\n%s", p.B.Name, a, out)
		}
	}
}

func TestSendFlowUnknownCC(t *testing.T) {
	p := newTestPair(t)
	sink := startTestSink(t, p.B, netip.AddrPortFrom(p.B.Addr, 0))

	const cc = "ccl-no-such-cc"
	_, err := SendFlow(testContext(t), p.A, sink.Addr, FlowConfig{CC: cc, Bytes: 1 << 10, Timeout: 5 * time.Second})
	if err == nil {
		t.Fatalf("SendFlow with CC %q succeeded", cc)
	}
	if !strings.Contains(err.Error(), cc) {
		t.Errorf("error %q does not name the congestion control %q", err, cc)
	}
	t.Logf("error: %v", err)
}

func TestSendFlowInvalidConfig(t *testing.T) {
	p := newTestPair(t)
	dst := netip.AddrPortFrom(p.B.Addr, 9)

	tests := []struct {
		name string
		dst  netip.AddrPort
		cfg  FlowConfig
	}{
		{"no timeout", dst, FlowConfig{Bytes: 1}},
		{"negative bytes", dst, FlowConfig{Bytes: -1, Timeout: time.Second}},
		{"invalid destination", netip.AddrPort{}, FlowConfig{Bytes: 1, Timeout: time.Second}},
		{"bytes and for", dst, FlowConfig{Bytes: 1, For: time.Millisecond, Timeout: time.Second}},
		{"negative for", dst, FlowConfig{For: -time.Millisecond, Timeout: time.Second}},
		{"for not below timeout", dst, FlowConfig{For: time.Second, Timeout: time.Second}},
		{"negative sample interval", dst, FlowConfig{Bytes: 1, SampleEvery: -time.Millisecond, Timeout: time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := SendFlow(testContext(t), p.A, tt.dst, tt.cfg); err == nil {
				t.Errorf("SendFlow(%v, %+v) succeeded", tt.dst, tt.cfg)
			}
		})
	}
}
