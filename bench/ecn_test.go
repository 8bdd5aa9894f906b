package bench

import (
	"context"
	"testing"
	"time"

	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/telemetry/sockops"
)

// TestProbeECN checks that the probe tells CCs that need ECN from those
// that don't, by their flags and not by name: the kernel's dctcp (where
// the kernel has it, as the vmtests guests do) as well as bpf_dctcp.
func TestProbeECN(t *testing.T) {
	testutil.RequireKernelCC(t, "bpf_dctcp")
	host := testutil.Host(t)
	l := loader.New(host, loader.WithSharedMaps(sockops.New(host).Store()))
	restore, err := AttachForRun(l, []string{"bpf_dctcp"}, "the test", nil, nil)
	if err != nil {
		t.Fatalf("attach bpf_dctcp: %v", err)
	}
	t.Cleanup(func() {
		if err := restore(); err != nil {
			t.Error(err)
		}
	})
	p := testnet.NewPair(t)
	cases := []struct {
		cc   string
		want bool
	}{{"reno", false}, {"cubic", false}, {"bpf_dctcp", true}, {"dctcp", true}}
	for _, tc := range cases {
		t.Run(tc.cc, func(t *testing.T) {
			if tc.cc == "dctcp" && !testutil.Registered(t, "dctcp") {
				testutil.SkipKernelLacks(t, "the tcp_dctcp module")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			got, err := ProbeECN(ctx, p.B, tc.cc)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("ProbeECN(%s) = %v, want %v", tc.cc, got, tc.want)
			}
		})
	}
}
