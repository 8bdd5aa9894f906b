# The newconn probe: per variant, each run's (in repeat order) p99 wait of
# the bench's goroutines to run, its CPUs busy, and its requests' median
# RCT less the start lag (net RCT p50), all from results.json.
.variants[] | "\(.name): " + ([.runs[] | "\(.runtime.sched_latency_p99_us / 1000 | round) ms / \(.cpu_busy * 100 | round) % / \(.net_rct_p50_us / 1000 | round) ms"] | join(", "))
