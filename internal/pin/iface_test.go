package pin

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/testutil"
)

func TestIfaceKeyNames(t *testing.T) {
	for _, tt := range []struct {
		key  IfaceKey
		want string
	}{
		{IfaceKey{"eth0", 2, 4026531840}, "eth0-2-ns4026531840"},
		{IfaceKey{"eth0.100", 7, 1}, "eth0%2e100-7-ns1"},
		{IfaceKey{"a%b", 3, 9}, "a%25b-3-ns9"},
		{IfaceKey{"veth-a-1", 12, 5}, "veth-a-1-12-ns5"},
		{IfaceKey{"x.y-ns3", 4, 8}, "x%2ey-ns3-4-ns8"},
	} {
		got := tt.key.String()
		if got != tt.want {
			t.Errorf("%+v names %q, want %q", tt.key, got, tt.want)
		}
		if strings.Contains(got, ".") {
			t.Errorf("%q has a dot, which bpffs refuses", got)
		}
		back, ok := ParseIfaceKey(got)
		if !ok || back != tt.key {
			t.Errorf("ParseIfaceKey(%q) = %+v, %v; want %+v", got, back, ok, tt.key)
		}
	}
	for _, bad := range []string{"eth0", "eth0-3", "eth0-x-ns5", "-3-ns5", "eth0-3-ns", "eth0-0-ns5",
		"eth0.1-3-ns5", "eth0%2E1-3-ns5", "staging-hop-eth0-3-ns5-123"} {
		if k, ok := ParseIfaceKey(bad); ok {
			t.Errorf("ParseIfaceKey(%q) = %+v, want no key", bad, k)
		}
	}
}

func TestCurrentNetns(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	got, err := CurrentNetns()
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), &st); err != nil {
		t.Fatal(err)
	}
	if got != st.Ino {
		t.Errorf("CurrentNetns() = %d, want the inode of this thread's netns, %d", got, st.Ino)
	}
}

func TestIfaceNow(t *testing.T) {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skipf("no loopback interface: %v", err)
	}
	if IfaceGone(lo.Index) {
		t.Errorf("IfaceGone(%d) = true for lo", lo.Index)
	}
	if got := IfaceNow(IfaceKey{Name: "oldname", Index: lo.Index}); got != "lo" {
		t.Errorf("IfaceNow of lo's index = %q, want lo", got)
	}
	const none = math.MaxInt32
	if !IfaceGone(none) {
		t.Errorf("IfaceGone(%d) = false", none)
	}
	if got := IfaceNow(IfaceKey{Name: "gone0", Index: none}); got != "gone0" {
		t.Errorf("IfaceNow of a deleted interface = %q, want the name it had, gone0", got)
	}
}

func TestEnsureLasting(t *testing.T) {
	// A directory that is not a bpffs, and not the default one, is
	// refused as kernel.EnsureBPFFS refuses it.
	h := kernel.DefaultHost()
	h.BPFFS = t.TempDir()
	if _, err := EnsureLasting(h, "an INT hop", "a fix"); !kernel.IsKind(err, kernel.KindNoBPFFS) {
		t.Errorf("EnsureLasting on a plain directory = %v, want a no-bpffs error", err)
	}
	testutil.RequireRoot(t)
	if ok, err := kernel.IsBPFFS(kernel.DefaultHost().BPFFS); err != nil || !ok {
		testutil.Skip(t, "no bpffs at "+kernel.DefaultHost().BPFFS)
	}
	if PrivateMountNS() {
		testutil.Skip(t, "the test already runs in a mount namespace of its own")
	}
	notes, err := EnsureLasting(kernel.DefaultHost(), "an INT hop", "a fix")
	if err != nil || len(notes) != 0 {
		t.Errorf("EnsureLasting on the mounted bpffs = %v, %v; want nothing to do", notes, err)
	}
	// In a private mount namespace without a bpffs at the default place,
	// as `ip netns exec` leaves it, the pins would not outlive ccload.
	if _, err := exec.LookPath("unshare"); err != nil {
		testutil.Skip(t, "no unshare(1) here")
	}
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"=1")
	if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "child ok" {
		t.Errorf("in a mount namespace of its own: %v\n%s", err, out)
	}
}

// childEnv, set, makes the test binary run ensureLastingChild instead of
// the tests: TestEnsureLasting starts it so in a mount namespace of its own.
const childEnv = "CCLOAD_PIN_ENSURE_LASTING_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		if err := ensureLastingChild(); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println("child ok")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// ensureLastingChild runs in the mount namespace of its own that
// TestEnsureLasting makes, where it hides the bpffs under a tmpfs, as
// `ip netns exec` does with a fresh /sys, and expects EnsureLasting to
// refuse.
func ensureLastingChild() error {
	if !PrivateMountNS() {
		return errors.New("PrivateMountNS() = false under unshare --mount")
	}
	h := kernel.DefaultHost()
	if err := unix.Mount("tmpfs", h.BPFFS, "tmpfs", 0, ""); err != nil {
		return fmt.Errorf("hide the bpffs: %w", err)
	}
	notes, err := EnsureLasting(h, "an INT hop", "use nsenter")
	want := h.BPFFS + " is not a bpffs here: this command has a mount namespace of its own (ip netns exec makes one), and an INT hop pinned in it would be detached when ccload exits"
	if !kernel.IsKind(err, kernel.KindNoBPFFS) || kernel.FixOf(err) != "use nsenter" || !strings.Contains(err.Error(), want) {
		return fmt.Errorf("EnsureLasting in a private mount namespace = %v, %v (fix %q); want %q with the fix given", notes, err, kernel.FixOf(err), want)
	}
	return nil
}
