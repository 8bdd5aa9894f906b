// Package e2e holds ccload's end-to-end scenario tests: real TCP through
// network-namespace topologies (testbed), with ccload's congestion
// controls attached, INT enabled and INT hops on the routers. They check
// what a user would see: the kernel runs the CC, data arrives intact, INT
// records reach both ends, and queues behave as the CCs promise, with
// margins wide enough for a busy 2-CPU machine. Figures that depend on
// the machine's speed (drain times, utilisation) are reported here and
// measured, over repeats, by the bench.
//
// The package has no API; it exists for its tests.
package e2e
