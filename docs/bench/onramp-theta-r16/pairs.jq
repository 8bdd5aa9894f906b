# For θ-PowerTCP: in how many repeats its RCT p99 with On-Ramp was above
# the one without, the two runs of a repeat sharing its workload seed.
[.variants[] | select(.cc == "theta_powertcp")
  | {on: (.name | test("onramp")), runs: [.runs[] | {r: .repeat, p: .rct_p99_us}]}] as $v
| ($v[] | select(.on == false) | .runs) as $a
| ($v[] | select(.on == true) | .runs) as $b
| [range(0; $a | length) as $i | ($b[] | select(.r == $a[$i].r) | .p) > $a[$i].p]
| "\(map(select(.)) | length) of \(length) repeats slower with On-Ramp"
