package pin

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// UpdatePinnedLink swaps prog in for the program of the link pinned at
// path (BPF_LINK_UPDATE): the link, its ID and its pin stay, and the hook
// runs the old program or the new one, never neither. It works for every
// link type whose kernel side supports updates: cgroup links (sockops),
// TCX links, and others; prog must have the link's program type and
// attach type. A missing path yields an error that wraps os.ErrNotExist.
func UpdatePinnedLink(path string, prog *ebpf.Program) error {
	lnk, err := link.LoadPinnedLink(path, nil)
	if err != nil {
		return fmt.Errorf("open the link pinned at %s: %w", path, err)
	}
	defer lnk.Close()
	if err := lnk.Update(prog); err != nil {
		return fmt.Errorf("update the link pinned at %s to program %s: %w", path, prog, err)
	}
	return nil
}
