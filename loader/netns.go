package loader

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
)

// A network namespace's default CC (net.ipv4.tcp_congestion_control) is
// not a name: the kernel resolves the name when the sysctl is written and
// keeps a pointer to that registration, holding a reference on it. New
// sockets that take the default get whatever the pointer names, even after
// an upgrade has registered a new generation under the same name, or after
// a legacy swap has unregistered it. So after a swap, every netns whose
// default names the CC must have its sysctl written again, with the same
// name, to point it at the new generation; until then its new sockets get
// the old one (which still works: it is never a fallback to reno).

// procSysDefault is /proc/sys of the process's own network namespace, the
// only ProcSys under which the loader also visits the other namespaces.
const procSysDefault = "/proc/sys"

// fallbackCCs are the CCs a default moves to when ccload takes its CC
// away: cubic where allowed; in a child netns only CCs flagged
// TCP_CONG_NON_RESTRICTED may be the default, and reno always is.
var fallbackCCs = [...]string{"cubic", "reno"}

// setFallbackDefault points the default CC of procSys's netns at cubic,
// or reno, and returns which.
func setFallbackDefault(procSys string) (string, error) {
	var err error
	for _, fb := range fallbackCCs {
		if err = kernel.WriteSysctl(procSys, sysctlDefault, fb); err == nil {
			return fb, nil
		}
	}
	return "", err
}

// isFallback reports whether cc is one of fallbackCCs.
func isFallback(cc string) bool {
	for _, fb := range fallbackCCs {
		if cc == fb {
			return true
		}
	}
	return false
}

// repointResult says what repointDefaults did.
type repointResult struct {
	Own    bool     // the loader's own netns (Host.ProcSys) named the CC and was re-pointed
	Others int      // other network namespaces re-pointed
	Errors []string // namespaces that named the CC but could not be re-pointed
}

// repointDefaults writes name again into the default CC of every network
// namespace whose default is name: the loader's own (Host.ProcSys) and,
// when that is the process's own /proc/sys, every other netns of the
// machine that a process or a bind mount under /run/netns holds.
func (l *Loader) repointDefaults(name string) repointResult {
	var res repointResult
	if def, err := kernel.ReadSysctl(l.host.ProcSys, sysctlDefault); err == nil && def == name {
		if err := kernel.WriteSysctl(l.host.ProcSys, sysctlDefault, name); err != nil {
			res.Errors = append(res.Errors, fmt.Sprintf("this netns: %v", err))
		} else {
			res.Own = true
		}
	}
	if l.host.ProcSys != procSysDefault {
		return res
	}
	for _, ns := range otherNetns() {
		changed, err := repointIn(ns, name)
		switch {
		case err != nil:
			res.Errors = append(res.Errors, fmt.Sprintf("netns %d: %v", ns, err))
		case changed:
			res.Others++
		}
	}
	return res
}

// notes says what r did, for a result's notes.
func (r repointResult) notes(name string) []string {
	var out []string
	if r.Others > 0 {
		out = append(out, fmt.Sprintf("%d other network namespaces default to %s: re-pointed at the new generation", r.Others, name))
	}
	for _, e := range r.Errors {
		out = append(out, "could not re-point a default at the new generation (its new sockets keep the old one): "+e)
	}
	return out
}

// otherNetns lists the inode numbers of the network namespaces that a
// process or a bind mount under /run/netns holds, other than the calling
// thread's, each once.
func otherNetns() []uint64 {
	own, _ := pin.CurrentNetns()
	seen := map[uint64]bool{own: true}
	var out []uint64
	for _, pattern := range []string{"/run/netns/*", "/proc/[0-9]*/ns/net"} {
		matches, _ := filepath.Glob(pattern)
		for _, p := range matches {
			var st unix.Stat_t
			if unix.Stat(p, &st) != nil || seen[st.Ino] {
				continue // a process that exited, a stale mount point, one seen
			}
			seen[st.Ino] = true
			out = append(out, st.Ino)
		}
	}
	return out
}

// repointIn writes name again into the default CC of the netns ns if the
// default is name, from a thread in that netns: /proc/sys/net shows the
// netns of the thread that opens it.
func repointIn(ns uint64, name string) (changed bool, err error) {
	err = pin.InNetns(ns, func() error {
		def, err := kernel.ReadSysctl(procSysDefault, sysctlDefault)
		if err != nil || def != name {
			return err
		}
		changed = true
		return kernel.WriteSysctl(procSysDefault, sysctlDefault, name)
	})
	if errors.Is(err, pin.ErrNetnsGone) {
		return false, nil // gone since we listed it
	}
	return changed, err
}
