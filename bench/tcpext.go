package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ccload/ccload/testbed"
)

// tcpExtNames are the TcpExt counters (/proc/net/netstat, as `nstat`
// names them without the "TcpExt" prefix) that say how the senders'
// TCP found and repaired losses: tail loss probes, recoveries and their
// undoing, reordering, timeouts and DSACKs. The onramp bench records
// their growth over each run, summed over the senders' namespaces.
func tcpExtNames() []string {
	return []string{
		"TCPLossProbes",            // tail loss probes sent
		"TCPLossProbeRecovery",     // ... that repaired a lost tail
		"TCPSackRecovery",          // fast recoveries entered, with SACK
		"TCPRenoRecovery",          // ... without
		"TCPSackRecoveryFail",      // recoveries that ended in a timeout
		"TCPFullUndo",              // recoveries undone: all of it (timestamps)
		"TCPPartialUndo",           // ... partly
		"TCPDSACKUndo",             // ... on DSACKs
		"TCPLossUndo",              // loss states undone
		"TCPTimeouts",              // retransmission timeouts
		"TCPSpuriousRTOs",          // ... found spurious (F-RTO)
		"TCPSACKReorder",           // reordering seen through SACK
		"TCPTSReorder",             // ... through timestamps
		"TCPRenoReorder",           // ... through duplicate ACKs
		"TCPDSACKRecv",             // DSACKs received
		"TCPDSACKOfoRecv",          // ... for data beyond the cumulative ACK
		"TCPDSACKIgnoredNoUndo",    // ... that undid nothing
		"TCPFastRetrans",           // retransmissions in fast recovery
		"TCPSlowStartRetrans",      // ... after a timeout
		"TCPLostRetransmit",        // retransmissions lost again
		"TCPSpuriousRtxHostQueues", // retransmissions skipped: the original was still in this host's queues
	}
}

// tcpExtRecoveries are the tcpExtNames that count recoveries entered,
// which the onramp bench reports as one figure.
func tcpExtRecoveries() []string { return []string{"TCPSackRecovery", "TCPRenoRecovery"} }

// tcpExtUndos are the tcpExtNames that count recoveries undone.
func tcpExtUndos() []string {
	return []string{"TCPFullUndo", "TCPPartialUndo", "TCPDSACKUndo", "TCPLossUndo"}
}

// sumOf adds up the counters of m that names lists.
func sumOf(m map[string]uint64, names ...string) uint64 {
	var n uint64
	for _, k := range names {
		n += m[k]
	}
	return n
}

// readTCPExt reads h's namespace's TcpExt counters. The read runs on a
// thread inside the namespace, through /proc/thread-self: /proc/net is the
// process's namespace, not the thread's.
func readTCPExt(h *testbed.Host) (map[string]uint64, error) {
	var text []byte
	if err := h.Do(func() (err error) {
		text, err = os.ReadFile("/proc/thread-self/net/netstat")
		return err
	}); err != nil {
		return nil, fmt.Errorf("read TcpExt counters of %s: %w", h.Name, err)
	}
	return parseNetstat(string(text), "TcpExt")
}

// parseNetstat reads the counters of group from the text of
// /proc/net/netstat (or snmp): a line of names after "group:", then one
// of values.
func parseNetstat(text, group string) (map[string]uint64, error) {
	lines := strings.Split(text, "\n")
	for i := 0; i+1 < len(lines); i++ {
		names, vals := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || names[0] != group+":" {
			continue
		}
		if len(vals) != len(names) || vals[0] != group+":" {
			return nil, fmt.Errorf("netstat: %s has %d names and %d values", group, len(names)-1, len(vals)-1)
		}
		out := make(map[string]uint64, len(names)-1)
		for j := 1; j < len(names); j++ {
			v, err := strconv.ParseUint(vals[j], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("netstat: %s%s: %w", group, names[j], err)
			}
			out[names[j]] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("netstat: no %s counters", group)
}

// sumTCPExt sums the tcpExtNames counters over hosts. A kernel that lacks
// one of them leaves it out.
func sumTCPExt(hosts []*testbed.Host) (map[string]uint64, error) {
	sum := map[string]uint64{}
	for _, h := range hosts {
		c, err := readTCPExt(h)
		if err != nil {
			return nil, err
		}
		for _, k := range tcpExtNames() {
			if v, ok := c[k]; ok {
				sum[k] += v
			}
		}
	}
	return sum, nil
}
