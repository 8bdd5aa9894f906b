package clocksync

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sort"
	"sync"
	"time"

	"github.com/facebook/time/timestamp"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/qdisc"
)

// DefaultPort is the agents' UDP port.
const DefaultPort = 3190

// Defaults and bounds of Config.
const (
	DefaultMaxPeers  = 10
	DefaultProbeRate = 100.0
	DefaultWindow    = 2 * time.Second
	DefaultPairEps   = 2 * time.Microsecond
	maxProbeRate     = 1000.0
	minWindow        = 200 * time.Millisecond
	maxWindow        = time.Minute
	// silentWindows is how many windows without an answer make a peer
	// silent: it is replaced when another candidate exists, its entry
	// expires, and the agent says so once.
	silentWindows = 3
	// validWindows is how many windows an entry stays valid unrefreshed.
	validWindows = 3
	// minEdgeErr is the least error an edge is given, ns: the software
	// timestamps' own resolution, so that no edge gets a weight it can't
	// earn from a lucky margin.
	minEdgeErr = 20.0
)

// Config configures an Agent. Zero fields take the defaults above.
type Config struct {
	// Peers are the agents this one may probe and answer.
	Peers PeerSet
	// Listen is the local UDP address; the zero value is [::]:DefaultPort.
	Listen netip.AddrPort
	// MaxPeers is K, how many peers this agent probes (chosen at random).
	MaxPeers int
	// ProbeRate is the probe pairs per second sent to each peer.
	ProbeRate float64
	// Window is how often offsets are estimated and published.
	Window time.Duration
	// PairEps is how far a pair's receive gap may differ from its send
	// gap for the pair to count as pure.
	PairEps time.Duration
	// HWIface turns on the NIC's hardware timestamps on that interface.
	HWIface string
	// Clock is the time source; nil is the host's CLOCK_TAI.
	Clock Clock
	// Offsets is where estimates are published; nil publishes nowhere.
	// OpenForAgent's lock is also what keeps a second agent out of the
	// namespace: a caller that passes nil must not start two.
	Offsets *Offsets
	// Seed seeds the random choice of peers; 0 picks one.
	Seed uint64
	// Logf receives the agent's remarks; nil discards them.
	Logf func(format string, args ...any)
	// OnWindow, when set, receives every window's estimates.
	OnWindow func(WindowReport)
}

func (c Config) withDefaults() Config {
	if !c.Listen.IsValid() {
		c.Listen = netip.AddrPortFrom(netip.IPv6Unspecified(), DefaultPort)
	}
	if c.MaxPeers == 0 {
		c.MaxPeers = DefaultMaxPeers
	}
	if c.ProbeRate == 0 {
		c.ProbeRate = DefaultProbeRate
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.PairEps == 0 {
		c.PairEps = DefaultPairEps
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	return c
}

// Validate checks the configuration, defaults filled in.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case len(c.Peers.Addrs) == 0 && len(c.Peers.Prefixes) == 0:
		return errors.New("no peers: give --peers addresses, prefixes or a file of them")
	case c.MaxPeers < 1 || c.MaxPeers > 1000:
		return fmt.Errorf("--max-peers %d: must be between 1 and 1000", c.MaxPeers)
	case !(c.ProbeRate > 0 && c.ProbeRate <= maxProbeRate):
		return fmt.Errorf("--probe-rate %g: must be above 0 and at most %g pairs per second per peer", c.ProbeRate, maxProbeRate)
	case c.Window < minWindow || c.Window > maxWindow:
		return fmt.Errorf("--window %s: must be between %s and %s", c.Window, minWindow, maxWindow)
	case c.PairEps <= 0 || c.PairEps > time.Millisecond:
		return fmt.Errorf("pair tolerance %s: must be above 0 and at most 1ms", c.PairEps)
	case c.Listen.Port() == 0:
		return errors.New("--port 0: give the port every agent listens on")
	}
	return nil
}

// WindowReport is one window's estimates.
type WindowReport struct {
	// Window counts the agent's windows from 1.
	Window uint32
	// Ref is the local clock reading at which offsets hold (the window's
	// end).
	Ref int64
	// Peers are the peers with an estimate, by address.
	Peers []PeerReport
}

// PeerReport is one peer's estimates in a window.
type PeerReport struct {
	Peer netip.Addr
	// Probed says whether this agent probes the peer.
	Probed bool
	// Direct is the maximum-margin fit of this agent's own probes, valid
	// when HasDirect.
	Direct    Fit
	HasDirect bool
	// Midpoint is the NTP-style estimate from the same probes (the
	// least-delay round trip's midpoint), which holds at MidpointAt on
	// the local clock; valid when HasMidpoint.
	Midpoint    float64
	MidpointAt  int64
	HasMidpoint bool
	// Offset, Drift and Err are the published estimate, after the
	// network effect; Residual is the peer's RMS loop residual.
	Offset, Drift, Err, Residual float64
	// Pairs and PurePairs count the window's probe pairs in both
	// directions.
	Pairs, PurePairs int
}

// Agent is one clock agent: it probes its peers, answers their probes,
// and every window estimates and publishes their offsets.
type Agent struct {
	cfg   Config
	sock  *socket
	scrub *scrubber
	self  map[netip.Addr]bool
	rng   *rand.Rand

	mu         sync.Mutex
	probed     map[netip.Addr]*probeState
	candidates map[netip.Addr]bool
	heard      map[netip.Addr]bool // candidates that sent this agent anything
	explicit   map[netip.Addr]bool // candidates given one by one
	discover   int                 // round-robin cursor over unheard candidates
	probers    map[netip.Addr]*replyState
	edges      map[edgeKey]heardEdge
	published  map[netip.Addr]bool
	window     uint32
	stats      Stats
}

// Stats counts what the agent dropped and why.
type Stats struct {
	Malformed   uint64 `json:"malformed"`
	Foreign     uint64 `json:"foreign"`
	Unexpected  uint64 `json:"unexpected"`
	RateLimited uint64 `json:"rate_limited"`
	SendErrors  uint64 `json:"send_errors"`
	NoStamp     uint64 `json:"no_stamp"`
	RecvErrors  uint64 `json:"recv_errors"`
}

// fatalRecv reports whether a receive error means the socket is broken,
// so that receiving again would fail the same way at once.
func fatalRecv(err error) bool {
	return errors.Is(err, unix.EBADF) || errors.Is(err, unix.ENOTSOCK) ||
		errors.Is(err, unix.EFAULT) || errors.Is(err, unix.EINVAL)
}

type edgeKey struct{ from, to netip.Addr }

type heardEdge struct {
	edge  WireEdge
	heard int64 // local clock
}

// probeState is a peer this agent probes.
type probeState struct {
	to      netip.AddrPort
	seq     uint32
	pending map[uint32]*exchange
	obs     Observations
	ex      []Exchange
	// spans are the last driftSpan windows' observations, and good the
	// last fit believed, sinceGood windows ago (window.go).
	spans      []Observations
	good       Fit
	haveGood   bool
	sinceGood  int
	goodMargin float64
	pairs      int
	pure       int
	answers    int // replies this window
	silent     int // windows without a reply
	warned     bool
}

// exchange is one probe pair and what came back of it.
type exchange struct {
	sent     int64 // local clock of the first probe's send
	tx       [2]int64
	txMask   uint8
	rxPeer   [2]int64
	rxLocal  [2]int64
	rxMask   uint8
	prevSend [2]int64
	havePrev bool
	fwdDone  bool
}

// replyState is a peer that probes this agent.
type replyState struct {
	seq      uint32
	rx0      int64 // local clock
	have0    bool
	prevSeq  uint32
	prevSend [2]int64
	havePrev bool
	replies  int // this window
	last     int64
}

// New opens the agent's socket. Run starts it; Close releases it.
func New(cfg Config) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if cfg.Clock == nil {
		c, err := NewSystemClock()
		if err != nil {
			return nil, err
		}
		cfg.Clock = c
	}
	self, err := localAddrs()
	if err != nil {
		return nil, err
	}
	// The scrubber goes first: the socket's receive stamps are on for
	// the whole host from the moment it opens.
	scrub, err := newScrubber(qdisc.MethodAuto)
	if err != nil {
		return nil, err
	}
	sock, err := openSocket(cfg.Listen, cfg.HWIface)
	if err != nil {
		scrub.close()
		return nil, err
	}
	a := &Agent{
		cfg:        cfg,
		sock:       sock,
		scrub:      scrub,
		self:       self,
		rng:        rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		probed:     map[netip.Addr]*probeState{},
		candidates: map[netip.Addr]bool{},
		heard:      map[netip.Addr]bool{},
		explicit:   map[netip.Addr]bool{},
		probers:    map[netip.Addr]*replyState{},
		edges:      map[edgeKey]heardEdge{},
		published:  map[netip.Addr]bool{},
	}
	for _, p := range cfg.Peers.Addrs {
		if !self[p] {
			a.candidates[p] = true
		}
	}
	for _, p := range cfg.Peers.Explicit {
		a.explicit[p] = true
	}
	if len(a.candidates) == 0 {
		cfg.Logf("no peer address to probe yet: waiting for agents in %v to probe this one", cfg.Peers.Prefixes)
	}
	a.fillPeers()
	return a, nil
}

// localAddrs lists the addresses of the calling thread's network
// namespace, which are never peers.
func localAddrs() (map[netip.Addr]bool, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list this network namespace's addresses: %w", err)
	}
	self := map[netip.Addr]bool{}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				self[ip.Unmap()] = true
			}
		}
	}
	return self, nil
}

// Close closes the socket, then detaches the scrub program. It does not
// touch the published offsets, which expire by themselves.
func (a *Agent) Close() error {
	err := a.sock.close()
	a.scrub.close()
	return err
}

// Port is the UDP port the agent listens on.
func (a *Agent) Port() (uint16, error) { return a.sock.port() }

// Stats returns the agent's drop counters.
func (a *Agent) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

// fillPeers brings the probed set up to MaxPeers from the candidates: the
// agents heard from first, then the addresses given one by one, each
// group at random. The other addresses of a peer prefix are probed only
// once an agent there has answered a discovery probe (discoverPeers).
// Call with mu held (or before Run).
func (a *Agent) fillPeers() {
	if len(a.probed) >= a.cfg.MaxPeers {
		return
	}
	var heard, other []netip.Addr
	for c := range a.candidates {
		switch {
		case a.probed[c] != nil:
		case a.heard[c]:
			heard = append(heard, c)
		case a.explicit[c]:
			other = append(other, c)
		}
	}
	for _, group := range [][]netip.Addr{heard, other} {
		sort.Slice(group, func(i, j int) bool { return group[i].Less(group[j]) })
		a.rng.Shuffle(len(group), func(i, j int) { group[i], group[j] = group[j], group[i] })
	}
	for _, c := range append(heard, other...) {
		if len(a.probed) >= a.cfg.MaxPeers {
			break
		}
		a.probed[c] = &probeState{
			to:      netip.AddrPortFrom(c, a.cfg.Listen.Port()),
			seq:     a.rng.Uint32(),
			pending: map[uint32]*exchange{},
		}
	}
}

// Run probes, answers and publishes until ctx ends. It returns nil then,
// or the error that stopped it.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	stop := make(chan struct{})
	wg.Add(3)
	go func() {
		defer wg.Done()
		a.sock.readStamps(stop)
	}()
	go func() {
		defer wg.Done()
		if err := a.receive(ctx); err != nil {
			errs <- err
			cancel()
		}
	}()
	go func() {
		defer wg.Done()
		a.probe(ctx)
	}()
	ticker := time.NewTicker(a.cfg.Window)
	defer ticker.Stop()
	var err error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-ticker.C:
			a.endWindow()
		}
	}
	cancel()
	close(stop)
	wg.Wait()
	select {
	case err = <-errs:
	default:
	}
	return err
}

// probe sends probe pairs, spread evenly over time and peers.
func (a *Agent) probe(ctx context.Context) {
	interval := func() time.Duration {
		a.mu.Lock()
		n := max(1, len(a.probed))
		a.mu.Unlock()
		return time.Duration(float64(time.Second) / (a.cfg.ProbeRate * float64(n)))
	}
	cur := interval()
	ticker := time.NewTicker(cur)
	defer ticker.Stop()
	var order []netip.Addr
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if i%64 == 0 {
			if next := interval(); next != cur {
				cur = next
				ticker.Reset(cur)
			}
		}
		if len(order) == 0 {
			a.mu.Lock()
			for p := range a.probed {
				order = append(order, p)
			}
			a.mu.Unlock()
			sort.Slice(order, func(i, j int) bool { return order[i].Less(order[j]) })
			if len(order) == 0 {
				continue
			}
		}
		peer := order[0]
		order = order[1:]
		a.probeOne(peer)
	}
}

// pendingLimit bounds the probe pairs awaiting replies per peer.
const pendingLimit = 4096

func (a *Agent) probeOne(peer netip.Addr) {
	a.mu.Lock()
	st := a.probed[peer]
	if st == nil || len(st.pending) >= pendingLimit {
		a.mu.Unlock()
		return
	}
	st.seq++
	seq, to := st.seq, st.to
	ex := &exchange{sent: a.cfg.Clock.Now()}
	st.pending[seq] = ex
	a.mu.Unlock()

	p0, _ := Message{Type: TypeProbe, Index: 0, Seq: seq}.Append(nil)
	p1, _ := Message{Type: TypeProbe, Index: 1, Seq: seq}.Append(nil)
	err := a.sock.sendPair(to, p0, p1, func(idx int, at time.Time) {
		a.mu.Lock()
		defer a.mu.Unlock()
		ex.tx[idx] = a.cfg.Clock.FromKernel(at)
		ex.txMask |= 1 << idx
		if ex.txMask == 3 && a.probed[peer] == st && st.pending[seq] == ex {
			a.complete(st, seq, ex)
		}
	})
	if err != nil {
		a.mu.Lock()
		a.stats.SendErrors++
		delete(st.pending, seq)
		a.mu.Unlock()
	}
}

// receive reads datagrams until ctx ends.
func (a *Agent) receive(ctx context.Context) error {
	buf := make([]byte, 2048)
	oob := make([]byte, 512)
	for ctx.Err() == nil {
		r, err := a.sock.recv(buf, oob)
		if errors.Is(err, errRecvTimeout) {
			continue
		}
		if err != nil {
			if !errors.Is(err, timestamp.ErrNoTimestamp) && fatalRecv(err) {
				return fmt.Errorf("receive probes: %w", err)
			}
			a.mu.Lock()
			if errors.Is(err, timestamp.ErrNoTimestamp) {
				a.stats.NoStamp++
			} else {
				a.stats.RecvErrors++
			}
			a.mu.Unlock()
			continue
		}
		r.local = a.rxTime(r)
		m, err := Decode(r.data)
		if err != nil {
			a.mu.Lock()
			a.stats.Malformed++
			a.mu.Unlock()
			continue
		}
		switch m.Type {
		case TypeProbe:
			a.onProbe(r, m)
		case TypeReply:
			a.onReply(r, m)
		case TypeEdges:
			a.onEdges(r, m)
		}
	}
	return nil
}

// rxTime is a datagram's receive stamp on the agent's clock.
func (a *Agent) rxTime(r received) int64 { return a.cfg.Clock.FromKernel(r.at) }

// onProbe answers a complete probe pair with a reply pair.
func (a *Agent) onProbe(r received, m Message) {
	from := r.from.Addr()
	a.mu.Lock()
	if !a.cfg.Peers.Contains(from) || a.self[from] {
		a.stats.Foreign++
		a.mu.Unlock()
		return
	}
	rs := a.probers[from]
	if rs == nil {
		rs = &replyState{}
		a.probers[from] = rs
	}
	// Heard now, whether or not it gets a reply: expire forgets a
	// prober only after it has been silent for validWindows.
	rs.last = a.cfg.Clock.Now()
	a.heardFrom(from)
	if m.Index == 0 {
		rs.seq, rs.rx0, rs.have0 = m.Seq, r.local, true
		a.mu.Unlock()
		return
	}
	if !rs.have0 || rs.seq != m.Seq {
		a.stats.Unexpected++
		a.mu.Unlock()
		return
	}
	rs.have0 = false
	// Answer at most twice the configured rate, so that this agent is
	// no amplifier for whoever sends it probes.
	if float64(rs.replies) >= 2*a.cfg.ProbeRate*a.cfg.Window.Seconds() {
		a.stats.RateLimited++
		a.mu.Unlock()
		return
	}
	rs.replies++
	body := Reply{
		ProbeRecv: [2]int64{rs.rx0, r.local},
		PrevSeq:   rs.prevSeq, HasPrev: rs.havePrev, PrevSend: rs.prevSend,
	}
	// The stamps of the reply before go out once; this reply's come
	// with the next, once readStamps has them.
	rs.havePrev = false
	a.mu.Unlock()

	r0, _ := Message{Type: TypeReply, Index: 0, Seq: m.Seq, Reply: body}.Append(nil)
	r1, _ := Message{Type: TypeReply, Index: 1, Seq: m.Seq, Reply: body}.Append(nil)
	var (
		stamps [2]int64
		mask   uint8
	)
	err := a.sock.sendPair(r.from, r0, r1, func(idx int, at time.Time) {
		a.mu.Lock()
		defer a.mu.Unlock()
		stamps[idx] = a.cfg.Clock.FromKernel(at)
		if mask |= 1 << idx; mask == 3 {
			rs.prevSeq, rs.prevSend, rs.havePrev = m.Seq, stamps, true
		}
	})
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.stats.SendErrors++
	}
}

// learn makes an agent in the peer prefixes a probe candidate. Call with
// mu held.
func (a *Agent) learn(p netip.Addr) {
	if !a.candidates[p] && !a.self[p] && a.cfg.Peers.Contains(p) {
		a.candidates[p] = true
	}
}

// heardFrom records that an agent in the peer prefixes sent this one a
// message: it is alive, and preferred when a probe slot frees up. Call
// with mu held.
func (a *Agent) heardFrom(p netip.Addr) {
	a.learn(p)
	if a.candidates[p] {
		a.heard[p] = true
	}
}

// onReply records a reply to one of this agent's probe pairs.
func (a *Agent) onReply(r received, m Message) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.probed[r.from.Addr()]
	if st == nil {
		// An answer to a discovery probe (discoverPeers), or a late one.
		a.heardFrom(r.from.Addr())
		return
	}
	if m.Reply.HasPrev {
		if prev := st.pending[m.Reply.PrevSeq]; prev != nil && !prev.havePrev {
			prev.prevSend, prev.havePrev = m.Reply.PrevSend, true
			a.complete(st, m.Reply.PrevSeq, prev)
		}
	}
	ex := st.pending[m.Seq]
	if ex == nil {
		a.stats.Unexpected++
		return
	}
	ex.rxLocal[m.Index] = r.local
	ex.rxMask |= 1 << m.Index
	ex.rxPeer = m.Reply.ProbeRecv
	st.answers++
	a.complete(st, m.Seq, ex)
}

// complete turns what an exchange has gathered into observations: the
// forward pair once its stamps and the peer's are known, the reverse pair
// once the peer's transmit stamps of its reply have come back too. Call
// with mu held.
func (a *Agent) complete(st *probeState, seq uint32, ex *exchange) {
	eps := a.cfg.PairEps.Nanoseconds()
	if !ex.fwdDone && ex.txMask == 3 && ex.rxMask == 3 {
		ex.fwdDone = true
		fwd := Pair{First: Probe{Send: ex.tx[0], Recv: ex.rxPeer[0]}, Second: Probe{Send: ex.tx[1], Recv: ex.rxPeer[1]}}
		st.pairs++
		if fwd.Pure(eps) {
			st.pure++
			st.obs.Forward = append(st.obs.Forward, fwd.First)
		}
	}
	if ex.fwdDone && ex.havePrev {
		rev := Pair{First: Probe{Send: ex.prevSend[0], Recv: ex.rxLocal[0]}, Second: Probe{Send: ex.prevSend[1], Recv: ex.rxLocal[1]}}
		st.pairs++
		if rev.Pure(eps) {
			st.pure++
			st.obs.Reverse = append(st.obs.Reverse, rev.First)
		}
		st.ex = append(st.ex, Exchange{
			Forward: Probe{Send: ex.tx[0], Recv: ex.rxPeer[0]},
			Reverse: rev.First,
		})
		delete(st.pending, seq)
	}
}

// onEdges stores a peer's own estimates for the network effect.
func (a *Agent) onEdges(r received, m Message) {
	from := r.from.Addr()
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.cfg.Peers.Contains(from) || a.self[from] {
		a.stats.Foreign++
		return
	}
	a.heardFrom(from)
	now := a.cfg.Clock.Now()
	for _, e := range m.Edges {
		a.edges[edgeKey{from: from, to: e.Peer}] = heardEdge{edge: e, heard: now}
		a.learn(e.Peer)
	}
}
