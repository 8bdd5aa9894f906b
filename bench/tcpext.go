package bench

import (
	"fmt"

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

// sumTCPExt sums the tcpExtNames counters over hosts. A kernel that lacks
// one of them leaves it out.
func sumTCPExt(hosts []*testbed.Host) (map[string]uint64, error) {
	sum := map[string]uint64{}
	for _, h := range hosts {
		c, err := h.Counters("netstat", "TcpExt")
		if err != nil {
			return nil, err
		}
		for _, k := range tcpExtNames() {
			v, ok := c[k]
			if !ok {
				continue
			}
			if v < 0 {
				return nil, fmt.Errorf("netstat of %s: TcpExt%s is negative: %d", h.Name, k, v)
			}
			sum[k] += uint64(v)
		}
	}
	return sum, nil
}
