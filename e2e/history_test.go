package e2e

import (
	"testing"

	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/loader"
)

// TestThetaStartsFromPathHistory sends flows through θ-PowerTCP and checks
// its path history by the CC's own hist_starts counter: a flow after an
// earlier one from the same netns to the same destination starts from what
// that flow learned, a first flow does not, and a flow from another netns
// (another host, in a testbed) does not use the first host's history.
func TestThetaStartsFromPathHistory(t *testing.T) {
	testutil.RequireKernelCC(t, "theta_powertcp")
	l, _ := newSys(t)
	d := newDumbbell(t, 2)
	attachForTest(t, l, loader.AttachRequest{Name: "theta_powertcp"})
	sink := testnet.StartSink(t, d.Receiver, d.Receiver.Addr)

	starts := func() uint64 { return ccStats(t, l, "theta_powertcp")["hist_starts"] }
	const bytes = 8 << 20 // tens of rounds, so the first flow records its path
	for i, step := range []struct {
		from int
		want uint64 // new history starts
		what string
	}{
		{0, 0, "the first flow from sender 0: nothing known"},
		{0, 1, "a second flow from sender 0: starts from the first one's history"},
		{1, 0, "a flow from sender 1, another netns: sender 0's history is not its own"},
		{1, 1, "a second flow from sender 1: starts from its own history"},
	} {
		before := starts()
		sendFlow(t, d.Senders[step.from], sink.Addr, "theta_powertcp", bytes)
		waitSink(t, sink, i+1, bytes)
		if got := starts() - before; got != step.want {
			t.Errorf("%s: %d history starts, want %d", step.what, got, step.want)
		}
	}
}
