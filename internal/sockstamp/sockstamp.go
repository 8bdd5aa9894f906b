// Package sockstamp parses the kernel's socket timestamps
// (SO_TIMESTAMPING) as they come out of a socket's error queue: a
// timestamp control message and the extended error that says what the
// stamp is of (sent, acknowledged) and which datagram or byte it belongs
// to (SOF_TIMESTAMPING_OPT_ID). The bench's flows (the ACK of a flow's last
// byte) and the clock agent (each probe's transmit time) both read them, so
// the parsing lives here once.
package sockstamp

import (
	"encoding/binary"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// Stamp is one error-queue timestamp.
type Stamp struct {
	// At is the timestamp: the hardware one when the message has one,
	// else the software one (CLOCK_REALTIME).
	At time.Time
	// Hardware says At is the NIC's.
	Hardware bool
	// ID is the OPT_ID number: the datagram's for UDP, the byte offset
	// for TCP.
	ID uint32
	// Kind is what was stamped: unix.SCM_TSTAMP_SND, SCM_TSTAMP_SCHED or
	// SCM_TSTAMP_ACK.
	Kind uint32
}

// Parse reads one error-queue message's control data. ok is false when
// the message is no timestamp (an ICMP error, say).
func Parse(oob []byte) (s Stamp, ok bool, err error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return s, false, fmt.Errorf("parse the error queue's control data: %w", err)
	}
	var haveTS, haveInfo bool
	for _, m := range msgs {
		switch {
		case m.Header.Level == unix.SOL_SOCKET &&
			(m.Header.Type == unix.SCM_TIMESTAMPING || m.Header.Type == unix.SO_TIMESTAMPING_NEW):
			// Three timespecs: software, (deprecated), hardware.
			if len(m.Data) < 48 {
				return s, false, fmt.Errorf("SCM_TIMESTAMPING of %d bytes", len(m.Data))
			}
			if at, set := timespec(m.Data[32:48]); set {
				s.At, s.Hardware, haveTS = at, true, true
			} else if at, set := timespec(m.Data[0:16]); set {
				s.At, haveTS = at, true
			}
		case (m.Header.Level == unix.SOL_IP && m.Header.Type == unix.IP_RECVERR) ||
			(m.Header.Level == unix.SOL_IPV6 && m.Header.Type == unix.IPV6_RECVERR):
			var ee unix.SockExtendedErr
			if len(m.Data) < binary.Size(ee) {
				return s, false, fmt.Errorf("extended error of %d bytes", len(m.Data))
			}
			if _, err := binary.Decode(m.Data, binary.NativeEndian, &ee); err != nil {
				return s, false, fmt.Errorf("decode the extended error: %w", err)
			}
			if ee.Origin == unix.SO_EE_ORIGIN_TIMESTAMPING {
				s.ID, s.Kind, haveInfo = ee.Data, ee.Info, true
			}
		}
	}
	return s, haveTS && haveInfo, nil
}

// timespec reads a struct __kernel_timespec; set is false for all zeros.
func timespec(b []byte) (time.Time, bool) {
	sec := int64(binary.NativeEndian.Uint64(b[0:8]))
	nsec := int64(binary.NativeEndian.Uint64(b[8:16]))
	return time.Unix(sec, nsec), sec != 0 || nsec != 0
}
