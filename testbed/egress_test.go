package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// errTestShim is what the failing test shim returns.
var errTestShim = errors.New("test shim refused")

// closerFunc adapts a function to io.Closer.
type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// shimLog is a test egress shim that puts a bfifo root qdisc on each
// uplink it is given, removes it again on Close, and records both.
type shimLog struct {
	failAt  int // attachment number that fails with errTestShim; -1 never
	panicAt int // attachment number that panics; -1 never

	mu       sync.Mutex
	attached []string // "netns/iface", in order of attachment
	closed   []string // in order of closing
	missing  []string // interfaces already gone when their closer ran
}

func newShimLog() *shimLog {
	return &shimLog{failAt: -1, panicAt: -1}
}

const shimQdiscLimit = 300 << 10

func (l *shimLog) attach(ctx context.Context, h *Host, iface string) (io.Closer, error) {
	where := h.Name + "/" + iface
	l.mu.Lock()
	n := len(l.attached)
	l.attached = append(l.attached, where)
	l.mu.Unlock()
	switch n {
	case l.failAt:
		return nil, errTestShim
	case l.panicAt:
		panic("test shim panics")
	}
	if err := installBottleneck(h, iface, bottleneckSpec{limit: shimQdiscLimit}); err != nil {
		return nil, err
	}
	return closerFunc(func() error {
		l.mu.Lock()
		l.closed = append(l.closed, where)
		l.mu.Unlock()
		nl, err := h.handle()
		if err != nil {
			return err
		}
		link, err := nl.LinkByName(iface)
		if err != nil {
			l.mu.Lock()
			l.missing = append(l.missing, where)
			l.mu.Unlock()
			return fmt.Errorf("shim's interface gone before its closer: %w", err)
		}
		return nl.QdiscDel(&netlink.GenericQdisc{
			QdiscAttrs: netlink.QdiscAttrs{LinkIndex: link.Attrs().Index, Handle: htbRootHandle, Parent: netlink.HANDLE_ROOT},
			QdiscType:  "bfifo",
		})
	}), nil
}

func (l *shimLog) snapshot() (attached, closed, missing []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.attached), slices.Clone(l.closed), slices.Clone(l.missing)
}

// shimmed is a topology built with test shims, seen through what the
// egress tests need.
type shimmed struct {
	hosts       []*Host  // every host, for the teardown check
	uplinks     []string // "netns/iface" of every shimmed uplink, in order
	sender      *Host    // a shimmed host to send from
	senderIface string
	receiver    *Host
	close       func() error
}

// TestSenderEgress attaches a shim to every sender's uplink and checks
// that it was called for each, that traffic crosses it, and that Close
// closes the shims in reverse order while their interfaces still exist.
func TestSenderEgress(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name  string
		build func(ctx context.Context, log, cross *shimLog) (shimmed, error)
	}{
		{"dumbbell", func(ctx context.Context, log, _ *shimLog) (shimmed, error) {
			d, err := NewDumbbell(ctx, DumbbellConfig{Senders: 2, BottleneckRate: 1e9, Prefix: testPrefix("egress"), SenderEgress: log.attach})
			if err != nil {
				return shimmed{}, err
			}
			s := shimmed{hosts: append([]*Host{d.Router, d.Receiver}, d.Senders...), sender: d.Senders[1], senderIface: d.SenderIfaces[1], receiver: d.Receiver, close: d.Close}
			for i, h := range d.Senders {
				s.uplinks = append(s.uplinks, h.Name+"/"+d.SenderIfaces[i])
			}
			return s, nil
		}},
		{"chain", func(ctx context.Context, log, cross *shimLog) (shimmed, error) {
			c, err := NewChain(ctx, ChainConfig{Senders: 2, CrossSenders: 2, Prefix: testPrefix("egress"),
				SenderEgress: log.attach, CrossEgress: cross.attach})
			if err != nil {
				return shimmed{}, err
			}
			s := shimmed{hosts: append([]*Host{c.Router1, c.Router2, c.Receiver}, append(c.Senders, c.CrossSenders...)...),
				sender: c.CrossSenders[1], senderIface: c.CrossIfaces[1], receiver: c.Receiver, close: c.Close}
			for i, h := range c.Senders {
				s.uplinks = append(s.uplinks, h.Name+"/"+c.SenderIfaces[i])
			}
			for j, h := range c.CrossSenders {
				s.uplinks = append(s.uplinks, h.Name+"/"+c.CrossIfaces[j])
			}
			return s, nil
		}},
	}
	baseline := initVeths(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log, cross := newShimLog(), newShimLog()
			s, err := tt.build(testContext(t), log, cross)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.close() })

			attached, _, _ := log.snapshot()
			crossAttached, _, _ := cross.snapshot()
			all := append(attached, crossAttached...)
			if !slices.Equal(all, s.uplinks) {
				t.Errorf("shims attached to %v, want %v", all, s.uplinks)
			}

			// The shim's qdisc is in place and traffic crosses it.
			h, iface := s.sender, s.senderIface
			qs, err := tcQdiscs(testContext(t), h, iface)
			if err != nil {
				t.Fatal(err)
			}
			if len(qs) != 1 || qs[0].Kind != "bfifo" || !qs[0].Root {
				t.Errorf("qdiscs on %s: %+v, want the shim's bfifo root", iface, qs)
			}
			sink := startTestSink(t, s.receiver, netip.AddrPortFrom(s.receiver.Addr, 0))
			if _, err := SendFlow(testContext(t), h, sink.Addr, FlowConfig{Bytes: 1 << 20, Timeout: 5 * time.Second}); err != nil {
				t.Fatalf("flow through the shim: %v", err)
			}
			if err := sink.Close(); err != nil {
				t.Fatal(err)
			}

			if err := s.close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			_, closed, missing := log.snapshot()
			_, crossClosed, crossMissing := cross.snapshot()
			if want := slices.Clone(attached); !slices.Equal(closed, reversed(want)) {
				t.Errorf("shims closed in order %v, want %v", closed, reversed(want))
			}
			if want := slices.Clone(crossAttached); !slices.Equal(crossClosed, reversed(want)) {
				t.Errorf("cross shims closed in order %v, want %v", crossClosed, reversed(want))
			}
			if len(missing)+len(crossMissing) > 0 {
				t.Errorf("interfaces already gone when their shims closed: %v %v", missing, crossMissing)
			}
			assertTornDown(t, netnsNames(s.hosts...), baseline)
		})
	}
}

// TestSenderEgressFailure makes a shim fail or panic part-way and checks
// that the constructor tears everything down, the shims attached before
// included.
func TestSenderEgressFailure(t *testing.T) {
	requireRoot(t)
	tests := []struct {
		name      string
		failAt    int
		panicAt   int
		crossFail bool // the failing shim is the chain's cross shim
		chain     bool
	}{
		{"dumbbell shim fails", 1, -1, false, false},
		{"dumbbell shim panics", -1, 2, false, false},
		{"chain sender shim fails", 0, -1, false, true},
		{"chain cross shim fails", 1, -1, true, true},
		{"chain cross shim panics", -1, 0, true, true},
	}
	baseline := initVeths(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log, cross := newShimLog(), newShimLog()
			bad := log
			if tt.crossFail {
				bad = cross
			}
			bad.failAt, bad.panicAt = tt.failAt, tt.panicAt
			prefix := testPrefix("egrfail")

			var err error
			var panicked any
			func() {
				defer func() { panicked = recover() }()
				if tt.chain {
					var c *Chain
					c, err = NewChain(testContext(t), ChainConfig{Senders: 2, CrossSenders: 2, Prefix: prefix,
						SenderEgress: log.attach, CrossEgress: cross.attach})
					if err == nil {
						c.Close()
					}
					return
				}
				var d *Dumbbell
				d, err = NewDumbbell(testContext(t), DumbbellConfig{Senders: 3, Prefix: prefix, SenderEgress: log.attach})
				if err == nil {
					d.Close()
				}
			}()

			switch {
			case tt.panicAt >= 0:
				if panicked == nil {
					t.Fatalf("the shim's panic did not reach the caller (err %v)", err)
				}
			case !errors.Is(err, errTestShim):
				t.Fatalf("constructor error %v (panic %v), want one wrapping %v", err, panicked, errTestShim)
			default:
				t.Logf("error: %v", err)
			}
			for _, l := range []*shimLog{log, cross} {
				attached, closed, missing := l.snapshot()
				// Every shim that succeeded was closed, in reverse order.
				ok := attached
				if l == bad {
					ok = attached[:max(l.failAt, l.panicAt)]
				}
				if !slices.Equal(closed, reversed(slices.Clone(ok))) {
					t.Errorf("attached %v, closed %v: want the successful ones closed in reverse order", attached, closed)
				}
				if len(missing) > 0 {
					t.Errorf("interfaces gone before their shims closed: %v", missing)
				}
			}
			if left := netnsWithPrefix(t, prefix); len(left) > 0 {
				t.Errorf("netns left behind: %v", left)
			}
			assertNoLinksInInitNetns(t, baseline)
		})
	}
}

// reversed reverses s in place and returns it.
func reversed(s []string) []string {
	slices.Reverse(s)
	return s
}
