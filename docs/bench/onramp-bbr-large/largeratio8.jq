# largeratio.jq over repeats 0 to 7 only (workload seeds 1 to 8), those that
# the 8-repeat runs share with the 16-repeat ones.
.variants |= map(.runs |= map(select(.repeat < 8))) |
[.variants[] | {cc, on: (.name | test("onramp")), runs: [.runs[] | {r: .repeat, m: (.fct[] | select(.bucket == ">1MB") | .mean_us)}]}]
| group_by(.cc)[]
| .[0].cc as $cc
| (.[] | select(.on == false) | .runs) as $a
| (.[] | select(.on == true) | .runs) as $b
| [range(0; $a | length) as $i | (($b[] | select(.r == $a[$i].r) | .m) / $a[$i].m)] | sort
| "\($cc): flows over 1 MB, mean FCT with/without On-Ramp per repeat: median \(.[length / 2 | floor] * 100 | round / 100), \(.[0] * 100 | round / 100)-\(.[-1] * 100 | round / 100)"
