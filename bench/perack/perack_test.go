package perack

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
	"github.com/ccload/ccload/testbed"
)

// TestNullCC registers the null CC, sends a flow through it over a veth
// pair, and checks that the flow ran it, that a second registration fails
// with an error that names the clash, and that Close unregisters it.
func TestNullCC(t *testing.T) {
	testutil.RequireKernelCC(t, NullName)
	p := testnet.NewPair(t)
	null, err := RegisterNull()
	if err != nil {
		t.Fatalf("RegisterNull: %v", err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			null.Close()
		}
	})
	if !testutil.Registered(t, NullName) {
		t.Fatalf("%s is not in tcp_available_congestion_control after RegisterNull", NullName)
	}
	if _, err := RegisterNull(); err == nil || !strings.Contains(err.Error(), "registered already") {
		t.Errorf("a second RegisterNull: %v, want an error about the name clash", err)
	}

	sink := testnet.StartSink(t, p.B, p.B.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := testbed.SendFlow(ctx, p.A, sink.Addr,
		testbed.FlowConfig{CC: NullName, Bytes: 1 << 20, Seed: 3, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("a flow through %s: %v", NullName, err)
	}
	if res.CC != NullName {
		t.Errorf("the flow ran %q, want %s", res.CC, NullName)
	}

	if err := null.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	closed = true
	// The kernel unregisters a struct_ops CC once its link is gone; the
	// flow's socket, closed already, holds no reference.
	deadline := time.Now().Add(5 * time.Second)
	for testutil.Registered(t, NullName) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if testutil.Registered(t, NullName) {
		t.Errorf("%s is still registered 5 s after Close", NullName)
	}
}
