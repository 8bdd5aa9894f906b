package testbed

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// DefaultPrefix is the netns name prefix used when none is given.
const DefaultPrefix = "ccl-"

const (
	// maxPrefixLen bounds user supplied prefixes; netns names are file names
	// under /var/run/netns and should stay readable.
	maxPrefixLen = 32

	// ifnamePrefix starts every interface name created by the package.
	ifnamePrefix = "cl"

	// maxIfnameLen is IFNAMSIZ-1, the longest interface name Linux accepts.
	maxIfnameLen = 15
)

// namer hands out the names of one topology instance.
//
// Netns names are prefix + tag + "-" + role; interface names are
// "cl" + tag + "-" + role. The prefix does not go into interface names
// because they are limited to 15 bytes.
type namer struct {
	prefix string
	tag    string // 6 random hex digits, unique per instance
}

func newNamer(prefix string) (namer, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := validatePrefix(prefix); err != nil {
		return namer{}, err
	}

	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		return namer{}, fmt.Errorf("generate instance tag: %w", err)
	}
	return namer{prefix: prefix, tag: hex.EncodeToString(b[:])}, nil
}

// netns returns the netns name for role.
func (n namer) netns(role string) string {
	return n.prefix + n.tag + "-" + role
}

// iface returns the interface name for role.
func (n namer) iface(role string) (string, error) {
	name := ifnamePrefix + n.tag + "-" + role
	if len(name) > maxIfnameLen {
		return "", fmt.Errorf("interface name %q is longer than %d bytes", name, maxIfnameLen)
	}
	return name, nil
}

func validatePrefix(prefix string) error {
	if len(prefix) > maxPrefixLen {
		return fmt.Errorf("prefix %q is longer than %d bytes", prefix, maxPrefixLen)
	}
	if prefix[0] == '.' {
		return fmt.Errorf("prefix %q must not start with a dot", prefix)
	}
	for _, c := range prefix {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-', c == '_', c == '.':
		default:
			return fmt.Errorf("prefix %q contains %q; only letters, digits, '-', '_' and '.' are allowed", prefix, c)
		}
	}
	return nil
}
