package testutil

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// InNewNetns runs fn on a locked thread in a new network namespace, and
// returns the thread to the test's namespace afterwards; the namespace
// goes away with the last device in it. fn runs on another goroutine than
// the test's: it reports with t.Error and returns, never t.Fatal.
// InNewNetns skips without root.
func InNewNetns(t testing.TB, fn func()) {
	t.Helper()
	RequireRoot(t)
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
		t.Fatal("the work in the test's netns did not finish in a minute")
	}
}

// WithFragsTap runs fn as InNewNetns does, with one tap device, name, up
// in the namespace; the device goes when fn returns. The device is made
// so that the kernel receives a frame's headers outside the skb's linear
// part: BPF_PROG_TEST_RUN always builds a linear skb, and veth forwards
// the linear skbs TCP builds, so this is how a test meets what some
// drivers deliver. With IFF_NAPI_FRAGS each part of a write after the
// first lands in a page fragment, and with GRO off nothing pulls the
// headers up before tc ingress runs. write sends one frame as parts
// (empty ones left out). WithFragsTap skips without root or without
// /dev/net/tun.
func WithFragsTap(t testing.TB, name string, fn func(write func(parts ...[]byte) error)) {
	t.Helper()
	RequireRoot(t)
	RequireFile(t, "/dev/net/tun", "the tun driver (CONFIG_TUN), which makes frames with split headers")
	InNewNetns(t, func() {
		tap, err := openFragsTap(name)
		if err != nil {
			t.Error(err)
			return
		}
		defer tap.Close()
		fn(func(parts ...[]byte) error {
			// An empty part is an error to the tap: leave them out.
			parts = slices.DeleteFunc(slices.Clone(parts), func(p []byte) bool { return len(p) == 0 })
			n, err := unix.Writev(int(tap.Fd()), parts)
			if err != nil {
				return fmt.Errorf("write a frame to tap %s: %w", name, err)
			}
			want := 0
			for _, p := range parts {
				want += len(p)
			}
			if n != want {
				return fmt.Errorf("write a frame to tap %s: %d of %d bytes", name, n, want)
			}
			return nil
		})
	})
}

// OpenTun creates the layer-3 tun device name (IFF_TUN: no Ethernet
// header) in the calling thread's network namespace. It goes away when
// the returned file is closed.
func OpenTun(name string) (*os.File, error) {
	return openTun(name, unix.IFF_TUN|unix.IFF_NO_PI)
}

// openTun creates the tun or tap device name with flags.
func openTun(name string, flags uint16) (_ *os.File, err error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	dev := os.NewFile(uintptr(fd), "/dev/net/tun")
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		dev.Close()
		return nil, err
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		dev.Close()
		return nil, fmt.Errorf("create tun device %s (flags %#x): %w", name, flags, err)
	}
	return dev, nil
}

// openFragsTap creates the tap device name in the calling thread's network
// namespace, with IFF_NAPI_FRAGS, GRO off and the link up. The device
// goes away when the returned file is closed.
func openFragsTap(name string) (_ *os.File, err error) {
	tap, err := openTun(name, unix.IFF_TAP|unix.IFF_NO_PI|unix.IFF_NAPI|unix.IFF_NAPI_FRAGS)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			tap.Close()
		}
	}()
	sock, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(sock)
	// ETHTOOL_SGRO takes a struct ethtool_value through ifr_data.
	gro := struct{ cmd, data uint32 }{cmd: unix.ETHTOOL_SGRO, data: 0}
	var req struct {
		name [unix.IFNAMSIZ]byte
		data unsafe.Pointer
		_    [16]byte
	}
	copy(req.name[:], name)
	req.data = unsafe.Pointer(&gro)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(sock), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&req)))
	runtime.KeepAlive(&req)
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
