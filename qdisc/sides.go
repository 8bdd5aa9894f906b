package qdisc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// A per-interface pin directory (an INT hop's, On-Ramp's) holds one pinned
// attachment per side of the interface, at SidePin(dir, side). The helpers
// below inspect and detach such a set as a whole.

// Sides lists the sides of an interface, egress first.
func Sides() []Direction { return []Direction{Egress, Ingress} }

// SidePin is where the attachment on side is pinned in the per-interface
// pin directory dir: dir/tc_egress or dir/tc_ingress.
func SidePin(dir string, side Direction) string { return filepath.Join(dir, "tc_"+side.String()) }

// SidesState is what InspectPinnedSides found.
type SidesState struct {
	// Method is how the egress attachment (or else the ingress one) is
	// attached.
	Method Method
	// Attached reports whether every pinned side still runs on the
	// interface; false when no side is pinned.
	Attached bool
	// Problems are the sides that could not be inspected, and why.
	Problems []string
}

// InspectPinnedSides inspects the attachments pinned in dir for iface, an
// interface of the calling thread's network namespace (or the name one
// had).
func InspectPinnedSides(iface, dir string) SidesState {
	var st SidesState
	found, attached := 0, true
	for _, side := range Sides() {
		info, err := InspectPinned(iface, side, SidePin(dir, side))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		found++
		if err != nil {
			st.Problems = append(st.Problems, fmt.Sprintf("cannot inspect the %s program: %v", side, err))
			attached = false
			continue
		}
		if found == 1 || side == Egress {
			st.Method = info.Method
		}
		attached = attached && info.Attached
	}
	st.Attached = found > 0 && attached
	return st
}

// DetachPinnedSides detaches from iface, for each side pinned in dir, the
// attachment that still runs, with DetachPinned. It leaves the pins for
// the caller to remove. An error names the side.
func DetachPinnedSides(iface, dir string) error {
	for _, side := range Sides() {
		path := SidePin(dir, side)
		info, err := InspectPinned(iface, side, path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err == nil && info.Attached {
			err = DetachPinned(iface, side, path)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", iface, side, err)
		}
	}
	return nil
}
