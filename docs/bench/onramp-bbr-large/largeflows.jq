# Per CC: in how many repeats its background flows over 1 MB took longer
# on average with On-Ramp than without, the two runs of a repeat sharing
# its workload seed.
[.variants[] | {cc, on: (.name | test("onramp")), runs: [.runs[] | {r: .repeat, m: (.fct[] | select(.bucket == ">1MB") | .mean_us)}]}]
| group_by(.cc)[]
| .[0].cc as $cc
| (.[] | select(.on == false) | .runs) as $a
| (.[] | select(.on == true) | .runs) as $b
| [range(0; $a | length) as $i | ($b[] | select(.r == $a[$i].r) | .m) > $a[$i].m]
| "\($cc): flows over 1 MB slower on average with On-Ramp in \(map(select(.)) | length) of \(length) repeats"
