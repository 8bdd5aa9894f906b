// Package testbed builds emulated datacenter paths out of network namespaces
// and veth pairs, drives real TCP traffic through them with a chosen
// congestion control, and samples the bottleneck queues.
//
// Topologies:
//   - Pair: two hosts on one veth pair, no router, no shaping.
//   - Dumbbell: N senders → router → receiver, with one bottleneck (htb
//     plus a bfifo or an ECN-marking fq_codel leaf) on the router's egress
//     toward the receiver.
//   - Chain: N senders → Router1 → Router2 → receiver, with a bottleneck on
//     each router's egress along the path, each with its own rate and
//     buffer, plus optional cross senders attached to Router2 whose traffic
//     crosses only the second bottleneck. It serves multi-hop telemetry.
//
// Dumbbell and Chain describe their bottlenecks as Bottlenecks, each with
// the host and interface to sample (SampleQueue) or attach an INT hop to.
// Both take an EgressFunc that attaches a per-host egress shim to every
// sender's uplink once the topology is built; what it returns is closed
// before the topology's links go away.
//
// Traffic: SendFlow sends one TCP flow of a fixed size (FlowConfig.Bytes)
// or for a fixed time (FlowConfig.For) and can poll the sending socket's
// TCP_INFO into FlowResult.Samples; StartSink receives flows and verifies
// every byte against Pattern, including time-bounded flows, whose header
// declares no length.
//
// It always tears down what it built: every constructor either returns a
// fully built topology or removes whatever it had created before returning
// the error (or before a panic in an EgressFunc propagates), and Close
// removes every namespace and link of a topology. A deferred Close
// therefore cleans up after a panic or a failed test as well.
//
// The package is used by integration tests, the demo, and the benchmarks.
// It needs CAP_NET_ADMIN and CAP_SYS_ADMIN (in practice: root), because it
// creates named network namespaces under /var/run/netns, exactly like
// `ip netns add`, so that `ip netns exec NAME ...` works on them.
//
// Test traffic only ever flows between the namespaces a topology creates.
// Addresses come from 198.18.0.0/15 (IPv4, RFC 2544 benchmarking range) and
// fd00::/8 (IPv6 unique local addresses); addr.go holds the plan. Veth
// pairs are created directly between two of the topology's namespaces and
// never appear in the initial network namespace.
package testbed
