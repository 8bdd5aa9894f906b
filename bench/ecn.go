package bench

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/ccload/ccload/testbed"
)

// tcpiOptECN is TCP_INFO's tcpi_options bit for a connection that
// negotiated ECN (include/uapi/linux/tcp.h).
const tcpiOptECN = 0x8

// probeECN reports whether cc asks for ECN by itself; see ProbeECN. It
// probes in the receiver's netns.
func (r *runner) probeECN(ctx context.Context, cc string) (bool, error) {
	return ProbeECN(ctx, r.topo.Receiver, cc)
}

// ProbeECN reports whether congestion control cc asks for ECN by itself,
// as a CC with TCP_CONG_NEEDS_ECN (DCTCP) does. The kernel exposes no CC's
// flags, so ProbeECN connects inside h's netns, over h's own address, from
// a socket running cc to a listener running cc, and reads from TCP_INFO
// whether ECN was negotiated. With net.ipv4.tcp_ecn at 2, the kernel's
// default, a socket asks for ECN only when its CC needs it, so the answer
// comes from the CC's flags, for ccload's CCs and the kernel's alike; the
// probe sets the sysctl to 2 in h's netns while it runs if it is not.
func ProbeECN(ctx context.Context, h *testbed.Host, cc string) (bool, error) {
	const ecnSysctl = "/proc/sys/net/ipv4/tcp_ecn"
	var was string
	if err := h.Do(func() error {
		b, err := os.ReadFile(ecnSysctl)
		was = strings.TrimSpace(string(b))
		if err == nil && was != "2" {
			err = os.WriteFile(ecnSysctl, []byte("2"), 0o644)
		}
		return err
	}); err != nil {
		return false, fmt.Errorf("probe whether %s uses ECN: net.ipv4.tcp_ecn in netns %s: %w", cc, h.Name, err)
	}
	if was != "2" {
		defer h.Do(func() error { return os.WriteFile(ecnSysctl, []byte(was), 0o644) })
	}
	sink, err := testbed.StartSinkCC(h, netip.AddrPortFrom(h.Addr, 0), cc)
	if err != nil {
		return false, fmt.Errorf("probe whether %s uses ECN: %w", cc, err)
	}
	defer sink.Close()
	res, err := testbed.SendFlow(ctx, h, sink.Addr, testbed.FlowConfig{CC: cc, Bytes: 1000, Seed: 7, Timeout: 10 * time.Second})
	if err != nil {
		return false, fmt.Errorf("probe whether %s uses ECN: %w", cc, err)
	}
	if res.Info == nil {
		return false, fmt.Errorf("probe whether %s uses ECN: no TCP_INFO from the probe connection", cc)
	}
	return res.Info.Options&tcpiOptECN != 0, nil
}
