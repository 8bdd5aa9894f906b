package testbed

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/ccload/ccload/internal/testutil"
)

func TestParseCounters(t *testing.T) {
	const two = "TcpExt: SyncookiesSent TCPLossProbes\nTcpExt: 0 42\nTcp: RtoMin MaxConn\nTcp: 200 -1\n"
	for _, tc := range []struct {
		name, text, group string
		want              map[string]int64
		err               bool
	}{
		{name: "TcpExt", text: two, group: "TcpExt", want: map[string]int64{"SyncookiesSent": 0, "TCPLossProbes": 42}},
		{name: "the second group, a negative value", text: two, group: "Tcp", want: map[string]int64{"RtoMin": 200, "MaxConn": -1}},
		{name: "absent", text: two, group: "MPTcpExt", err: true},
		{name: "values short", text: "TcpExt: A B\nTcpExt: 1\n", group: "TcpExt", err: true},
		{name: "no values line", text: "TcpExt: A B\n", group: "TcpExt", err: true},
		{name: "not a number", text: "TcpExt: A\nTcpExt: x\n", group: "TcpExt", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseCounters(tc.text, tc.group)
			if (err != nil) != tc.err {
				t.Fatalf("err %v, want an error: %v", err, tc.err)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestHostCounters reads a fresh namespace's counters, which are its own:
// no TCP segment has been received there yet, whatever the host's
// namespace has counted.
func TestHostCounters(t *testing.T) {
	testutil.RequireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := NewPair(ctx, "ctc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	tcp, err := p.A.Counters("snmp", "Tcp")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := tcp["InSegs"]; !ok || v != 0 {
		t.Errorf("Tcp InSegs %d (present %v), want 0 in a new namespace", v, ok)
	}
	ext, err := p.A.Counters("netstat", "TcpExt")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := ext["TCPLossProbes"]; !ok || v != 0 {
		t.Errorf("TcpExt TCPLossProbes %d (present %v), want 0 in a new namespace", v, ok)
	}
}
