package workload

import "fmt"

// WebSearchMSS is the payload size, in bytes, of one packet in the
// web-search table: the table lists sizes in packets, and a packet carries
// 1460 bytes (a 1500-byte Ethernet MTU minus 40 bytes of IPv4 and TCP
// headers).
const WebSearchMSS = 1460

// packetPoint is one row of a flow-size table given in packets.
type packetPoint struct {
	packets int64
	prob    float64
}

// webSearchPackets returns a fresh copy of the web-search flow-size table,
// with sizes in packets of WebSearchMSS bytes and cumulative probabilities.
//
// The distribution is the background-flow size distribution of a
// production web-search cluster, measured in the DCTCP paper (Alizadeh et
// al., "Data Center TCP (DCTCP)", SIGCOMM 2010, section 2); the PowerTCP
// and HPCC evaluations use the same workload. The points are the commonly
// used digitisation of the paper's flow-size plot, in packets: 15% of flows are 6 packets
// (about 9 KB) long, and the largest flows are 20000 packets (about
// 29 MB). Its mean is about 1141 packets, 1.67 MB.
func webSearchPackets() []packetPoint {
	return []packetPoint{
		{packets: 6, prob: 0.15},
		{packets: 13, prob: 0.20},
		{packets: 19, prob: 0.30},
		{packets: 33, prob: 0.40},
		{packets: 53, prob: 0.53},
		{packets: 133, prob: 0.60},
		{packets: 667, prob: 0.70},
		{packets: 1333, prob: 0.80},
		{packets: 3333, prob: 0.90},
		{packets: 6667, prob: 0.97},
		{packets: 20000, prob: 1.00},
	}
}

// WebSearch returns the web-search flow-size distribution in bytes (the
// packet counts of the published table times WebSearchMSS), from 8760 bytes
// (with probability 0.15) to 29.2 MB, with a mean of about 1.67 MB
// (1140.98 packets × 1460 bytes = 1665830.8 bytes).
func WebSearch() CDF {
	table := webSearchPackets()
	pts := make([]CDFPoint, len(table))
	for i, row := range table {
		pts[i] = CDFPoint{Bytes: row.packets * WebSearchMSS, Prob: row.prob}
	}
	c, err := NewCDF(pts)
	if err != nil {
		// The table is a constant checked by the tests; this cannot happen.
		panic(fmt.Sprintf("workload: built-in web-search table is invalid: %v", err))
	}
	return c
}
