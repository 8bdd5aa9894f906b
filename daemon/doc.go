// Package daemon is `ccload daemon`: the agent that runs on every host of a
// fleet (as a Kubernetes DaemonSet) and holds the host to a declarative
// config. It is its own package because it is the one place that acts on
// every concern at once (the CCs, INT, the hops, On-Ramp and the clock
// agent) through their own packages: it decides what to change and in
// what order, and they change it.
//
// The daemon reconciles level-triggered: at start, every interval, on
// SIGHUP and when the config file changes. It owns what its config names
// and remembers that in a record pinned under the pin root, so that state
// a later config no longer names is removed while state that the CLI made
// is left alone. Everything it attaches is pinned, so it outlives the
// daemon; a restarted daemon adopts it without registering anything again.
package daemon
