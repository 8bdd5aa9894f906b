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

// WithFragsTap runs fn on a locked thread in a new network namespace that
// holds one tap device, name, up, and removes both when fn returns. The
// device is made so that the kernel receives a frame's headers outside
// the skb's linear part: BPF_PROG_TEST_RUN always builds a linear skb, and
// veth forwards the linear skbs TCP builds, so this is how a test meets
// what some drivers deliver. With IFF_NAPI_FRAGS each part of a write
// after the first lands in a page fragment, and with GRO off nothing pulls
// the headers up before tc ingress runs. write sends one frame as parts
// (empty ones left out).
//
// fn runs on another goroutine than the test's: it reports with t.Error
// and returns, never t.Fatal. WithFragsTap skips without root or without
// /dev/net/tun.
func WithFragsTap(t testing.TB, name string, fn func(write func(parts ...[]byte) error)) {
	t.Helper()
	RequireRoot(t)
	RequireFile(t, "/dev/net/tun", "the tun driver (CONFIG_TUN), which makes frames with split headers")
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
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("the work on tap %s did not finish in a minute", name)
	}
}

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
