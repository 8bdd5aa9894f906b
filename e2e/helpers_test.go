package e2e

import (
	"testing"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/loader"
	"github.com/ccload/ccload/telemetry/sockops"
	"github.com/ccload/ccload/testbed"
)

// The bottleneck of the dumbbells in these tests.
const (
	bottleneckRate   = 1_000_000_000 // bits/s
	bottleneckBuffer = 1 << 20       // bytes
)

// sysctlDefault is the default CC's sysctl, below /proc/sys.
const sysctlDefault = "net/ipv4/tcp_congestion_control"

// newSys returns ccload as the CLI wires it, on a pin root of this test
// process's own: the CC loader, given INT's store, and INT tagging.
func newSys(t testing.TB, opts ...loader.Option) (*loader.Loader, *sockops.INT) {
	t.Helper()
	h := testutil.Host(t)
	n := sockops.New(h)
	return loader.New(h, append([]loader.Option{loader.WithSharedMaps(n.Store())}, opts...)...), n
}

// attachForTest attaches a CC and detaches it when the test ends.
func attachForTest(t testing.TB, l *loader.Loader, req loader.AttachRequest) *loader.AttachResult {
	t.Helper()
	res, err := l.Attach(req)
	if err != nil {
		t.Fatalf("attach %s: %v (fix: %s)", req.Name, err, kernel.FixOf(err))
	}
	t.Cleanup(func() {
		if _, err := l.Detach(req.Name); err != nil {
			t.Errorf("cleanup: detach %s: %v", req.Name, err)
		}
	})
	return res
}

// ccStats reads the counters of an attached CC.
func ccStats(t testing.TB, l *loader.Loader, name string) loader.Stats {
	t.Helper()
	s, err := l.Stats(name)
	if err != nil {
		t.Fatalf("counters of %s: %v", name, err)
	}
	return s
}

// newDumbbell builds the tests' usual dumbbell: senders, a 1 Gbit/s
// bottleneck with a 1 MiB buffer, torn down when the test ends.
func newDumbbell(t testing.TB, senders int) *testbed.Dumbbell {
	t.Helper()
	return testnet.NewDumbbell(t, testbed.DumbbellConfig{
		Senders: senders, BottleneckRate: bottleneckRate, BufferBytes: bottleneckBuffer,
	})
}
