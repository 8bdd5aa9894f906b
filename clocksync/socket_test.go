package clocksync

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/internal/testutil/testnet"
)

// TestRestartIDsMatchesStampsAgain sends datagrams from the probe socket
// to itself, restarts the kernel's numbering of its transmit stamps as a
// failed send does, and checks that the stamps of the datagrams sent
// after it still reach their own callbacks: the kernel counts from 0
// again, as nextID does.
func TestRestartIDsMatchesStampsAgain(t *testing.T) {
	testutil.RequireRoot(t)
	h := testnet.NewPair(t).A
	var s *socket
	err := h.Do(func() error {
		var err error
		s, err = openSocket(netip.MustParseAddrPort("[::1]:0"), "")
		return err
	})
	if err != nil {
		t.Fatalf("open the probe socket: %v", err)
	}
	defer s.close()
	port, err := s.port()
	if err != nil {
		t.Fatal(err)
	}
	self := netip.AddrPortFrom(netip.IPv6Loopback(), port)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); s.readStamps(stop) }()
	defer func() { close(stop); <-done }()

	stamped := make(chan int, 16)
	send := func(tag int) {
		t.Helper()
		if err := s.sendPair(self, []byte("a"), []byte("b"), func(idx int, at time.Time) { stamped <- tag*10 + idx }); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	want := func(tags ...int) {
		t.Helper()
		got := map[int]bool{}
		deadline := time.After(5 * time.Second)
		for len(got) < len(tags) {
			select {
			case v := <-stamped:
				got[v] = true
			case <-deadline:
				t.Fatalf("stamps %v of %v arrived", got, tags)
			}
		}
		for _, tag := range tags {
			if !got[tag] {
				t.Errorf("stamp %d missing; got %v", tag, got)
			}
		}
	}
	send(1)
	send(2)
	want(10, 11, 20, 21)
	s.sendMu.Lock()
	s.restartIDs()
	s.sendMu.Unlock()
	send(3)
	want(30, 31)
}
