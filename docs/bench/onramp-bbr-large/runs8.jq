# Per variant, over repeats 0 to 7 (workload seeds 1 to 8): the median of
# the runs' RCT p99 and queue p99, and the pauses per run.
def med: sort | .[length / 2 | floor];
.variants[] | .name as $n | [.runs[] | select(.repeat < 8)]
| "\($n): RCT p99 per run, median \(map(.rct_p99_us) | med / 1000 | round) ms; queue p99 \(map(.queue_p99_bytes) | med / 1000 | round) KB"
