package clocksync

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/testutil"
)

// skbCtxSize and skbTstampOff are the size of struct __sk_buff and the
// offset of its tstamp field (linux/bpf.h; the same from 6.1 on).
const (
	skbCtxSize   = 192
	skbTstampOff = 152
)

// TestScrubClearsOnlyReceiveStamps runs clock_scrub under
// BPF_PROG_TEST_RUN on packets whose skb->tstamp holds each kind of time
// a packet can carry at egress, and checks that it clears the wall-clock
// receive stamps and nothing else. (BPF_PROG_TEST_RUN takes only
// tstamp_type 0; that the program leaves monotonic departure times of
// type 1 alone is what TCP through the e2e tests' fq shows.)
func TestScrubClearsOnlyReceiveStamps(t *testing.T) {
	testutil.RequireRoot(t)
	spec, err := loadClock()
	if err != nil {
		t.Fatal(err)
	}
	var objs struct {
		Prog *ebpf.Program `ebpf:"clock_scrub"`
	}
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		t.Fatalf("load clock_scrub: %v", err)
	}
	defer objs.Prog.Close()

	clock := func(id int32) uint64 {
		var ts unix.Timespec
		if err := unix.ClockGettime(id, &ts); err != nil {
			t.Fatal(err)
		}
		return uint64(ts.Nano())
	}
	realtime, tai, mono := clock(unix.CLOCK_REALTIME), clock(unix.CLOCK_TAI), clock(unix.CLOCK_MONOTONIC)
	tests := []struct {
		name    string
		stamp   uint64
		cleared bool
	}{
		{"no stamp", 0, false},
		{"receive stamp just taken", realtime - uint64(time.Millisecond), true},
		{"receive stamp a minute old", realtime - uint64(time.Minute), true},
		{"realtime three minutes ago: no packet waits that long", realtime - uint64(3*time.Minute), false},
		{"monotonic departure time", mono + uint64(time.Millisecond), false},
		// A second ahead, not the usual milliseconds: a slow guest takes
		// longer than that to get from here to the run, and a launch
		// time already past is dropped by etf either way.
		{"SO_TXTIME launch time on CLOCK_TAI", tai + uint64(time.Second), false},
	}
	// An Ethernet frame with an IPv4 header is enough: the program reads
	// only the skb's fields.
	frame := make([]byte, 14+20)
	binary.BigEndian.PutUint16(frame[12:], unix.ETH_P_IP)
	frame[14] = 0x45
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := make([]byte, skbCtxSize)
			binary.LittleEndian.PutUint64(in[skbTstampOff:], tt.stamp)
			out := make([]byte, skbCtxSize)
			ret, err := objs.Prog.Run(&ebpf.RunOptions{Data: frame, Context: in, ContextOut: out})
			if err != nil {
				t.Fatalf("run clock_scrub: %v", err)
			}
			if int32(ret) != -1 {
				t.Errorf("verdict %d, want -1 (let the packet go on)", int32(ret))
			}
			got := binary.LittleEndian.Uint64(out[skbTstampOff:])
			want := tt.stamp
			if tt.cleared {
				want = 0
			}
			if got != want {
				t.Errorf("tstamp %d after the program, want %d", got, want)
			}
		})
	}
}
