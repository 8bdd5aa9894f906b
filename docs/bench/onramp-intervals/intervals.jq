# Each CC's tail ratios (without/with On-Ramp), with the middle 95 % of
# each over resamples of the repeats: the RCT at the percentile the bench
# judges (the p99 here), then each size bucket of the background flows.
# jq -r -f intervals.jq results.json
def r4: . * 10000 | round / 10000;
.comparisons[] | .cc as $cc |
  ([$cc, "RCT p\([.rct_tail_p, 99] | min)", (.rct_tail_ratio | r4), (.rct_tail_ratio_interval | "\(.lo | r4)-\(.hi | r4)")] | @tsv),
  (.fct[] | select(.tail_ratio != null) |
    [$cc, "FCT p\(.tail_p) \(.bucket)", (.tail_ratio | r4), (.tail_ratio_interval | "\(.lo | r4)-\(.hi | r4)")] | @tsv)
