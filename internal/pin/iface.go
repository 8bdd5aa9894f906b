package pin

// Pins named by interface. bpffs is one tree for the whole host, while
// interface names and indexes belong to a network namespace, so what is
// pinned for an interface goes in a directory named by the interface's
// name, its index and the inode number of its network namespace
// (/proc/thread-self/ns/net): together unique on the host while the
// namespace lives. See IfaceKey.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/kernel"
)

// IfaceKey names an interface's pin directory: String writes it
// <name>-<index>-ns<netns inode>, with '.' in the name written %2e and
// '%' written %25, because bpffs refuses dots in names (eth0.100 with
// index 7 in netns 4026531840 is eth0%2e100-7-ns4026531840).
type IfaceKey struct {
	// Name is the interface's name when the pins were made.
	Name string
	// Index is the interface's index, above 0.
	Index int
	// Netns is the inode number of the interface's network namespace,
	// as CurrentNetns returns it.
	Netns uint64
}

// String is the name of k's pin directory.
func (k IfaceKey) String() string {
	var b strings.Builder
	for _, c := range []byte(k.Name) {
		switch c {
		case '.':
			b.WriteString("%2e")
		case '%':
			b.WriteString("%25")
		default:
			b.WriteByte(c)
		}
	}
	return fmt.Sprintf("%s-%d-ns%d", b.String(), k.Index, k.Netns)
}

// ParseIfaceKey reads a directory name that IfaceKey.String wrote. It
// reports false for any other name, including other spellings of a key
// (eth0%2E1-3-ns5, an index of 0, ...).
func ParseIfaceKey(s string) (IfaceKey, bool) {
	rest, ns, ok := cutLast(s, "-ns")
	if !ok {
		return IfaceKey{}, false
	}
	esc, idx, ok := cutLast(rest, "-")
	if !ok || esc == "" {
		return IfaceKey{}, false
	}
	var k IfaceKey
	var err error
	if k.Netns, err = strconv.ParseUint(ns, 10, 64); err != nil {
		return IfaceKey{}, false
	}
	if k.Index, err = strconv.Atoi(idx); err != nil || k.Index <= 0 {
		return IfaceKey{}, false
	}
	k.Name = strings.NewReplacer("%2e", ".", "%25", "%").Replace(esc)
	// Only the canonical spelling is a key.
	return k, k.String() == s
}

// cutLast splits s around the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// CurrentNetns returns the inode number of the calling thread's network
// namespace, /proc/thread-self/ns/net.
func CurrentNetns() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return 0, fmt.Errorf("identify this thread's network namespace: %w", err)
	}
	return st.Ino, nil
}

// IfaceGone reports whether the calling thread's network namespace has no
// interface with index index any more.
func IfaceGone(index int) bool {
	_, err := net.InterfaceByIndex(index)
	return err != nil
}

// IfaceNow returns the name that the interface of k, looked up by index in
// the calling thread's network namespace, has now, or k.Name when it is
// gone.
func IfaceNow(k IfaceKey) string {
	if ifi, err := net.InterfaceByIndex(k.Index); err == nil {
		return ifi.Name
	}
	return k.Name
}

// PrivateMountNS reports whether this process has a mount namespace of
// its own, unlike its parent: `ip netns exec` makes one, with a fresh
// /sys that hides the host's bpffs.
func PrivateMountNS() bool {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return false
	}
	parent, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid()))
	return err == nil && parent != self
}

// EnsureLasting makes sure pins that must outlive this process can go
// under host's bpffs, mounting it where host.EnsureBPFFS would, and
// returns host.EnsureBPFFS's notes. It refuses, with an error of kind
// kernel.KindNoBPFFS, when the bpffs is the default one, is not mounted,
// and this process has a private mount namespace (PrivateMountNS): pins
// made there would vanish when the namespace ends with this process. what
// names what the pins hold, for the error's problem ("an INT hop",
// "On-Ramp"); fix is the error's fix.
func EnsureLasting(host kernel.Host, what, fix string) ([]string, error) {
	if ok, err := kernel.IsBPFFS(host.BPFFS); err == nil && ok {
		return nil, nil
	}
	if host.IsDefaultBPFFS() && PrivateMountNS() {
		return nil, kernel.NewError(kernel.KindNoBPFFS, fix, nil,
			"%s is not a bpffs here: this command has a mount namespace of its own (ip netns exec makes one), and %s pinned in it would be detached when ccload exits",
			host.BPFFS, what)
	}
	return host.EnsureBPFFS()
}

// FindIfaceDirs lists the per-interface directories below root (named by
// IfaceKey) of network namespace ns: every one when ifindex < 0; else
// those of the interface with index ifindex, and those left from a
// deleted interface that was called name. They are sorted by name.
func FindIfaceDirs(root, name string, ifindex int, ns uint64) ([]IfaceKey, error) {
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", root, err)
	}
	var keys []IfaceKey
	for _, e := range entries {
		k, ok := ParseIfaceKey(e.Name())
		if !ok || !e.IsDir() || k.Netns != ns {
			continue
		}
		if ifindex < 0 || k.Index == ifindex || (k.Name == name && IfaceGone(k.Index)) {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Name < keys[j].Name })
	return keys, nil
}

// DetachTarget resolves the interface that a detach names, in the calling
// thread's network namespace: the namespace, and the interface's index,
// or 0 when no interface has that name any more (its pins are then found
// by the name it had).
func DetachTarget(name string) (ns uint64, ifindex int, err error) {
	if ns, err = CurrentNetns(); err != nil {
		return 0, 0, err
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return 0, 0, fmt.Errorf("list network interfaces: %w", err)
	}
	for _, ifi := range ifs {
		if ifi.Name == name {
			return ns, ifi.Index, nil
		}
	}
	return ns, 0, nil
}

// ListIfaceDirs reads every per-interface directory below root of the
// calling thread's network namespace with read, in name order.
func ListIfaceDirs[T any](root string, read func(IfaceKey) T) ([]T, error) {
	ns, err := CurrentNetns()
	if err != nil {
		return nil, err
	}
	keys, err := FindIfaceDirs(root, "", -1, ns)
	if err != nil {
		return nil, err
	}
	out := []T{}
	for _, k := range keys {
		out = append(out, read(k))
	}
	return out, nil
}
