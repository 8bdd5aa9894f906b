# Per variant: the median over its runs of each run's queue p50, in KB.
def med: sort | .[length / 2 | floor];
.variants[] | "\(.name): queue p50, median run \([.runs[].queue_p50_bytes] | med / 1000 | round) KB"
