package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"
)

const (
	// sinkIdleTimeout fails a connection that delivers nothing for this
	// long.
	sinkIdleTimeout = 30 * time.Second
	// deadlineRefresh is how often the idle deadline is pushed forward.
	deadlineRefresh = time.Second
	// maxSinkConns bounds how many connections one Sink accepts.
	maxSinkConns = 1 << 16
	// acceptBackoff is the pause after a failed Accept.
	acceptBackoff = 10 * time.Millisecond
)

// SinkResult is what a Sink observed on one connection.
type SinkResult struct {
	// Remote is the sender's address.
	Remote netip.AddrPort
	// Seed and Declared are the pattern seed and payload length announced in
	// the header. Declared is -1 if the header was incomplete or, with
	// Unbounded, declared no length.
	Seed     uint64
	Declared int64
	// Unbounded reports that the header declared no length: the flow was
	// time-bounded (FlowConfig.For) and was verified up to EOF.
	Unbounded bool
	// Bytes is the number of payload bytes received, excluding the header.
	Bytes int64
	// OK reports that the header was complete, that exactly Declared bytes
	// (any number, when Unbounded) arrived before EOF, and that they all
	// matched the pattern. An Unbounded stream cut short by a clean close
	// is indistinguishable from a complete one; compare Bytes with the
	// sender's FlowResult.Bytes.
	OK bool
	// Err says why OK is false.
	Err error
	// Duration runs from accept to EOF.
	Duration time.Duration
}

// Sink accepts TCP connections on a host and verifies the bytes it
// receives.
type Sink struct {
	// Addr is the address the sink listens on, with the chosen port.
	Addr netip.AddrPort

	host string
	ln   net.Listener
	wg   sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	conns   map[net.Conn]struct{}
	results []SinkResult
	changed chan struct{} // closed and replaced whenever results grows
}

// StartSink listens on host at addr (port 0 picks a free port). It accepts
// connections until Close, reads each to EOF and checks that the received
// stream is the header followed by Pattern bytes of the declared length, or
// followed by Pattern bytes up to EOF when the header declares no length
// (a time-bounded flow). It
// closes a connection only after recording its result, so a sender that has
// read EOF finds its result in Results.
//
// An unspecified address ("0.0.0.0", "::") listens on all of the host's
// addresses; "::" accepts IPv4 as well.
func StartSink(host *Host, addr netip.AddrPort) (*Sink, error) {
	return StartSinkCC(host, addr, "")
}

// StartSinkCC is StartSink with congestion control cc set on the listening
// socket (none when cc is ""), so that accepted connections run it. That
// matters for a CC that needs ECN, such as DCTCP: the kernel grants ECN to
// an ECT-marked SYN when the listener's CC needs it, whatever the netns's
// net.ipv4.tcp_ecn says. Setting the CC on the socket, unlike the netns
// default, also works for CCs without TCP_CONG_NON_RESTRICTED, such as the
// kernel's dctcp, in a netns other than the initial one.
func StartSinkCC(host *Host, addr netip.AddrPort, cc string) (*Sink, error) {
	if !addr.IsValid() {
		return nil, fmt.Errorf("start sink in netns %s: invalid address %v", host.Name, addr)
	}
	addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	network := "tcp4"
	if addr.Addr().Is6() {
		network = "tcp6"
		if addr.Addr().IsUnspecified() {
			network = "tcp"
		}
	}

	var ln net.Listener
	err := host.Do(func() error {
		var err error
		ln, err = (&net.ListenConfig{Control: SetCC(cc)}).Listen(context.Background(), network, addr.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("start sink on %s in netns %s: %w", addr, host.Name, err)
	}

	s := &Sink{
		Addr:    tcpAddrPort(ln.Addr()),
		host:    host.Name,
		ln:      ln,
		conns:   make(map[net.Conn]struct{}),
		changed: make(chan struct{}),
	}
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

func (s *Sink) acceptLoop() {
	defer s.wg.Done()
	for range maxSinkConns {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(acceptBackoff)
			continue
		}
		if !s.track(c) {
			c.Close()
			return
		}
		s.wg.Add(1)
		go s.serve(c)
	}
}

// track registers c so Close can abort it; false means the sink is closed.
func (s *Sink) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Sink) serve(c net.Conn) {
	defer s.wg.Done()

	start := time.Now()
	res := SinkResult{Remote: tcpAddrPort(c.RemoteAddr()), Declared: -1}
	res.Err = verifyStream(c, &res)
	res.OK = res.Err == nil
	res.Duration = time.Since(start)

	s.mu.Lock()
	s.results = append(s.results, res)
	close(s.changed)
	s.changed = make(chan struct{})
	delete(s.conns, c)
	s.mu.Unlock()

	c.Close()
}

// verifyStream reads one flow from c to EOF, filling in res.
func verifyStream(c net.Conn, res *SinkResult) error {
	idle := time.Now()
	if err := c.SetReadDeadline(idle.Add(sinkIdleTimeout)); err != nil {
		return fmt.Errorf("set read deadline: %w", err)
	}

	var hdr [headerLen]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return fmt.Errorf("read header: %w", err)
	}
	seed, length := parseHeader(hdr[:])
	bounded := length != unknownLength
	if bounded && length < 0 {
		return fmt.Errorf("header declares negative length %d", length)
	}
	res.Seed, res.Declared, res.Unbounded = seed, length, !bounded

	buf := make([]byte, bufferFor(length)) // chunkSize for an unbounded stream
	pattern := newStream(seed)
	var mismatch error
	// Every successful Read returns at least one byte and, for a declared
	// length, more than length bytes is an error, so the loop ends after at
	// most length+1 reads; an unbounded stream ends with the sender's
	// FIN. The idle deadline bounds both in time while the peer stalls,
	// and Sink.Close ends a stream that never stops.
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if bounded && res.Bytes+int64(n) > length {
				res.Bytes += int64(n)
				return fmt.Errorf("received more than the declared %d bytes", length)
			}
			if mismatch == nil {
				if i := pattern.mismatch(res.Bytes, buf[:n]); i >= 0 {
					mismatch = fmt.Errorf("payload differs from pattern at offset %d", res.Bytes+int64(i))
				}
			}
			res.Bytes += int64(n)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read payload at offset %d: %w", res.Bytes, err)
		}
		if now := time.Now(); now.Sub(idle) > deadlineRefresh {
			idle = now
			if err := c.SetReadDeadline(now.Add(sinkIdleTimeout)); err != nil {
				return fmt.Errorf("set read deadline: %w", err)
			}
		}
	}

	if mismatch != nil {
		return mismatch
	}
	if bounded && res.Bytes < length {
		return fmt.Errorf("short stream: got %d of %d bytes", res.Bytes, length)
	}
	return nil
}

// Results returns one SinkResult per finished connection, in order of
// completion.
func (s *Sink) Results() []SinkResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]SinkResult(nil), s.results...)
}

// WaitResults waits until at least n connections have finished, or ctx is
// done, and returns the results so far.
func (s *Sink) WaitResults(ctx context.Context, n int) ([]SinkResult, error) {
	for {
		s.mu.Lock()
		got, changed := len(s.results), s.changed
		s.mu.Unlock()
		if got >= n {
			return s.Results(), nil
		}
		select {
		case <-ctx.Done():
			return s.Results(), fmt.Errorf("wait for %d sink results (have %d): %w", n, got, ctx.Err())
		case <-changed:
		}
	}
}

// Close stops accepting, aborts connections still in progress (their
// results record the error) and waits for all goroutines of the sink. It is
// idempotent.
func (s *Sink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	err := s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()

	s.wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("close sink %s in netns %s: %w", s.Addr, s.host, err)
	}
	return nil
}

// tcpAddrPort converts a TCP net.Addr to a netip.AddrPort with IPv4 unmapped.
func tcpAddrPort(a net.Addr) netip.AddrPort {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}
	}
	ap := ta.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
