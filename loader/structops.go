package loader

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// What cilium/ebpf does not do for struct_ops, done here with the raw
// syscalls: swap the map of a struct_ops link (its link Update returns
// ErrNotSupported), read which map a struct_ops link runs, and build the
// value whose map update registers a legacy (non-link) struct_ops map, so
// that the loader chooses the moment of registration.

// linkUpdateMap makes the struct_ops link linkFD run newMapFD instead of
// oldMapFD, as BPF_LINK_UPDATE does for struct_ops links since Linux 6.4.
// BPF_F_REPLACE makes the kernel refuse (EPERM) when the link no longer
// runs oldMapFD. For tcp_congestion_ops the kernel adds the new
// registration to its list before it removes the old one, under one lock:
// the name is never missing.
func linkUpdateMap(linkFD, newMapFD, oldMapFD int) error {
	attr := struct {
		linkFD   uint32
		newMapFD uint32
		flags    uint32
		oldMapFD uint32
	}{uint32(linkFD), uint32(newMapFD), unix.BPF_F_REPLACE, uint32(oldMapFD)}
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_LINK_UPDATE, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno != 0 {
		return fmt.Errorf("BPF_LINK_UPDATE: %w", errno)
	}
	return nil
}

// linkInfoStructOpsMapID is the offset of struct_ops.map_id in struct
// bpf_link_info: type, id and prog_id, then the union, 8-aligned.
const linkInfoStructOpsMapID = 16

// structOpsLinkMapID returns the ID of the struct_ops map that the link
// linkFD runs now.
func structOpsLinkMapID(linkFD int) (ebpf.MapID, error) {
	var info [8]uint64 // struct bpf_link_info is larger; the kernel copies what fits
	attr := struct {
		fd   uint32
		len  uint32
		info uint64
	}{uint32(linkFD), uint32(unsafe.Sizeof(info)), uint64(uintptr(unsafe.Pointer(&info[0])))}
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_OBJ_GET_INFO_BY_FD, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(&info)
	if errno != 0 {
		return 0, fmt.Errorf("read link info: %w", errno)
	}
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&info[0])), len(info)*8)
	if typ := binary.NativeEndian.Uint32(raw[0:]); typ != unix.BPF_LINK_TYPE_STRUCT_OPS {
		return 0, fmt.Errorf("link is of type %d, not struct_ops", typ)
	}
	return ebpf.MapID(binary.NativeEndian.Uint32(raw[linkInfoStructOpsMapID:])), nil
}

// structOpsAlive reports whether the kernel still has the struct_ops map
// id: a generation's map lives while its registration, a socket that uses
// it, or a netns default that names it holds it.
func structOpsAlive(id ebpf.MapID, name string) (bool, error) {
	if id == 0 {
		return false, errors.New("no map ID")
	}
	m, err := ebpf.NewMapFromID(id)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer m.Close()
	info, err := m.Info()
	if err != nil {
		return false, err
	}
	// IDs grow until they wrap at 2^31; a match of type and name rules
	// out a reused one.
	return info.Type == ebpf.StructOpsMap && strings.HasPrefix(name, info.Name), nil
}

// States of a struct_ops map (enum bpf_struct_ops_state), at offset 4 of
// the value a lookup returns (struct bpf_struct_ops_common_value).
const (
	opsStateInit   = 0 // never updated: not registered
	opsStateInUse  = 1 // registered (legacy) or attached through a link
	opsStateOffset = 4
)

// opsState returns the state of the struct_ops map m.
func opsState(m *ebpf.Map) (uint32, error) {
	buf := make([]byte, m.ValueSize())
	if err := m.Lookup(uint32(0), &buf); err != nil {
		return 0, fmt.Errorf("read struct_ops state: %w", err)
	}
	return binary.NativeEndian.Uint32(buf[opsStateOffset:]), nil
}

// legacyOpsValue builds the value whose update of a struct_ops map created
// without BPF_F_LINK registers the CC: the kernel's
// bpf_struct_ops_<type> with, in its "data" member, the object's fields
// (name, flags) and, in each function pointer, the descriptor of the
// program that implements it. progSpecs says which program implements
// which member (AttachTo "<type>:<member>"); progs are the loaded ones.
func legacyOpsValue(ops *ebpf.MapSpec, progs map[string]*ebpf.Program, progSpecs map[string]*ebpf.ProgramSpec, kernelTypes *btf.Spec) ([]byte, error) {
	user, ok := btf.As[*btf.Struct](ops.Value)
	if !ok {
		return nil, fmt.Errorf("struct_ops map %s: value is not a struct", ops.Name)
	}
	if len(ops.Contents) != 1 {
		return nil, fmt.Errorf("struct_ops map %s: %d values, want 1", ops.Name, len(ops.Contents))
	}
	data, ok := ops.Contents[0].Value.([]byte)
	if !ok || len(data) < int(user.Size) {
		return nil, fmt.Errorf("struct_ops map %s: no data for %s", ops.Name, user.Name)
	}
	var value *btf.Struct
	if err := kernelTypes.TypeByName("bpf_struct_ops_"+user.Name, &value); err != nil {
		return nil, fmt.Errorf("kernel type of struct_ops %s: %w", user.Name, err)
	}
	var inner *btf.Struct
	var base uint32
	for _, m := range value.Members {
		if m.Name == "data" {
			inner, _ = btf.As[*btf.Struct](m.Type)
			base = m.Offset.Bytes()
		}
	}
	if inner == nil {
		return nil, fmt.Errorf("kernel type %s has no data member", value.Name)
	}
	buf := make([]byte, value.Size)
	for _, um := range user.Members {
		size, err := btf.Sizeof(um.Type)
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w", user.Name, um.Name, err)
		}
		src := data[um.Offset.Bytes() : um.Offset.Bytes()+uint32(size)]
		i := -1
		for j, km := range inner.Members {
			if km.Name == um.Name {
				i = j
			}
		}
		if i < 0 {
			if strings.Trim(string(src), "\x00") != "" {
				return nil, fmt.Errorf("%s.%s is set, and the kernel's %s has no such member", user.Name, um.Name, inner.Name)
			}
			continue
		}
		km := inner.Members[i]
		if km.BitfieldSize != 0 || um.BitfieldSize != 0 {
			return nil, fmt.Errorf("%s.%s: bitfields are not supported", user.Name, um.Name)
		}
		dst := buf[base+km.Offset.Bytes():]
		if _, isPtr := btf.UnderlyingType(um.Type).(*btf.Pointer); isPtr {
			attach := inner.Name + ":" + um.Name
			for name, ps := range progSpecs {
				if ps.AttachTo != attach {
					continue
				}
				p, ok := progs[name]
				if !ok {
					return nil, fmt.Errorf("program %s for %s is not loaded", name, attach)
				}
				binary.NativeEndian.PutUint64(dst[:8], uint64(p.FD()))
			}
			continue
		}
		ksize, err := btf.Sizeof(km.Type)
		if err != nil || ksize != size {
			return nil, fmt.Errorf("%s.%s is %d bytes, the kernel's %d", user.Name, um.Name, size, ksize)
		}
		copy(dst[:size], src)
	}
	return buf, nil
}
