# Per CC: each repeat's CPU busy with On-Ramp less without (points), median and range.
[.variants[] | {cc, on: (.name | test("onramp")), runs: [.runs[] | {r: .repeat, c: .cpu_busy}]}]
| group_by(.cc)[]
| .[0].cc as $cc
| (.[] | select(.on == false) | .runs) as $a
| (.[] | select(.on == true) | .runs) as $b
| [$a[] as $x | $b[] | select(.r == $x.r) | (.c - $x.c) * 100] | sort
| "\($cc): CPU busy with On-Ramp less without, per repeat: median \(.[length / 2 | floor] * 10 | round / 10), \(.[0] * 10 | round / 10) to \(.[-1] * 10 | round / 10) points over \(length) repeats"
