// Package testbed builds emulated datacenter paths out of network namespaces
// and veth pairs, drives real TCP traffic through them with a chosen
// congestion control, and samples the bottleneck queue.
//
// It always tears down what it built: every constructor either returns a
// fully built topology or removes whatever it had created before returning
// the error, and Close removes every namespace and link of a topology.
//
// The package is used by integration tests, the demo, and later benchmarks.
// It needs CAP_NET_ADMIN and CAP_SYS_ADMIN (in practice: root), because it
// creates named network namespaces under /var/run/netns, exactly like
// `ip netns add`, so that `ip netns exec NAME ...` works on them.
//
// Test traffic only ever flows between the namespaces a topology creates.
// Addresses come from 198.18.0.0/15 (IPv4, RFC 2544 benchmarking range) and
// fd00::/8 (IPv6 unique local addresses). Veth pairs are created directly
// between two of the topology's namespaces and never appear in the initial
// network namespace.
package testbed
