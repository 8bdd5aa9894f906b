# Per CC: in how many repeats its RCT p99 with On-Ramp was above the one
# without, the two runs of a repeat sharing its workload seed.
[.variants[] | {cc, on: (.name | test("onramp")), runs: [.runs[] | {r: .repeat, p: .rct_p99_us}]}]
| group_by(.cc)[]
| .[0].cc as $cc
| (.[] | select(.on == false) | .runs) as $a
| (.[] | select(.on == true) | .runs) as $b
| [range(0; $a | length) as $i | ($b[] | select(.r == $a[$i].r) | .p) > $a[$i].p]
| "\($cc): \(map(select(.)) | length) of \(length) repeats slower with On-Ramp"
