package onramp

// Who removes the fq root. Enable installs fq at the root of an interface
// that has none, and Disable removes it again, but only when Enable
// installed it: an fq that was there before stays. That ownership is
// recorded in an empty directory, <pin root>/onramp/fq/<interface key>,
// made BEFORE the fq goes in and removed only AFTER it is out, so that a
// process killed at any moment between leaves the record, and Recover
// removes the fq root of every record whose interface has no On-Ramp
// (qdisc.RemoveFQRoot removes only a root that ccload installed: handle
// cc0f:). A record made just before a kill, whose fq never went in, only
// makes Recover find no root of ccload's to remove.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ccload/ccload/internal/kernel"
	"github.com/ccload/ccload/internal/pin"
	"github.com/ccload/ccload/qdisc"
)

// fqDirName is the directory of the fq records below On-Ramp's.
const fqDirName = "fq"

func (o *OnRamp) fqDir() string { return filepath.Join(o.root(), fqDirName) }

func (o *OnRamp) fqRecord(k pin.IfaceKey) string { return filepath.Join(o.fqDir(), k.String()) }

// recordFQ records that On-Ramp installs the fq root of k.
func (o *OnRamp) recordFQ(k pin.IfaceKey) error {
	if err := os.MkdirAll(o.fqRecord(k), 0o700); err != nil {
		return fmt.Errorf("record the fq root On-Ramp installs on %s: %w", k.Name, err)
	}
	return nil
}

// ensureFQ makes sure the root qdisc of k, an interface of the calling
// thread's network namespace, is fq, as qdisc.EnsureFQRoot does (replace
// lets it take the place of somebody's root). When it installs one it
// records that first, and reports installed; a failure leaves no record
// and the root as EnsureFQRoot leaves it.
func (o *OnRamp) ensureFQ(k pin.IfaceKey, replace bool) (root qdisc.FQRoot, installed bool, err error) {
	iface := pin.IfaceNow(k)
	root, ok, err := qdisc.InspectFQRoot(iface)
	if err != nil || ok {
		return root, false, err
	}
	if err := o.recordFQ(k); err != nil {
		return root, false, err
	}
	pin.KillPoint("onramp-fq-recorded")
	root, err = qdisc.EnsureFQRoot(iface, qdisc.FQConfig{}, replace)
	if err != nil {
		_ = os.Remove(o.fqRecord(k))
		return root, false, err
	}
	pin.KillPoint("onramp-fq-installed")
	return root, true, nil
}

// dropFQ removes the fq root of k, in the calling thread's network
// namespace, if a record says On-Ramp installed it, then the record. It
// reports whether it removed a root qdisc. An interface that is gone
// took its root qdisc with it.
func (o *OnRamp) dropFQ(k pin.IfaceKey) (removed bool, err error) {
	rec := o.fqRecord(k)
	if !kernel.Exists(rec) {
		return false, nil
	}
	if !pin.IfaceGone(k.Index) {
		iface := pin.IfaceNow(k)
		if removed, err = qdisc.RemoveFQRoot(iface); err != nil {
			return false, fmt.Errorf("remove the fq root qdisc On-Ramp installed on %s: %w", iface, err)
		}
	}
	pin.KillPoint("onramp-fq-removed")
	if err := os.Remove(rec); err != nil && !errors.Is(err, os.ErrNotExist) {
		return removed, fmt.Errorf("drop the record of the fq root of %s: %w", k.Name, err)
	}
	return removed, nil
}
