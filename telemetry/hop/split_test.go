package hop

// The INT hop on a frame whose TCP header the kernel holds outside the
// skb's linear part. BPF_PROG_TEST_RUN always builds a linear skb, and
// veth forwards the linear skbs TCP builds, so the fallback in
// bpf/include/tcpkt.h that pulls split headers in (tcp_parse) needs a
// device that really splits them: a tap with IFF_NAPI_FRAGS puts each
// iovec after the first of a write into a page fragment, and with GRO off
// nothing pulls the headers up before tc ingress.

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/testutil"
	"github.com/ccload/ccload/qdisc"
)

// openFragsTap creates the tap device name in the calling thread's network
// namespace, with IFF_NAPI_FRAGS, GRO off and the link up. The device
// goes away when the returned file is closed.
func openFragsTap(name string) (_ *os.File, err error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	tap := os.NewFile(uintptr(fd), "/dev/net/tun")
	defer func() {
		if err != nil {
			tap.Close()
		}
	}()
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return nil, err
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_NAPI | unix.IFF_NAPI_FRAGS)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		return nil, fmt.Errorf("create tap %s with IFF_NAPI_FRAGS: %w", name, err)
	}
	sock, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(sock)
	// ETHTOOL_SGRO takes a struct ethtool_value through ifr_data.
	gro := struct{ cmd, data uint32 }{cmd: unix.ETHTOOL_SGRO, data: 0}
	var req struct {
		name [unix.IFNAMSIZ]byte
		data uintptr
		_    [16]byte
	}
	copy(req.name[:], name)
	req.data = uintptr(unsafe.Pointer(&gro))
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(sock), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&req)))
	runtime.KeepAlive(&gro)
	if errno != 0 {
		return nil, fmt.Errorf("turn GRO off on %s: %w", name, errno)
	}
	up, err := unix.NewIfreq(name)
	if err != nil {
		return nil, err
	}
	if err := unix.IoctlIfreq(sock, unix.SIOCGIFFLAGS, up); err != nil {
		return nil, fmt.Errorf("read %s's flags: %w", name, err)
	}
	up.SetUint16(up.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(sock, unix.SIOCSIFFLAGS, up); err != nil {
		return nil, fmt.Errorf("set %s up: %w", name, err)
	}
	return tap, nil
}

// inNewNetns runs fn on a locked thread in a new network namespace, and
// returns the thread to its namespace afterwards; the namespace goes away
// with its last device.
func inNewNetns(t *testing.T, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			t.Errorf("get the current netns: %v", err)
			return
		}
		defer orig.Close()
		ns, err := netns.New()
		if err != nil {
			t.Errorf("create a netns: %v", err)
			return
		}
		defer ns.Close()
		defer func() {
			// A thread that cannot go back stays locked, and Go ends it.
			if err := netns.Set(orig); err == nil {
				runtime.UnlockOSThread()
			}
		}()
		fn()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the test's netns work did not finish in a minute")
	}
}

func TestHopOnSplitHeaders(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/dev/net/tun", "the tun driver (CONFIG_TUN), which makes frames with split headers")
	objs, err := load(Config{RateBps: 1_000_000_000, BufferBytes: 1 << 20})
	if err != nil {
		t.Fatalf("load the INT hop: %v", err)
	}
	defer objs.Close()

	v4 := craftTCP(forwardOption(t, 3), 200)
	v6 := testutil.TCPSegment{Sport: 40000, Dport: 5201, Seq: 1000, Ack: 2000, Flags: 0x18, Window: 512,
		Options: forwardOption(t, 3), Payload: 200}.EthernetIPv6(
		[16]byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2},
		[16]byte{0xfd, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2})
	tests := []struct {
		name   string
		frame  []byte
		linear int // bytes of the frame in the first iovec, the skb's linear part
	}{
		{"IPv4, whole frame linear", v4, len(v4)},
		{"IPv4, TCP header in a fragment", v4, 14 + 20},
		{"IPv4, TCP header split", v4, 14 + 20 + 8},
		{"IPv4, IP header split", v4, 14 + 6},
		{"IPv6, whole frame linear", v6, len(v6)},
		{"IPv6, TCP header in a fragment", v6, 14 + 40},
		{"IPv6, options split", v6, 14 + 40 + 24},
		{"IPv6, IP header split", v6, 14 + 10},
	}
	inNewNetns(t, func() {
		tap, err := openFragsTap("ccl-frags0")
		if err != nil {
			t.Error(err)
			return
		}
		defer tap.Close()
		att, err := qdisc.Attach("ccl-frags0", objs.IntHop, qdisc.AttachOptions{Direction: qdisc.Ingress})
		if err != nil {
			t.Errorf("attach the hop to the tap's ingress: %v", err)
			return
		}
		defer att.Close()
		for _, tc := range tests {
			before, err := readStats(objs.HopStats, objs.HopQueue)
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
				return
			}
			iov := [][]byte{tc.frame[:tc.linear]}
			if tc.linear < len(tc.frame) {
				iov = append(iov, tc.frame[tc.linear:])
			}
			if n, err := unix.Writev(int(tap.Fd()), iov); err != nil || n != len(tc.frame) {
				t.Errorf("%s: write the frame to the tap: %d bytes, %v", tc.name, n, err)
				return
			}
			// The write runs the receive path, tc ingress included, before
			// it returns; the loop only guards against a slower kernel.
			var got Stats
			for range 100 {
				if got, err = readStats(objs.HopStats, objs.HopQueue); err != nil || got.Packets > before.Packets {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
				return
			}
			if got.Packets != before.Packets+1 || got.Records != before.Records+1 || got.Malformed != before.Malformed {
				t.Errorf("%s: the hop counted %d packets, %d records, %d malformed; want 1, 1, 0",
					tc.name, got.Packets-before.Packets, got.Records-before.Records, got.Malformed-before.Malformed)
			}
		}
	})
}
