package pin

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf/link"
)

// DetachLink unpins the link pinned at path and closes it. Unpinning
// first means that closing our descriptor drops the last reference, so the
// kernel releases the link, and detaches or unregisters what it holds,
// synchronously. A missing pin is not an error.
func DetachLink(path string) error {
	lnk, err := link.LoadPinnedLink(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open pinned link %s: %w", path, err)
	}
	defer lnk.Close()
	if err := lnk.Unpin(); err != nil {
		return fmt.Errorf("unpin %s: %w", path, err)
	}
	return nil
}
