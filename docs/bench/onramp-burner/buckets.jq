# Per variant: each size bucket's mean FCT over the runs (the mean of the
# runs' means, ms), and the difference with On-Ramp less without.
def mean: add / length;
[.variants[] | {name, on: (.name | test("onramp")), b: ([.runs[].fct[]] | group_by(.bucket) | map({key: .[0].bucket, value: (map(.mean_us) | mean / 1000)}) | from_entries)}]
| (map(select(.on == false))[0].b) as $off
| (map(select(.on == true))[0].b) as $on
| ($off | keys_unsorted[]) as $k
| "\($k): \($off[$k] * 100 | round / 100) ms without, \($on[$k] * 100 | round / 100) ms with, \(($on[$k] - $off[$k]) * 100 | round / 100) ms added"
