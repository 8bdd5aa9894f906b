package testbed

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Counters reads one group of the SNMP counters of the host's namespace
// from /proc/net/<file> ("snmp" or "netstat"), as `nstat` shows them:
// group "Tcp" of snmp, say, or "TcpExt" of netstat, keyed by the name
// after the group ("InCsumErrors", "TCPLossProbes"). The values are
// signed: snmp's Tcp MaxConn is -1. The read runs on a thread inside the
// namespace, through /proc/thread-self, because /proc/net is the
// process's namespace, not the thread's.
func (h *Host) Counters(file, group string) (map[string]int64, error) {
	var text []byte
	if err := h.Do(func() (err error) {
		text, err = os.ReadFile(filepath.Join("/proc/thread-self/net", file))
		return err
	}); err != nil {
		return nil, fmt.Errorf("read %s counters of %s: %w", group, h.Name, err)
	}
	c, err := parseCounters(string(text), group)
	if err != nil {
		return nil, fmt.Errorf("%s of %s: %w", file, h.Name, err)
	}
	return c, nil
}

// parseCounters reads the counters of group from the text of
// /proc/net/snmp or netstat: a line of names after "group:", then one of
// values.
func parseCounters(text, group string) (map[string]int64, error) {
	lines := strings.Split(text, "\n")
	for i := 0; i+1 < len(lines); i++ {
		names, vals := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || names[0] != group+":" {
			continue
		}
		if len(vals) != len(names) || vals[0] != group+":" {
			return nil, fmt.Errorf("%s has %d names and %d values", group, len(names)-1, len(vals)-1)
		}
		out := make(map[string]int64, len(names)-1)
		for j := 1; j < len(names); j++ {
			v, err := strconv.ParseInt(vals[j], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s%s: %w", group, names[j], err)
			}
			out[names[j]] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("no %s counters", group)
}
