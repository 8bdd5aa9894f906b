package clocksync

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
)

// The agents' messages, all UDP on the agent's port, in network byte
// order (docs/clock.md has the same layout as a table):
//
//	 0  magic "ccCK"
//	 4  version (1)
//	 5  type: probe (1), reply (2) or edges (3)
//	 6  zero
//	 7  index in the pair: 0 or 1 (0 for edges)
//	 8  sequence number of the probe pair (edges: the window's number)
//	12  the type's body
//
// A probe has no body: its timestamps are the kernel's, on both ends.
// A reply is sent as a pair too, once both probes of a pair have arrived.
// Its body carries the replier's receive stamps of that probe pair, and the
// transmit stamps of its previous reply pair to the same prober, which the
// kernel reports only after the pair has left:
//
//	12  receive stamp of probe 0, ns on the replier's clock (int64)
//	20  receive stamp of probe 1
//	28  sequence number of the previous reply pair
//	32  1 when the previous reply's stamps follow, else 0 (uint32)
//	36  transmit stamp of the previous reply's packet 0
//	44  transmit stamp of its packet 1
//
// Edges carry the sender's own estimates, one per peer it probes, to every
// agent it exchanges probes with (the network effect, docs/clock.md):
//
//	12  count (uint16), then two zero bytes
//	16  count entries of 48 bytes: the peer's address (16 bytes, IPv4
//	    v4-mapped), the reference time (int64 ns on the sender's clock),
//	    then offset (ns), drift and standard error (ns) as IEEE-754
//	    float64.

// MessageType says what a message is.
type MessageType uint8

// The message types.
const (
	TypeProbe MessageType = 1
	TypeReply MessageType = 2
	TypeEdges MessageType = 3
)

func (t MessageType) String() string {
	switch t {
	case TypeProbe:
		return "probe"
	case TypeReply:
		return "reply"
	case TypeEdges:
		return "edges"
	}
	return fmt.Sprintf("type %d", uint8(t))
}

const (
	wireMagic    = "ccCK"
	wireVersion  = 1
	headerLen    = 12
	replyBodyLen = 40
	edgesHdrLen  = 4
	edgeLen      = 48
	// MaxEdgesPerMessage bounds an edges message, which then fits a
	// 1280-byte IPv6 minimum MTU with room to spare.
	MaxEdgesPerMessage = 24
)

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("malformed clock message")

// Message is one decoded agent message. Reply is set for TypeReply and
// Edges for TypeEdges.
type Message struct {
	Type  MessageType
	Index uint8
	Seq   uint32
	Reply Reply
	Edges []WireEdge
}

// Reply is a reply's body.
type Reply struct {
	// ProbeRecv are the replier's receive stamps of probe pair Seq.
	ProbeRecv [2]int64
	// PrevSeq and PrevSend are the sequence number and the transmit
	// stamps of the replier's previous reply pair; HasPrev says whether
	// they are set.
	PrevSeq  uint32
	HasPrev  bool
	PrevSend [2]int64
}

// WireEdge is one estimate in an edges message: the sender's clock
// relative to Peer's as a line in the sender's time.
type WireEdge struct {
	// Peer is the other end of the edge.
	Peer netip.Addr
	// Ref is the sender's clock reading at which Offset holds.
	Ref int64
	// Offset is Peer's clock minus the sender's at Ref, ns.
	Offset float64
	// Drift is the offset's slope in the sender's time.
	Drift float64
	// Err is the offset's standard error, ns, positive.
	Err float64
}

// Append encodes m after b.
func (m Message) Append(b []byte) ([]byte, error) {
	if m.Index > 1 {
		return nil, fmt.Errorf("encode %s: pair index %d", m.Type, m.Index)
	}
	b = append(b, wireMagic...)
	b = append(b, wireVersion, byte(m.Type), 0, m.Index)
	b = binary.BigEndian.AppendUint32(b, m.Seq)
	switch m.Type {
	case TypeProbe:
	case TypeReply:
		r := m.Reply
		b = binary.BigEndian.AppendUint64(b, uint64(r.ProbeRecv[0]))
		b = binary.BigEndian.AppendUint64(b, uint64(r.ProbeRecv[1]))
		b = binary.BigEndian.AppendUint32(b, r.PrevSeq)
		var has uint32
		if r.HasPrev {
			has = 1
		}
		b = binary.BigEndian.AppendUint32(b, has)
		b = binary.BigEndian.AppendUint64(b, uint64(r.PrevSend[0]))
		b = binary.BigEndian.AppendUint64(b, uint64(r.PrevSend[1]))
	case TypeEdges:
		if len(m.Edges) > MaxEdgesPerMessage {
			return nil, fmt.Errorf("encode edges: %d edges, at most %d fit a message", len(m.Edges), MaxEdgesPerMessage)
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(m.Edges)))
		b = append(b, 0, 0)
		for _, e := range m.Edges {
			if err := e.check(); err != nil {
				return nil, fmt.Errorf("encode edges: %w", err)
			}
			a := e.Peer.As16()
			b = append(b, a[:]...)
			b = binary.BigEndian.AppendUint64(b, uint64(e.Ref))
			b = binary.BigEndian.AppendUint64(b, math.Float64bits(e.Offset))
			b = binary.BigEndian.AppendUint64(b, math.Float64bits(e.Drift))
			b = binary.BigEndian.AppendUint64(b, math.Float64bits(e.Err))
		}
	default:
		return nil, fmt.Errorf("encode: unknown %s", m.Type)
	}
	return b, nil
}

func (e WireEdge) check() error {
	switch {
	case !e.Peer.IsValid():
		return errors.New("edge without a peer address")
	case !finite(e.Offset) || !finite(e.Drift) || !finite(e.Err):
		return fmt.Errorf("edge to %s: offset, drift and error must be finite", e.Peer)
	case e.Err < minEdgeErr || e.Err > maxEdgeErr:
		return fmt.Errorf("edge to %s: error %g ns outside [%g, %g]", e.Peer, e.Err, minEdgeErr, maxEdgeErr)
	case math.Abs(e.Offset) > maxEdgeOffset:
		return fmt.Errorf("edge to %s: offset %g ns beyond ±%g", e.Peer, e.Offset, maxEdgeOffset)
	case math.Abs(e.Drift) > maxDrift:
		return fmt.Errorf("edge to %s: drift %g beyond ±%g", e.Peer, e.Drift, maxDrift)
	}
	return nil
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// Bounds of an edge's error and offset, in ns, so that an edge's weight
// (1/error²) and its term in the mesh stay finite and non-zero: an error
// of 1000 s says nothing, and clocks 1000 s apart need stepping, not this
// agent.
const (
	maxEdgeErr    = 1e12
	maxEdgeOffset = 1e12
)

// maxDrift bounds a credible drift between two clocks: 1000 ppm, 100
// times what servers show. The clock map's arithmetic relies on it.
const maxDrift = 1e-3

// Decode parses one message. Every error wraps ErrMalformed: the agent
// counts such messages and drops them.
func Decode(b []byte) (Message, error) {
	var m Message
	if len(b) < headerLen {
		return m, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrMalformed, len(b), headerLen)
	}
	if string(b[:4]) != wireMagic {
		return m, fmt.Errorf("%w: bad magic %q", ErrMalformed, b[:4])
	}
	if b[4] != wireVersion {
		return m, fmt.Errorf("%w: version %d, this agent speaks %d", ErrMalformed, b[4], wireVersion)
	}
	m.Type, m.Index, m.Seq = MessageType(b[5]), b[7], binary.BigEndian.Uint32(b[8:12])
	if b[6] != 0 || m.Index > 1 {
		return m, fmt.Errorf("%w: reserved byte %d, pair index %d", ErrMalformed, b[6], m.Index)
	}
	body := b[headerLen:]
	switch m.Type {
	case TypeProbe:
		if len(body) != 0 {
			return m, fmt.Errorf("%w: probe with a %d-byte body", ErrMalformed, len(body))
		}
	case TypeReply:
		if len(body) != replyBodyLen {
			return m, fmt.Errorf("%w: reply body of %d bytes, want %d", ErrMalformed, len(body), replyBodyLen)
		}
		r := &m.Reply
		r.ProbeRecv[0] = int64(binary.BigEndian.Uint64(body[0:]))
		r.ProbeRecv[1] = int64(binary.BigEndian.Uint64(body[8:]))
		r.PrevSeq = binary.BigEndian.Uint32(body[16:])
		switch binary.BigEndian.Uint32(body[20:]) {
		case 0:
		case 1:
			r.HasPrev = true
		default:
			return m, fmt.Errorf("%w: reply's previous-stamps flag is %d", ErrMalformed, binary.BigEndian.Uint32(body[20:]))
		}
		r.PrevSend[0] = int64(binary.BigEndian.Uint64(body[24:]))
		r.PrevSend[1] = int64(binary.BigEndian.Uint64(body[32:]))
	case TypeEdges:
		if m.Index != 0 || len(body) < edgesHdrLen {
			return m, fmt.Errorf("%w: edges header", ErrMalformed)
		}
		n := int(binary.BigEndian.Uint16(body))
		if body[2] != 0 || body[3] != 0 || n > MaxEdgesPerMessage || len(body) != edgesHdrLen+n*edgeLen {
			return m, fmt.Errorf("%w: edges message of %d bytes claims %d edges", ErrMalformed, len(b), n)
		}
		for i := range n {
			p := body[edgesHdrLen+i*edgeLen:]
			e := WireEdge{
				Peer:   netip.AddrFrom16([16]byte(p[:16])).Unmap(),
				Ref:    int64(binary.BigEndian.Uint64(p[16:])),
				Offset: math.Float64frombits(binary.BigEndian.Uint64(p[24:])),
				Drift:  math.Float64frombits(binary.BigEndian.Uint64(p[32:])),
				Err:    math.Float64frombits(binary.BigEndian.Uint64(p[40:])),
			}
			if err := e.check(); err != nil {
				return m, fmt.Errorf("%w: %w", ErrMalformed, err)
			}
			m.Edges = append(m.Edges, e)
		}
	default:
		return m, fmt.Errorf("%w: unknown %s", ErrMalformed, m.Type)
	}
	return m, nil
}
