package testbed

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/sockstamp"
)

// A flow's completion time as the kernel sees it: when the ACK that
// covered its last byte arrived. The kernel stamps that moment itself
// (SO_TIMESTAMPING with SOF_TIMESTAMPING_TX_ACK), in softirq, so the time
// includes no wake-up of the sender's or the receiver's process. Timing a
// flow in user space to the receiver's FIN instead adds four or five of
// them (the sink's accept, read and close, the sender's read of the FIN),
// each a scheduling delay on a loaded host.

// ackStampReport is what the socket reports of the timestamps it is asked
// for: software ones, numbered by byte offset, without the data. It asks
// for none itself.
const ackStampReport = unix.SOF_TIMESTAMPING_SOFTWARE | unix.SOF_TIMESTAMPING_OPT_ID | unix.SOF_TIMESTAMPING_OPT_TSONLY

// sendStamped sends b, the flow's last byte, in a sendmsg of its own that
// asks for its ACK's timestamp (SOF_TIMESTAMPING_TX_ACK in an
// SO_TIMESTAMPING control message). Only that byte is stamped: the error
// queue gets a single message, when every byte is acknowledged and the
// socket is writable. A stamp queued earlier, while the socket could be
// neither read nor written, would be an epoll event of EPOLLERR alone,
// which Go's poller turns into an error on the next read.
func sendStamped(raw syscall.RawConn, b byte) error {
	if err := controlErr(raw, func(fd int) error {
		return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPING, ackStampReport)
	}); err != nil {
		return fmt.Errorf("set SO_TIMESTAMPING (ACK timestamps): %w", err)
	}
	oob := make([]byte, unix.CmsgSpace(4))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = unix.SOL_SOCKET, unix.SO_TIMESTAMPING
	h.SetLen(unix.CmsgLen(4))
	binary.NativeEndian.PutUint32(oob[unix.CmsgLen(0):], unix.SOF_TIMESTAMPING_TX_ACK)
	var sendErr error
	if err := raw.Write(func(fd uintptr) bool {
		_, sendErr = unix.SendmsgN(int(fd), []byte{b}, oob, nil, unix.MSG_DONTWAIT)
		return !errors.Is(sendErr, unix.EAGAIN)
	}); err != nil {
		return fmt.Errorf("write the last byte: %w", err)
	}
	if sendErr != nil {
		return fmt.Errorf("write the last byte: %w", sendErr)
	}
	return nil
}

// maxAckStamps bounds how many error-queue messages lastAckStamp reads.
const maxAckStamps = 1024

// errNoAckStamp says the error queue held no ACK timestamp.
var errNoAckStamp = errors.New("no ACK timestamp in the error queue")

// lastAckStamp reads the ACK timestamps in the error queue (one, after
// sendStamped) and returns the one of the highest byte offset: the time
// (CLOCK_REALTIME) the last byte was acknowledged. Call it once the flow
// is done.
func lastAckStamp(fd int) (time.Time, error) {
	var (
		oob    = make([]byte, 512)
		best   time.Time
		bestID uint32
		found  bool
	)
	for i := 0; i < maxAckStamps; i++ {
		at, id, ok, err := recvAckStamp(fd, oob)
		if errors.Is(err, unix.EAGAIN) {
			break
		}
		if err != nil {
			return time.Time{}, err
		}
		if ok && (!found || id >= bestID) {
			best, bestID, found = at, id, true
		}
	}
	if !found {
		return time.Time{}, errNoAckStamp
	}
	return best, nil
}

// recvAckStamp reads one message of fd's error queue, without waiting,
// into oob: ok says it is an ACK timestamp, of the byte at offset id. An
// empty queue is unix.EAGAIN.
func recvAckStamp(fd int, oob []byte) (at time.Time, id uint32, ok bool, err error) {
	_, oobn, _, _, err := unix.Recvmsg(fd, nil, oob, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
	if errors.Is(err, unix.EAGAIN) {
		return time.Time{}, 0, false, unix.EAGAIN
	}
	if err != nil {
		return time.Time{}, 0, false, fmt.Errorf("read the error queue: %w", err)
	}
	return parseAckStamp(oob[:oobn])
}

// parseAckStamp reads one error-queue message's control data. ok is false
// when the message is not an ACK timestamp.
func parseAckStamp(oob []byte) (at time.Time, id uint32, ok bool, err error) {
	st, ok, err := sockstamp.Parse(oob)
	if err != nil || !ok || st.Kind != unix.SCM_TSTAMP_ACK {
		return time.Time{}, 0, false, err
	}
	return st.At, st.ID, true, nil
}
