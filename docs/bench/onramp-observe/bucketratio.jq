# Per CC: the mean FCT of its background flows in bucket $b ("<10KB",
# "10KB-1MB" or ">1MB") with On-Ramp over the one without, per repeat (the
# two runs share a workload seed): the median and the range over the
# repeats, and how many repeats were slower with On-Ramp.
# jq -r --arg b '>1MB' -f bucketratio.jq results.json
[.variants[] | {cc, on: .onramp, runs: [.runs[] | {r: .repeat, m: (.fct[] | select(.bucket == $b) | .mean_us)}]}]
| group_by(.cc)[]
| .[0].cc as $cc
| (.[] | select(.on == false) | .runs) as $a
| (.[] | select(.on == true) | .runs) as $w
| [range(0; $a | length) as $i | (($w[] | select(.r == $a[$i].r) | .m) / $a[$i].m)] | sort
| "\($cc) \($b): mean FCT with/without On-Ramp per repeat: median \(.[length / 2 | floor] * 100 | round / 100), \(.[0] * 100 | round / 100)-\(.[-1] * 100 | round / 100), slower in \([.[] | select(. > 1)] | length) of \(length)"
